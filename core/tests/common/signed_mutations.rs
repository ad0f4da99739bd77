//! Mutations of a signed stream for the invariant "whatever verifies as valid decodes to
//! exactly what was signed" (proto-spec/integrity.md §8), shared by the proptest
//! (`core/tests/it/signed_props.rs`) and the fuzz target (`fuzz/fuzz_targets/signed_stream.rs`):
//! bytes pick chunk removals, duplications, moves, swaps, insertions and replacements from
//! other recordings (another play under the same key, the same play signed with other
//! chunking and the same nonce, a forged unsigned copy), payload byte changes with the CRC
//! made good, numbering afresh or as found, and a cut.

#![allow(dead_code)]

use bsor_stream_core::bsor;
use bsor_stream_core::integrity::{decode_verified, verify_stream, Verdict};
use bsor_stream_core::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream_core::transcode;

use super::signed_vectors::{replay, sign, KEY_A, NONCE_1, NONCE_2};

type Chunk = (ChunkHeader, Vec<u8>);

/// What mutations draw from: the signed stream's header and chunks, other recordings'
/// chunks, and the BSOR that was signed.
pub struct Pool {
    pub header: Vec<u8>,
    pub chunks: Vec<Chunk>,
    pub donors: Vec<Chunk>,
    pub signed_bsor: Vec<u8>,
}

fn all_chunks(s: &[u8]) -> (Vec<u8>, Vec<Chunk>) {
    let (_, hl, list) = split_stream(s).expect("a stream");
    let cs = list
        .iter()
        .map(|c| (c.header, c.bytes(s)[c.header_len..].to_vec()))
        .collect();
    (s[..hl].to_vec(), cs)
}

/// The pool: the vectors' recording (seed 7, key A, nonce 1, live settings).
pub fn pool() -> Pool {
    let live = Settings::live(Profile::Lossless);
    let r = replay(7);
    let signed = sign(&r, live, KEY_A, NONCE_1);
    let (header, chunks) = all_chunks(&signed);
    let mut donors = Vec::new();
    // Another play under the same key and player.
    donors.extend(all_chunks(&sign(&replay(8), live, KEY_A, NONCE_2)).1);
    // The same play, the same key and nonce, other chunking (archive settings).
    let archive = Settings::archive(Profile::Lossless);
    donors.extend(all_chunks(&sign(&r, archive, KEY_A, NONCE_1)).1);
    // A forged copy: one note moved, frames nudged, unsigned.
    let mut forged = r.clone();
    if let Some(n) = forged.notes.get_mut(1) {
        n.event_time += 0.125;
    }
    if let Some(f) = forged.frames.get_mut(30) {
        f.head.position.x += 0.01;
    }
    donors.extend(all_chunks(&transcode::encode_replay(&forged, live)).1);
    Pool {
        header,
        chunks,
        donors,
        signed_bsor: bsor::to_vec(&r).expect("writes"),
    }
}

/// The stream `ops` makes of the pool: each op three bytes (what, i, j).
pub fn mutate(pool: &Pool, ops: &[u8]) -> Vec<u8> {
    let mut cs = pool.chunks.clone();
    let mut fresh = true;
    let mut cut = None;
    for op in ops.chunks(3) {
        let (what, i, j) = (
            op[0],
            op.get(1).copied().unwrap_or(0) as usize,
            op.get(2).copied().unwrap_or(0) as usize,
        );
        let n = cs.len();
        let donor = &pool.donors[(i * 7 + j) % pool.donors.len()];
        match what % 9 {
            0 if n > 0 => {
                cs.remove(i % n);
            }
            1 if n > 0 => {
                let c = cs[i % n].clone();
                cs.insert(j % (n + 1), c);
            }
            2 if n > 0 => {
                let c = cs.remove(i % n);
                cs.insert(j % n, c);
            }
            3 => cs.insert(j % (n + 1), donor.clone()),
            4 if n > 0 => {
                let p = &mut cs[i % n].1;
                if !p.is_empty() {
                    let at = (j * 31 + i) % p.len();
                    p[at] ^= 1 << (j % 8);
                }
            }
            5 if n > 0 => cs.swap(i % n, j % n),
            6 => fresh = !fresh,
            7 if n > 0 => cs[i % n] = donor.clone(),
            8 => cut = Some(i * 256 + j),
            _ => {}
        }
    }
    let mut out = pool.header.clone();
    for (seq, (h, p)) in cs.iter().enumerate() {
        let seq = if fresh { seq as u32 } else { h.seq };
        if h.kind == ChunkType::Index {
            continue;
        }
        ChunkHeader::new(h.kind, seq, h.first, h.count, h.t0).write_to(p, &mut out);
    }
    if let Some(c) = cut {
        out.truncate(out.len().min(pool.header.len() + c));
    }
    out
}

/// The invariant on one stream: if it verifies as valid, its verifying decode and a plain
/// decode are both the signed BSOR, byte for byte. Returns whether it verified.
pub fn check(pool: &Pool, stream: &[u8]) -> bool {
    let report = verify_stream(stream);
    let v = decode_verified(stream);
    assert_eq!(v.report, report, "one verifier, one report");
    if report.verdict != Verdict::Valid {
        assert!(v.replay.is_none());
        return false;
    }
    let replay = v.replay.expect("a valid stream decodes");
    assert!(
        bsor::to_vec(&replay).expect("writes") == pool.signed_bsor,
        "a valid stream's verifying decode is not what was signed"
    );
    let (plain, _) = transcode::decode_replay(stream).expect("a valid stream decodes");
    assert!(
        bsor::to_vec(&plain).expect("writes") == pool.signed_bsor,
        "a valid stream's plain decode is not what was signed"
    );
    true
}

//! The signed-stream vectors of `proto-spec/vectors/` (integrity.md §10): how each is made,
//! shared by `tools/examples/make_signed_vectors.rs` (which writes them) and `core/tests/it/integrity.rs`
//! (which makes them again and checks them byte for byte and by verdict).

#![allow(dead_code)]

use bsor_stream_core::bsor::Replay;
use bsor_stream_core::integrity::{self, Report, Signer, SigningKey};
use bsor_stream_core::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream_core::{synth, transcode};

/// Test key A's secret seed: 32 bytes of 0x42. Never a real key.
pub const KEY_A: [u8; 32] = [0x42; 32];
/// Test key B's secret seed: 32 bytes of 0x43.
pub const KEY_B: [u8; 32] = [0x43; 32];
/// The nonce of recording 1 (16 bytes of 0x4e) and of recording 2 (0x4f).
pub const NONCE_1: [u8; 16] = [0x4e; 16];
pub const NONCE_2: [u8; 16] = [0x4f; 16];

/// The replay every vector records: 3 s at 60 fps of the synthetic generator, seed 7.
pub fn replay(seed: u64) -> Replay {
    synth::replay(synth::Settings {
        seed,
        seconds: 3.0,
        fps: 60,
    })
}

/// `r` encoded and signed as a recorder would, events with the first frame after them.
pub fn sign(r: &Replay, settings: Settings, key: [u8; 32], nonce: [u8; 16]) -> Vec<u8> {
    let signer = Signer::new(SigningKey::from_bytes(&key), nonce);
    integrity::sign_replay(r, settings, signer).expect("lossless")
}

/// The chunks of a stream (not the index), as (header, payload).
pub fn chunks(s: &[u8]) -> (Vec<u8>, Vec<(ChunkHeader, Vec<u8>)>) {
    let (_, hl, list) = split_stream(s).expect("a stream");
    let cs = list
        .iter()
        .filter(|c| c.header.kind != ChunkType::Index)
        .map(|c| (c.header, c.bytes(s)[c.header_len..].to_vec()))
        .collect();
    (s[..hl].to_vec(), cs)
}

/// A stream of these chunks, numbered afresh from 0 (no index, no footer): what an
/// attacker who rewrites chunk headers can make.
pub fn rebuild(header: &[u8], cs: &[(ChunkHeader, Vec<u8>)]) -> Vec<u8> {
    let mut out = header.to_vec();
    for (seq, (h, p)) in cs.iter().enumerate() {
        ChunkHeader::new(h.kind, seq as u32, h.first, h.count, h.t0).write_to(p, &mut out);
    }
    out
}

/// Positions of the chunks of type `kind` byte.
pub fn of_kind(cs: &[(ChunkHeader, Vec<u8>)], kind: u8) -> Vec<usize> {
    (0..cs.len())
        .filter(|&i| cs[i].0.kind.byte() == kind)
        .collect()
}

/// Every vector: (file name, bytes).
pub fn vectors() -> Vec<(&'static str, Vec<u8>)> {
    let live = Settings::live(Profile::Lossless);
    let r1 = replay(7);
    let signed = sign(&r1, live, KEY_A, NONCE_1);

    // Tampered: one note's score edited, the signing chunks carried over unchanged.
    let (mut edited, _) = transcode::decode_replay(&signed).expect("decodes");
    if let Some(n) = edited.notes.get_mut(3) {
        n.event_time += 0.25;
    }
    let tampered = integrity::transcode_signed(&signed, &edited, live).expect("carries");

    // Spliced: recording 1's first half, then recording 2's second half (same key, same
    // player), chunks renumbered.
    let other = sign(&replay(8), live, KEY_A, NONCE_2);
    let (header, a) = chunks(&signed);
    let (_, b) = chunks(&other);
    let cut_a = of_kind(&a, integrity::CHECKPOINT_CHUNK)[1] + 1;
    let cut_b = of_kind(&b, integrity::CHECKPOINT_CHUNK)[1] + 1;
    let mut joined = a[..cut_a].to_vec();
    joined.extend_from_slice(&b[cut_b..]);
    let spliced = rebuild(&header, &joined);

    // Truncated: cut right after the second checkpoint.
    let (_, spans) = (0, split_stream(&signed).expect("a stream").2);
    let second = spans
        .iter()
        .filter(|c| c.header.kind == ChunkType::Unknown(integrity::CHECKPOINT_CHUNK))
        .nth(1)
        .expect("two checkpoints");
    let truncated = signed[..second.offset + second.len].to_vec();

    // Re-signed: recording 1 decoded and signed again with key B.
    let (stolen, _) = transcode::decode_replay(&signed).expect("decodes");
    let resigned = sign(&stolen, live, KEY_B, NONCE_2);

    let prefixed = prefixed_forgery(&signed);
    let reordered = reordered_groups(&signed);

    vec![
        ("signed.bsors", signed),
        ("signed.prefixed.bsors", prefixed),
        ("signed.reordered.bsors", reordered),
        ("signed.tampered.bsors", tampered),
        ("signed.spliced.bsors", spliced),
        ("signed.truncated.bsors", truncated),
        ("signed.resigned.bsors", resigned),
    ]
}

/// Forgery without the key: an events chunk of forged notes (the first note moved 0.25 s,
/// from an unsigned encode of the replay without its frames) put in front of the key chunk,
/// the chunks numbered afresh. A reader keeps the first copy of each event, so the forged
/// notes are what a decode yields; the key chunk is no longer chunk 0.
pub fn prefixed_forgery(signed: &[u8]) -> Vec<u8> {
    let (mut forged, _) = transcode::decode_replay(signed).expect("decodes");
    forged.frames.clear();
    if let Some(n) = forged.notes.get_mut(0) {
        n.event_time += 0.25;
    }
    let plain = transcode::encode_replay(&forged, Settings::live(Profile::Lossless));
    let (_, fake) = chunks(&plain);
    let (header, cs) = chunks(signed);
    let mut v: Vec<_> = fake
        .into_iter()
        .filter(|(h, _)| h.kind == ChunkType::Events)
        .take(1)
        .collect();
    v.extend(cs);
    rebuild(&header, &v)
}

/// Records out of order: the second keyframe group's frame and event chunks moved in front
/// of the first group's, each checkpoint left where it was. Every checkpoint still finds
/// its records; a reader that takes records as they come yields them in another order.
pub fn reordered_groups(signed: &[u8]) -> Vec<u8> {
    let (header, cs) = chunks(signed);
    let keyframes = of_kind(&cs, ChunkType::Keyframes.byte());
    let (g0, g1) = (keyframes[0], keyframes[1]);
    // Group 1's record chunks: from its keyframe chunk to the next signing chunk.
    let end = (g1..cs.len())
        .find(|&i| matches!(cs[i].0.kind, ChunkType::Unknown(_)))
        .expect("a checkpoint after group 1");
    let mut v = cs[..g0].to_vec();
    v.extend_from_slice(&cs[g1..end]);
    v.extend_from_slice(&cs[g0..g1]);
    v.extend_from_slice(&cs[end..]);
    rebuild(&header, &v)
}

/// A report as the JSON of `verify --signatures --json` has it (less witnesses and
/// fingerprint, which no vector has yet).
pub fn report_json(r: &Report) -> serde_json::Value {
    serde_json::json!({
        "signed": r.signed,
        "signerKey": r.signer_key.map(|k| integrity::hex(&k)),
        "playerId": r.player_id,
        "chainValidToChunk": r.chain_valid_to_chunk,
        "chainValidToSeconds": r.chain_valid_to_seconds,
        "checkpoints": r.checkpoints,
        "verdict": r.verdict.name(),
        "reason": r.reason,
    })
}

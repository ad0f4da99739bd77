//! Signed streams (proto-spec/integrity.md): the threat model's cases, each a test that can
//! fail, and the vectors of proto-spec/vectors/signed.*.

use crate::signed_vectors;

use bsor_stream_core::bsor;
use bsor_stream_core::integrity::{
    self, verify_stream, SignError, Signer, SigningKey, Verdict, Verifier, CHECKPOINT_CHUNK,
    FINAL_CHUNK, KEY_CHUNK,
};
use bsor_stream_core::stream::{
    split_stream, ChunkType, Profile, Settings, StreamDecoder, StreamItem,
};
use bsor_stream_core::transcode;
use signed_vectors::*;

fn live() -> Settings {
    Settings::live(Profile::Lossless)
}

fn signed() -> Vec<u8> {
    sign(&replay(7), live(), KEY_A, NONCE_1)
}

#[test]
fn a_signed_stream_verifies_and_decodes_to_the_same_bsor() {
    let r = replay(7);
    let s = signed();
    let rep = verify_stream(&s);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    assert!(rep.signed);
    let key = SigningKey::from_bytes(&KEY_A).verifying_key().to_bytes();
    assert_eq!(rep.signer_key, Some(key));
    assert_eq!(
        rep.player_id.as_deref(),
        Some(&*r.info.player_id.to_string_lossy())
    );
    // Live settings: a group a second, so a checkpoint for each of about 3 seconds.
    assert!(rep.checkpoints >= 3, "{}", rep.checkpoints);
    let last = r.frames.last().unwrap().time;
    assert_eq!(rep.chain_valid_to_seconds, Some(last));
    // The signing chunks are skipped by a reader: the same BSOR comes out.
    let (back, rec) = transcode::decode_replay(&s).unwrap();
    assert!(rec.complete);
    assert_eq!(bsor::to_vec(&back).unwrap(), bsor::to_vec(&r).unwrap());
}

#[test]
fn unsigned_streams_are_unchanged_and_reported_unsigned() {
    let r = replay(7);
    let plain = transcode::encode_replay(&r, live());
    let rep = verify_stream(&plain);
    assert_eq!(rep.verdict, Verdict::Unsigned);
    assert!(!rep.signed && rep.signer_key.is_none());
    // A signed stream is the unsigned one plus the signing chunks, nothing else.
    let (_, cs) = chunks(&signed());
    let kept: Vec<_> = cs
        .into_iter()
        .filter(|(h, _)| !integrity::is_integrity_chunk(h.kind.byte()))
        .collect();
    let (header, plain_cs) = chunks(&plain);
    let strip = |v: &[(bsor_stream_core::stream::ChunkHeader, Vec<u8>)]| {
        v.iter()
            .map(|(h, p)| (h.kind, h.first, h.count, p.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&kept), strip(&plain_cs));
    assert_eq!(&plain[..header.len()], &signed()[..header.len()]);
}

#[test]
fn the_format_vectors_are_unsigned() {
    // `unknown.bsors` carries a chunk of the unassigned skippable type 0x06.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto-spec/vectors");
    for name in ["synthetic.lossless.bsors", "unknown.bsors"] {
        let s = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(verify_stream(&s).verdict, Verdict::Unsigned, "{name}");
    }
}

#[test]
fn lossy_profiles_are_never_signed() {
    let r = replay(7);
    for p in [Profile::Fine, Profile::Compact] {
        let signer = Signer::new(SigningKey::from_bytes(&KEY_A), NONCE_1);
        let err = signer
            .into_encoder(r.info.clone(), Settings::live(p))
            .unwrap_err();
        assert!(matches!(err, SignError::Lossy(_)), "{err}");
        assert!(
            integrity::transcode_signed(&signed(), &r, Settings::archive(p)).is_err(),
            "{p:?}"
        );
    }
}

#[test]
fn theft_changing_the_player_id_is_invalid() {
    let s = signed();
    let (mut stolen, _) = transcode::decode_replay(&s).unwrap();
    stolen.info.player_id = bsor::BsorString::new("76561198000000001");
    stolen.info.player_name = bsor::BsorString::new("thief");
    // Header and trailer both say the thief; the signing chunks are carried over.
    let t = integrity::transcode_signed(&s, &stolen, live()).unwrap();
    let rep = verify_stream(&t);
    assert_eq!(rep.verdict, Verdict::Invalid);
    assert!(
        rep.reason.as_deref().unwrap().contains("binds player ID"),
        "{:?}",
        rep.reason
    );
    // Only the final info changed (the name, which the key chunk does not bind): invalid too.
    let (mut named, _) = transcode::decode_replay(&s).unwrap();
    named.info.player_name = bsor::BsorString::new("thief");
    let t = integrity::transcode_signed(&s, &named, live()).unwrap();
    let rep = verify_stream(&t);
    assert_eq!(rep.verdict, Verdict::Invalid);
    assert!(
        rep.reason.as_deref().unwrap().contains("final info"),
        "{:?}",
        rep.reason
    );
}

/// Forgery without the key: an events chunk of forged notes in front of the key chunk.
/// The decoder keeps the first copy of each event; the verifier must refuse the stream
/// (its key chunk is not chunk 0), so that nothing valid decodes to the forged notes.
#[test]
fn forged_records_before_the_key_chunk_are_invalid() {
    let s = signed();
    let forged = prefixed_forgery(&s);
    let (decoded, _) = transcode::decode_replay(&forged).unwrap();
    assert_ne!(
        decoded.notes[0].event_time,
        replay(7).notes[0].event_time,
        "the decoder yields the forged note"
    );
    let rep = verify_stream(&forged);
    assert_eq!(rep.verdict, Verdict::Invalid, "{:?}", rep.reason);
    let why = rep.reason.unwrap();
    assert!(why.contains("is not the stream's first chunk"), "{why}");
    assert!(integrity::decode_verified(&forged).replay.is_none());
    // The key chunk alone renumbered away from 0 (nothing before it): invalid too.
    let (header, mut cs) = chunks(&s);
    let mut t = header.clone();
    for (seq, (h, p)) in cs.iter_mut().enumerate() {
        bsor_stream_core::stream::ChunkHeader::new(h.kind, seq as u32 + 5, h.first, h.count, h.t0)
            .write_to(p, &mut t);
    }
    let rep = verify_stream(&t);
    assert_eq!(rep.verdict, Verdict::Invalid, "{:?}", rep.reason);
    assert!(rep.reason.unwrap().contains("is not chunk 0"));
}

/// Records out of order: a later keyframe group's records moved before an earlier one's,
/// each checkpoint still finding its records. A reader taking records as they come would
/// yield another replay, so the verifier refuses records that do not come in index order.
#[test]
fn records_out_of_order_are_invalid() {
    let s = signed();
    let t = reordered_groups(&s);
    let (decoded, _) = transcode::decode_replay(&t).unwrap();
    assert_ne!(
        decoded.frames,
        replay(7).frames,
        "a plain decode reorders the frames"
    );
    let rep = verify_stream(&t);
    assert_eq!(rep.verdict, Verdict::Invalid, "{:?}", rep.reason);
    assert!(
        rep.reason.as_deref().unwrap().contains("out of order"),
        "{:?}",
        rep.reason
    );
}

/// A verifying decode yields exactly the signed replay, and a record the checkpoints do not
/// cover (an events chunk after the final checkpoint) makes the stream invalid.
#[test]
fn a_verifying_decode_yields_what_was_signed_and_nothing_uncovered() {
    let s = signed();
    let v = integrity::decode_verified(&s);
    assert_eq!(v.report.verdict, Verdict::Valid);
    assert_eq!(
        bsor::to_vec(&v.replay.unwrap()).unwrap(),
        bsor::to_vec(&replay(7)).unwrap()
    );
    // An extra note after the final checkpoint, numbered as the next note.
    let mut more = replay(7);
    let mut extra = *more.notes.last().unwrap();
    extra.event_time += 0.5;
    more.notes.push(extra);
    let plain = transcode::encode_replay(&more, live());
    let (_, pc) = chunks(&plain);
    let last_events = pc
        .iter()
        .rfind(|(h, _)| h.kind == ChunkType::Events)
        .unwrap()
        .clone();
    let (header, mut cs) = chunks(&s);
    let fin = of_kind(&cs, FINAL_CHUNK)[0];
    cs.insert(fin + 1, last_events);
    let t = rebuild(&header, &cs);
    let rep = verify_stream(&t);
    assert_eq!(rep.verdict, Verdict::Invalid, "{:?}", rep.reason);
    assert!(integrity::decode_verified(&t).replay.is_none());
}

#[test]
fn no_single_byte_flip_verifies() {
    let s = signed();
    let mut valid = Vec::new();
    for i in 0..s.len() {
        let mut t = s.clone();
        t[i] ^= 0x01;
        if verify_stream(&t).verdict == Verdict::Valid {
            valid.push(i);
        }
    }
    assert!(
        valid.is_empty(),
        "flips at {valid:?} of {} still verify",
        s.len()
    );
}

/// A bad signature in any signing chunk (its chunk's CRC made good again) is named by
/// chunk, byte offset and the signature's byte; the whole-file and the live verifier are
/// one and the same, each signature checked with `verify_strict` as its chunk comes.
#[test]
fn a_bad_signature_is_named_by_chunk_and_byte() {
    let s = signed();
    let (header, cs) = chunks(&s);
    let signing: Vec<usize> = [KEY_CHUNK, CHECKPOINT_CHUNK, FINAL_CHUNK]
        .iter()
        .flat_map(|&k| of_kind(&cs, k))
        .collect();
    assert!(signing.len() >= 5, "{}", signing.len());
    for &i in &signing {
        // A bit of the signature's S, then of its R, then of the signed body.
        let len = cs[i].1.len();
        for at in [len - 1, len - 40, len - 64, 1] {
            let mut v = cs.clone();
            v[i].1[at] ^= 0x04;
            let t = rebuild(&header, &v);
            let rep = verify_stream(&t);
            assert_eq!(rep.verdict, Verdict::Invalid, "chunk {i}, byte {at}");
            let reason = rep.reason.unwrap_or_default();
            assert!(
                reason.contains(&format!(" chunk {i} at byte offset ")),
                "chunk {i}, byte {at}: {reason}"
            );
            if at >= len - 64 {
                assert!(
                    reason.ends_with(&format!("signature at byte {} does not verify", len - 64)),
                    "chunk {i}, byte {at}: {reason}"
                );
            }
        }
    }
}

/// Checkpoints sign the records, not the chunks that carry them (so that a lossless
/// transcode keeps them): a change of chunks may verify only if every record, and so the
/// BSOR the stream decodes to, stays the same.
#[test]
fn dropped_reordered_and_duplicated_chunks_never_verify_with_other_records() {
    let original = bsor::to_vec(&replay(7)).unwrap();
    let (header, cs) = chunks(&signed());
    assert_eq!(
        verify_stream(&rebuild(&header, &cs)).verdict,
        Verdict::Valid
    );
    let mut cases = Vec::new();
    for i in 0..cs.len() {
        let mut v = cs.clone();
        v.remove(i);
        cases.push((format!("drop {i}"), v));
        let mut v = cs.clone();
        v.insert(i, cs[i].clone());
        cases.push((format!("duplicate {i}"), v));
        if i + 1 < cs.len() {
            let mut v = cs.clone();
            v.swap(i, i + 1);
            cases.push((format!("swap {i}"), v));
        }
    }
    let mut verified = 0;
    for (what, v) in &cases {
        let s = rebuild(&header, v);
        if verify_stream(&s).verdict == Verdict::Valid {
            let (back, _) = transcode::decode_replay(&s).unwrap();
            assert!(bsor::to_vec(&back).unwrap() == original, "{what} verifies");
            // A dropped or duplicated chunk never verifies.
            assert!(what.starts_with("swap"), "{what} verifies");
            verified += 1;
        }
    }
    // Swaps of an event chunk with a frame chunk of its group keep every record; most
    // swaps do not.
    assert!(verified < cases.len() / 3, "{verified} of {}", cases.len());
}

#[test]
fn edited_events_and_final_info_are_invalid() {
    let s = signed();
    let (r, _) = transcode::decode_replay(&s).unwrap();
    let mut edits: Vec<(&str, bsor::Replay)> = Vec::new();
    let mut e = r.clone();
    e.notes[0].event_time += 0.001;
    edits.push(("note time", e));
    let mut e = r.clone();
    e.notes.pop();
    edits.push(("the last note removed", e));
    let mut e = r.clone();
    e.frames[30].head.position.x += 0.01;
    edits.push(("a frame", e));
    let mut e = r.clone();
    e.info.score += 1;
    edits.push(("final score", e));
    let mut e = r.clone();
    e.user_data = Some(b"added".to_vec());
    edits.push(("user data", e));
    for (what, e) in edits {
        let t = integrity::transcode_signed(&s, &e, live()).unwrap();
        let rep = verify_stream(&t);
        assert_eq!(rep.verdict, Verdict::Invalid, "{what}: {:?}", rep.reason);
    }
}

#[test]
fn splicing_two_recordings_is_invalid() {
    let v = vectors();
    let spliced = &v
        .iter()
        .find(|(n, _)| *n == "signed.spliced.bsors")
        .unwrap()
        .1;
    let rep = verify_stream(spliced);
    assert_eq!(rep.verdict, Verdict::Invalid);
    assert!(rep.reason.unwrap().contains("another recording"));
    // The same player and key, the nonce alone tells them apart; with the nonce's chunk
    // order kept but another recording's records, the chain breaks as well.
    let a = signed();
    let b = sign(&replay(7), live(), KEY_A, NONCE_2);
    let (header, ca) = chunks(&a);
    let (_, cb) = chunks(&b);
    let mut mixed = ca.clone();
    let k = of_kind(&ca, CHECKPOINT_CHUNK)[1];
    mixed[k] = cb[of_kind(&cb, CHECKPOINT_CHUNK)[1]].clone();
    assert_eq!(
        verify_stream(&rebuild(&header, &mixed)).verdict,
        Verdict::Invalid
    );
}

#[test]
fn re_signing_verifies_as_the_other_key() {
    let v = vectors();
    let resigned = &v
        .iter()
        .find(|(n, _)| *n == "signed.resigned.bsors")
        .unwrap()
        .1;
    let rep = verify_stream(resigned);
    // Valid, and the verdict names key B, not the player's key A: a signature proves who
    // held a key, which is why the server's key registry decides whose key counts.
    assert_eq!(rep.verdict, Verdict::Valid);
    let a = SigningKey::from_bytes(&KEY_A).verifying_key().to_bytes();
    let b = SigningKey::from_bytes(&KEY_B).verifying_key().to_bytes();
    assert_eq!(rep.signer_key, Some(b));
    assert_ne!(rep.signer_key, Some(a));
}

#[test]
fn truncation_is_incomplete_and_valid_to_the_last_whole_group() {
    let s = signed();
    let (_, _, spans) = split_stream(&s).unwrap();
    let cps: Vec<_> = spans
        .iter()
        .filter(|c| c.header.kind == ChunkType::Unknown(CHECKPOINT_CHUNK))
        .collect();
    for (n, cp) in cps.iter().enumerate() {
        // Cut after the checkpoint, and a little further (inside the next chunk).
        for extra in [0, 7] {
            let t = &s[..cp.offset + cp.len + extra];
            let rep = verify_stream(t);
            assert_eq!(
                rep.verdict,
                Verdict::Incomplete,
                "cut after checkpoint {n}+{extra}"
            );
            assert_eq!(rep.checkpoints as usize, n + 1);
            assert_eq!(rep.chain_valid_to_chunk, Some(cp.header.seq));
        }
    }
    // Cut before the first checkpoint: signed, nothing verified beyond the key chunk.
    let key = spans
        .iter()
        .find(|c| c.header.kind == ChunkType::Unknown(KEY_CHUNK))
        .unwrap();
    let rep = verify_stream(&s[..cps[0].offset]);
    assert_eq!(rep.verdict, Verdict::Incomplete);
    assert_eq!(rep.checkpoints, 0);
    assert_eq!(rep.chain_valid_to_chunk, Some(key.header.seq));
}

#[test]
fn lossless_transcodes_keep_every_checkpoint() {
    let s = signed();
    let before = verify_stream(&s);
    let (r, _) = transcode::decode_replay(&s).unwrap();
    // Live to archive settings.
    let archive =
        integrity::transcode_signed(&s, &r, Settings::archive(Profile::Lossless)).unwrap();
    let rep = verify_stream(&archive);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    assert_eq!(rep.checkpoints, before.checkpoints);
    // Stream to BSOR and back to a stream.
    let bytes = bsor::to_vec(&r).unwrap();
    let again = bsor::parse(&bytes).unwrap();
    let back = integrity::transcode_signed(&archive, &again, live()).unwrap();
    let rep = verify_stream(&back);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    assert_eq!(rep.checkpoints, before.checkpoints);
    assert_eq!(rep.signer_key, before.signer_key);
}

#[test]
fn a_late_joiner_verifies_the_groups_it_has() {
    let s = signed();
    let (_, hl, spans) = split_stream(&s).unwrap();
    let key = &spans[0];
    assert_eq!(key.header.kind, ChunkType::Unknown(KEY_CHUNK));
    // Join at the third keyframe chunk: header and key chunk, then from there on.
    let join = spans
        .iter()
        .filter(|c| c.header.kind == ChunkType::Keyframes)
        .nth(2)
        .unwrap();
    let mut got = s[..hl].to_vec();
    got.extend_from_slice(key.bytes(&s));
    let skipped_before = join.offset - got.len();
    got.extend_from_slice(&s[join.offset..]);
    let mut v = Verifier::joining();
    let mut d = StreamDecoder::new();
    d.push(&got);
    d.finish();
    let total = verify_stream(&s).checkpoints;
    while let Some(item) = d.next_item().unwrap() {
        match item {
            StreamItem::End => break,
            StreamItem::Skipped { offset, kind } => {
                let o = offset as usize;
                let (h, l) = bsor_stream_core::stream::ChunkHeader::parse_at(&got[o..]).unwrap();
                v.chunk(
                    h.seq,
                    offset + skipped_before as u64,
                    kind,
                    &got[o + l..o + l + h.len as usize],
                );
            }
            other => v.item(&other),
        }
    }
    let rep = v.report();
    assert_eq!(rep.verdict, Verdict::Incomplete, "{:?}", rep.reason);
    // Every checkpoint from the join on verifies; those before it are not there.
    assert_eq!(rep.checkpoints, total - 2);
    assert!(rep.chain_valid_to_chunk.is_some());
    let final_seen = spans
        .iter()
        .any(|c| c.header.kind == ChunkType::Unknown(FINAL_CHUNK));
    assert!(final_seen);
}

#[test]
fn vectors_are_reproduced_and_verify_as_recorded() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto-spec/vectors");
    let expected: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("signed.expected.json")).expect("signed.expected.json"),
    )
    .unwrap();
    for (name, bytes) in vectors() {
        let stored = std::fs::read(dir.join(name)).unwrap_or_else(|_| panic!("{name}"));
        assert!(stored == bytes, "{name} is not what its recipe makes");
        let rep = report_json(&verify_stream(&stored));
        assert_eq!(rep, expected[name], "{name}");
    }
}

/// The verifier rides along a push decoder as its hook (the single verifying pass): fed in
/// pieces of any size, as a server or relay receives a stream, it reports exactly what the
/// whole file's verification reports, signed or forged, and its extension chunks are the
/// ones the decoder skips.
#[test]
fn the_verifier_as_a_decoder_hook_verifies_a_stream_as_it_arrives() {
    use bsor_stream_core::stream::DecoderHook;

    /// Counts the extension chunks and items it is shown, then hands them to a verifier.
    #[derive(Default)]
    struct Counting {
        v: Verifier,
        extensions: Vec<(u32, u64)>,
        items: usize,
    }
    impl DecoderHook for Counting {
        fn item(&mut self, item: &StreamItem) {
            self.items += 1;
            DecoderHook::item(&mut self.v, item);
        }
        fn extension(
            &mut self,
            h: &bsor_stream_core::stream::ChunkHeader,
            offset: u64,
            payload: &[u8],
        ) {
            self.extensions.push((h.seq, offset));
            self.v.extension(h, offset, payload);
        }
    }

    let s = signed();
    // A byte of a frame chunk's payload changed, the chunk's CRCs made right again: a
    // readable stream whose records are not what was signed.
    let (header, mut cs) = chunks(&s);
    let k = of_kind(&cs, ChunkType::Frames.byte())[0];
    let mid = cs[k].1.len() / 2;
    cs[k].1[mid] ^= 0x40;
    let forged = rebuild(&header, &cs);
    for (stream, verdict) in [(&s, Verdict::Valid), (&forged, Verdict::Invalid)] {
        let whole = verify_stream(stream);
        let (_, _, spans) = split_stream(stream).unwrap();
        assert_eq!(whole.verdict, verdict, "{:?}", whole.reason);
        for piece in [1, 7, 100, 4096] {
            let mut d = StreamDecoder::new().with_hook(Counting::default());
            let mut yielded = 0;
            let mut skipped = Vec::new();
            for p in stream.chunks(piece) {
                d.push(p);
                while let Some(item) = d.next_item().unwrap() {
                    yielded += 1;
                    if let StreamItem::Skipped { offset, .. } = item {
                        skipped.push(offset);
                    }
                }
            }
            d.finish();
            while let Some(item) = d.next_item().unwrap() {
                yielded += 1;
                if let StreamItem::Skipped { offset, .. } = item {
                    skipped.push(offset);
                }
            }
            let hook = d.into_hook();
            assert_eq!(hook.items, yielded, "the hook sees every item yielded");
            let offsets: Vec<u64> = hook.extensions.iter().map(|e| e.1).collect();
            assert_eq!(offsets, skipped, "and every extension chunk, in order");
            let signing: Vec<u32> = spans
                .iter()
                .filter(|c| matches!(c.header.kind, ChunkType::Unknown(_)))
                .map(|c| c.header.seq)
                .collect();
            let seen: Vec<u32> = hook.extensions.iter().map(|e| e.0).collect();
            assert_eq!(seen, signing);
            let rep = hook.v.report();
            assert_eq!(rep, whole, "pieces of {piece} bytes");
        }
    }
}

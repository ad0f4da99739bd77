//! A BSOR keeps its signature (integrity.md §13): a signed stream decoded to BSOR carries
//! its signing chunks in a user-data entry, verifies as a BSOR, encodes back to a stream
//! that verifies, and stays readable by another BSOR reader (py-bsor).

use crate::common;
use crate::signed_vectors;

use bsor_stream_core::bsor::{self, ControllerOffsets, Replay};
use bsor_stream_core::integrity::{
    self, add_entry, neutral_offsets, take_entry, transcode_with_entry, verify_bsor, verify_stream,
    EntryError, SigningChunks, SigningKey, Verdict, ADDED_OFFSETS, ADDED_USER_DATA, ENTRY_KEY,
};
use bsor_stream_core::stream::{Profile, Settings};
use bsor_stream_core::transcode;
use signed_vectors::*;

fn live() -> Settings {
    Settings::live(Profile::Lossless)
}

/// `r` signed as a live lossless stream, and that stream decoded to a BSOR with the entry.
fn signed_bsor(r: &Replay) -> (Vec<u8>, Vec<u8>) {
    let s = sign(r, live(), KEY_A, NONCE_1);
    let (mut d, rec) = transcode::decode_replay(&s).expect("decodes");
    assert!(rec.complete);
    let chunks = SigningChunks::from_stream(&s).expect("a whole signed recording");
    add_entry(&mut d, &chunks).expect("the entry fits");
    (s, bsor::to_vec(&d).expect("writes"))
}

/// A user-data section in BeatLeader's key/value form: count, then key string and value.
fn key_value(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut v = (entries.len() as i32).to_le_bytes().to_vec();
    for (k, val) in entries {
        v.extend_from_slice(&(k.len() as i32).to_le_bytes());
        v.extend_from_slice(k.as_bytes());
        v.extend_from_slice(&(val.len() as i32).to_le_bytes());
        v.extend_from_slice(val);
    }
    v
}

/// `r` with these bytes after marker 7 (as BeatLeader's mod writes them), read back the
/// way the codec reads them.
fn with_user_data(r: &Replay, offsets: Option<ControllerOffsets>, region: &[u8]) -> Replay {
    let mut base = r.clone();
    base.controller_offsets = offsets;
    base.user_data = None;
    base.trailing.clear();
    let mut bytes = bsor::to_vec(&base).unwrap();
    bytes.push(7);
    bytes.extend_from_slice(region);
    bsor::parse(&bytes).expect("reads back")
}

fn offsets() -> ControllerOffsets {
    let mut o = neutral_offsets();
    o.left.position.x = 0.01;
    o.right.rotation.y = 0.1;
    o
}

/// The synthetic replay without its controller offsets and user data (which are not in the
/// key/value form, so the entry has no place there).
fn plain(seed: u64) -> Replay {
    let mut r = replay(seed);
    r.controller_offsets = None;
    r.user_data = None;
    r.trailing.clear();
    r
}

fn verdict(b: &[u8]) -> Verdict {
    verify_bsor(b).verdict
}

#[test]
fn a_signed_bsor_verifies_and_encodes_back_to_the_same_stream() {
    let r = plain(7);
    let (s, b) = signed_bsor(&r);
    let rep = verify_bsor(&b);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    let key = SigningKey::from_bytes(&KEY_A).verifying_key().to_bytes();
    assert_eq!(rep.signer_key, Some(key));
    assert_eq!(rep.checkpoints, verify_stream(&s).checkpoints);

    // Section 6 and 7 were added for the entry, and are taken out again.
    let mut back = bsor::parse(&b).unwrap();
    assert_eq!(back.controller_offsets, Some(neutral_offsets()));
    let chunks = take_entry(&mut back).unwrap().expect("an entry");
    assert_eq!(back, r);
    let again = transcode_with_entry(&chunks, &back, live()).unwrap();
    assert_eq!(
        again, s,
        "the same settings give the same stream, byte for byte"
    );
    let archive = transcode_with_entry(&chunks, &back, Settings::archive(Profile::Lossless));
    assert_eq!(verify_stream(&archive.unwrap()).verdict, Verdict::Valid);
    assert!(matches!(
        transcode_with_entry(&chunks, &back, Settings::live(Profile::Compact)),
        Err(integrity::CarryError::Sign(_))
    ));
}

#[test]
fn the_entry_goes_beside_beatleaders_entries_and_leaves_them_as_they_were() {
    let region = key_value(&[("BeatLeader:a", b"\x01\x02\x03"), ("other", &[7u8; 300])]);
    let r = with_user_data(&replay(7), Some(offsets()), &region);
    let (_, b) = signed_bsor(&r);
    assert_eq!(verdict(&b), Verdict::Valid);
    let mut back = bsor::parse(&b).unwrap();
    assert_eq!(back.controller_offsets, Some(offsets()));
    take_entry(&mut back).unwrap().expect("an entry");
    assert_eq!(back, r, "the replay as signed, byte for byte");
    assert_eq!(bsor::to_vec(&back).unwrap(), bsor::to_vec(&r).unwrap());

    // A present but empty section (count 0), as test.bsor has.
    let r = with_user_data(&replay(7), Some(offsets()), &key_value(&[]));
    let (_, b) = signed_bsor(&r);
    assert_eq!(verdict(&b), Verdict::Valid);
    let mut back = bsor::parse(&b).unwrap();
    take_entry(&mut back).unwrap().expect("an entry");
    assert_eq!(
        (back.user_data.as_deref(), back.trailing.len()),
        (Some(&[][..]), 0)
    );
}

#[test]
fn tampering_with_a_signed_bsor_is_invalid() {
    let region = key_value(&[("BeatLeader:a", b"abc")]);
    let r = with_user_data(&replay(7), Some(offsets()), &region);
    let (_, b) = signed_bsor(&r);
    let signed = bsor::parse(&b).unwrap();
    let check = |what: &str, edit: &dyn Fn(&mut Replay)| {
        let mut t = signed.clone();
        edit(&mut t);
        let rep = verify_bsor(&bsor::to_vec(&t).unwrap());
        assert_eq!(rep.verdict, Verdict::Invalid, "{what}: {:?}", rep.reason);
    };
    check("player ID", &|t| t.info.player_id = "1234".into());
    check("player name", &|t| t.info.player_name = "thief".into());
    check("score", &|t| t.info.score += 1);
    check("a note's time", &|t| t.notes[3].event_time += 0.001);
    check("a frame", &|t| t.frames[10].head.position.x += 0.001);
    check("offsets", &|t| {
        t.controller_offsets.as_mut().unwrap().left.position.y = 1.0
    });
    // BeatLeader's entry: "abc" is the last 3 bytes before our entry's key length.
    check("another entry's value", &|t| {
        let at = t.trailing.windows(3).position(|w| w == b"abc").unwrap();
        t.trailing[at] = b'x';
    });

    // Every byte of the entry's value (past version and flags, whose changes are refused
    // or change what is removed) flipped: nothing verifies.
    let key_at = b
        .windows(ENTRY_KEY.len())
        .position(|w| w == ENTRY_KEY.as_bytes())
        .unwrap();
    let value_at = key_at + ENTRY_KEY.len() + 4;
    for i in value_at..b.len() {
        let mut t = b.clone();
        t[i] ^= 0x01;
        assert_ne!(verdict(&t), Verdict::Valid, "byte {i} flipped");
    }

    // Taking the entry out leaves an unsigned BSOR; two entries are refused.
    let mut t = signed.clone();
    let chunks = take_entry(&mut t).unwrap().unwrap();
    assert_eq!(verdict(&bsor::to_vec(&t).unwrap()), Verdict::Unsigned);
    let mut twice = with_user_data(
        &t,
        t.controller_offsets,
        &key_value(&[
            (ENTRY_KEY, &[1, 0, 0, 0, 0, 0]),
            (ENTRY_KEY, &[1, 0, 0, 0, 0, 0]),
        ]),
    );
    assert_eq!(verdict(&bsor::to_vec(&twice).unwrap()), Verdict::Invalid);
    assert!(add_entry(&mut twice, &chunks).is_err());
}

#[test]
fn added_sections_must_be_the_ones_the_flags_say() {
    let r = plain(7);
    let (_, b) = signed_bsor(&r);
    let signed = bsor::parse(&b).unwrap();
    // Offsets that were added must stay neutral: a reader shows them.
    let mut t = signed.clone();
    t.controller_offsets = Some(offsets());
    assert_eq!(verdict(&bsor::to_vec(&t).unwrap()), Verdict::Invalid);
    // The flags are in the entry: read them back.
    let flags_at = b
        .windows(ENTRY_KEY.len())
        .position(|w| w == ENTRY_KEY.as_bytes())
        .unwrap()
        + ENTRY_KEY.len()
        + 4
        + 1;
    assert_eq!(b[flags_at], ADDED_OFFSETS | ADDED_USER_DATA);
}

#[test]
fn user_data_not_in_key_value_form_cannot_carry_the_entry() {
    let s = sign(&replay(7), live(), KEY_A, NONCE_1);
    let chunks = SigningChunks::from_stream(&s).unwrap();
    // The synthetic replay's user data is opaque bytes.
    assert!(matches!(
        add_entry(&mut replay(7), &chunks),
        Err(EntryError::UserData(_))
    ));
    let mut r = replay(7);
    r.user_data = Some(b"hello".to_vec());
    assert!(matches!(
        add_entry(&mut r.clone(), &chunks),
        Err(EntryError::UserData(_))
    ));
    r.user_data = None;
    r.trailing = vec![0x09, 0x01];
    assert!(matches!(
        add_entry(&mut r, &chunks),
        Err(EntryError::UserData(_))
    ));
    // A cut stream (no final checkpoint) is not a whole recording.
    let cut = &s[..s.len() / 2];
    assert!(matches!(
        SigningChunks::from_stream(cut),
        Err(EntryError::Chunks(_))
    ));
    let unsigned = transcode::encode_replay(&replay(7), live());
    assert!(SigningChunks::from_stream(&unsigned).is_err());
}

#[test]
fn corpus_replays_keep_their_signature_as_bsor() {
    for (name, bytes) in common::corpus_files() {
        let r = bsor::parse(&bytes).unwrap();
        let (s, b) = signed_bsor(&r);
        let rep = verify_bsor(&b);
        assert_eq!(rep.verdict, Verdict::Valid, "{name}: {:?}", rep.reason);
        let mut back = bsor::parse(&b).unwrap();
        let chunks = take_entry(&mut back).unwrap().expect("an entry");
        assert_eq!(
            bsor::to_vec(&back).unwrap(),
            bytes,
            "{name}: the file as it was"
        );
        let again = transcode_with_entry(&chunks, &back, live()).unwrap();
        assert_eq!(again, s, "{name}");
    }
}

/// Runs scripts/pybsor-read.py on `bsor`; `None` (with a notice) when py-bsor is not there.
fn py_bsor(tag: &str, bytes: &[u8]) -> Option<serde_json::Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = std::env::temp_dir().join(format!("signed-bsor-{}-{tag}.bsor", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("python3")
        .arg(root.join("../scripts/pybsor-read.py"))
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let out = match out {
        Ok(o) if o.status.code() != Some(3) => o,
        _ => {
            use std::io::Write;
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                let _ = std::io::stderr().lock().write_all(
                    b"\nNOTICE: python3 with py-bsor (pip install py-bsor) not found: the \
                      py-bsor readability checks pass without checking anything.\n",
                );
            });
            return None;
        }
    };
    assert!(
        out.status.success(),
        "py-bsor failed on {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("the script's JSON"))
}

#[test]
fn another_reader_reads_a_signed_bsor() {
    let mut cases = vec![
        ("plain".to_string(), plain(7)),
        (
            "entries".to_string(),
            with_user_data(
                &replay(8),
                Some(offsets()),
                &key_value(&[("BeatLeader:a", b"abc")]),
            ),
        ),
    ];
    for (name, bytes) in common::corpus_files() {
        cases.push((name, bsor::parse(&bytes).unwrap()));
    }
    for (name, r) in cases {
        let (_, b) = signed_bsor(&r);
        let Some(j) = py_bsor(&name.replace('.', "_"), &b) else {
            return;
        };
        assert_eq!(j["frames"], r.frames.len(), "{name}");
        assert_eq!(j["notes"], r.notes.len(), "{name}");
        assert_eq!(j["pauses"], r.pauses.len(), "{name}");
        assert_eq!(j["offsets"], true, "{name}");
        assert_eq!(j["unread"], 0, "{name}");
        let keys = j["userData"].as_array().unwrap();
        let last = keys.last().expect("an entry");
        assert_eq!(last[0], ENTRY_KEY, "{name}");
        if name == "entries" {
            assert_eq!(keys.len(), 2);
            assert_eq!(keys[0][0], "BeatLeader:a");
            assert_eq!(keys[0][1], 3);
        }
        assert_eq!(j["playerId"], r.info.player_id.to_string_lossy(), "{name}");
    }
}

//! Witnesses (proto-spec/integrity.md §12): statements a relay makes for the checkpoints it
//! receives, the `.witness` file, and what `check_witnesses` accepts and rejects.

use crate::signed_vectors;

use bsor_stream_core::integrity::witness::{
    append_record, check_witnesses, parse_file, verify_statements, verify_witnessed, Statement,
    Subject, Witness, STATEMENT_LEN,
};
use bsor_stream_core::integrity::{self, SigningKey, CHECKPOINT_CHUNK, FINAL_CHUNK};
use bsor_stream_core::stream::{split_stream, ChunkType};
use signed_vectors::*;

/// The test witness key's secret seed: 32 bytes of 0x57. Never a real key.
const WITNESS: [u8; 32] = [0x57; 32];
/// The first statement's time in the vector, Unix ms (2023-11-14T22:13:20Z), then +1 s each.
const T0: u64 = 1_700_000_000_000;

fn witness(seed: [u8; 32]) -> Witness {
    Witness::new(SigningKey::from_bytes(&seed))
}

/// The statements `w` makes for every checkpoint and the final checkpoint of `stream`, the
/// i-th at `T0 + 1000 i`, as a `.witness` file.
fn witness_file(w: &Witness, stream: &[u8]) -> Vec<u8> {
    let (_, _, spans) = split_stream(stream).unwrap();
    let mut out = Vec::new();
    let mut i = 0;
    for c in &spans {
        let ChunkType::Unknown(kind) = c.header.kind else {
            continue;
        };
        let payload = &c.bytes(stream)[c.header_len..];
        if let Some(s) = w.countersign(kind, payload, T0 + 1000 * i) {
            append_record(&mut out, &s);
            i += 1;
        }
    }
    out
}

fn signed() -> Vec<u8> {
    sign(
        &replay(7),
        bsor_stream_core::stream::Settings::live(bsor_stream_core::stream::Profile::Lossless),
        KEY_A,
        NONCE_1,
    )
}

fn checkpoints_in(stream: &[u8]) -> (usize, usize) {
    let (_, _, spans) = split_stream(stream).unwrap();
    let n = |k| {
        spans
            .iter()
            .filter(|c| c.header.kind == ChunkType::Unknown(k))
            .count()
    };
    (n(CHECKPOINT_CHUNK), n(FINAL_CHUNK))
}

#[test]
fn a_trusted_witness_covers_every_checkpoint_and_dates_the_recording() {
    let s = signed();
    let w = witness(WITNESS);
    let file = witness_file(&w, &s);
    let (checkpoints, finals) = checkpoints_in(&s);
    assert_eq!(finals, 1);
    assert_eq!(file.len(), (checkpoints + 1) * (4 + STATEMENT_LEN));
    let rep = check_witnesses(&s, &file, &[w.public_key()]);
    assert!(rep.rejected.is_empty(), "{:?}", rep.rejected);
    assert_eq!(rep.witnesses.len(), 1);
    let got = &rep.witnesses[0];
    assert!(got.trusted);
    assert_eq!(got.key, w.public_key());
    assert_eq!(got.checkpoints, (0..checkpoints as u32).collect::<Vec<_>>());
    assert!(got.final_checkpoint);
    assert_eq!(
        (got.earliest_ms, got.latest_ms),
        (T0, T0 + 1000 * checkpoints as u64)
    );
    // The play existed when the witness had its final checkpoint, the last statement: the
    // earlier ones date only the checkpoints they name.
    assert_eq!(got.final_ms, Some(T0 + 1000 * checkpoints as u64));
    assert_eq!(rep.existed_by_ms, Some(T0 + 1000 * checkpoints as u64));
}

/// `verify_witnessed` (the statements on a second thread) reports what the two calls
/// report, with good statements, with one forged, and with none.
#[test]
fn verify_witnessed_reports_what_the_two_calls_report() {
    let s = signed();
    let w = witness(WITNESS);
    let good = witness_file(&w, &s);
    let mut forged = good.clone();
    forged[4 + 90] ^= 1;
    for file in [good, forged, Vec::new()] {
        let trusted = [w.public_key()];
        let (report, witnesses) = verify_witnessed(&s, &file, &trusted);
        assert_eq!(report, integrity::verify_stream(&s));
        assert_eq!(witnesses, check_witnesses(&s, &file, &trusted));
    }
}

#[test]
fn an_untrusted_witness_is_listed_but_dates_nothing() {
    let s = signed();
    let file = witness_file(&witness(WITNESS), &s);
    let rep = check_witnesses(&s, &file, &[witness([0x58; 32]).public_key()]);
    assert_eq!(rep.witnesses.len(), 1);
    assert!(!rep.witnesses[0].trusted);
    assert!(rep.rejected.is_empty());
    assert_eq!(rep.existed_by_ms, None);
}

/// Backdating: a statement whose time was moved earlier no longer verifies, and the
/// recording's "existed by" time comes from the final checkpoint's statement.
#[test]
fn a_statement_with_a_forged_time_is_rejected() {
    let s = signed();
    let w = witness(WITNESS);
    let mut file = witness_file(&w, &s);
    // The first record's time (bytes 86..94 of its statement, after the 4 length bytes),
    // a day earlier.
    let at = 4 + 86;
    let t = u64::from_le_bytes(file[at..at + 8].try_into().unwrap());
    file[at..at + 8].copy_from_slice(&(t - 86_400_000).to_le_bytes());
    let rep = check_witnesses(&s, &file, &[w.public_key()]);
    assert_eq!(rep.rejected.len(), 1, "{:?}", rep.rejected);
    assert_eq!(rep.rejected[0].record, 0);
    assert!(
        rep.rejected[0].reason.contains("signature"),
        "{:?}",
        rep.rejected
    );
    // The forged statement's checkpoint is not counted; the date is the final one's.
    assert!(!rep.witnesses[0].checkpoints.contains(&0));
    let (checkpoints, _) = checkpoints_in(&s);
    assert_eq!(rep.existed_by_ms, Some(T0 + 1000 * checkpoints as u64));
    // The final checkpoint's statement forged earlier: rejected, and nothing dates the play.
    let mut file = witness_file(&w, &s);
    let last = file.len() - STATEMENT_LEN + 86;
    let t = u64::from_le_bytes(file[last..last + 8].try_into().unwrap());
    file[last..last + 8].copy_from_slice(&(t - 86_400_000).to_le_bytes());
    let rep = check_witnesses(&s, &file, &[w.public_key()]);
    assert_eq!(rep.rejected.len(), 1, "{:?}", rep.rejected);
    assert_eq!(rep.existed_by_ms, None);
}

#[test]
fn statements_for_another_recording_are_rejected() {
    let s = signed();
    let other = sign(
        &replay(8),
        bsor_stream_core::stream::Settings::live(bsor_stream_core::stream::Profile::Lossless),
        KEY_A,
        NONCE_2,
    );
    let w = witness(WITNESS);
    let file = witness_file(&w, &other);
    let rep = check_witnesses(&s, &file, &[w.public_key()]);
    assert!(rep.witnesses.is_empty());
    assert_eq!(rep.existed_by_ms, None);
    assert!(!rep.rejected.is_empty());
    assert!(
        rep.rejected
            .iter()
            .all(|r| r.reason.contains("another recording")),
        "{:?}",
        rep.rejected
    );
    // Same nonce, other records (a re-signed copy keeps nothing of the chain): the chain
    // values name no checkpoint of this stream.
    let resigned = sign(
        &replay(8),
        bsor_stream_core::stream::Settings::live(bsor_stream_core::stream::Profile::Lossless),
        KEY_A,
        NONCE_1,
    );
    let rep = check_witnesses(&s, &witness_file(&w, &resigned), &[w.public_key()]);
    assert!(rep.witnesses.is_empty());
    assert!(
        rep.rejected
            .iter()
            .all(|r| r.reason.contains("does not hold")),
        "{:?}",
        rep.rejected
    );
}

/// Each statement is checked on its own: one bad signature fails alone.
#[test]
fn one_bad_signature_fails_alone() {
    let s = signed();
    let file = witness_file(&witness(WITNESS), &s);
    let mut statements: Vec<Statement> = parse_file(&file)
        .records
        .iter()
        .map(|r| Statement::parse(r).unwrap())
        .collect();
    assert!(verify_statements(&statements).iter().all(|&ok| ok));
    statements[2].signature[40] ^= 1;
    let ok = verify_statements(&statements);
    assert_eq!(ok.iter().filter(|&&b| !b).count(), 1);
    assert!(!ok[2]);
    // A statement's bytes round-trip.
    assert_eq!(
        Statement::parse(&statements[0].to_bytes()).unwrap(),
        statements[0]
    );
    assert_eq!(statements.last().unwrap().subject, Subject::Final);
}

/// A file cut inside a record (a write interrupted) keeps the whole records before it.
#[test]
fn a_cut_file_keeps_its_whole_records() {
    let s = signed();
    let w = witness(WITNESS);
    let file = witness_file(&w, &s);
    let cut = &file[..file.len() - 10];
    let rep = check_witnesses(&s, cut, &[w.public_key()]);
    assert!(rep.cut);
    assert!(rep.rejected.is_empty());
    assert!(!rep.witnesses[0].final_checkpoint);
    // Without the final checkpoint's statement nothing dates the play.
    assert_eq!(rep.existed_by_ms, None);
}

/// The vector `proto-spec/vectors/signed.witness` (integrity.md §12.4): the test witness
/// key's statements for `signed.bsors` at fixed times. `BLESS=1` writes it again.
#[test]
fn the_witness_vector_is_reproduced_and_verifies() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto-spec/vectors");
    let stream = std::fs::read(dir.join("signed.bsors")).unwrap();
    let w = witness(WITNESS);
    let made = witness_file(&w, &stream);
    let path = dir.join("signed.witness");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let stored = std::fs::read(&path).expect("signed.witness");
    assert!(
        stored == made,
        "signed.witness is not what its recipe makes"
    );
    let rep = check_witnesses(&stream, &stored, &[w.public_key()]);
    assert!(rep.rejected.is_empty());
    let (checkpoints, _) = checkpoints_in(&stream);
    assert_eq!(rep.existed_by_ms, Some(T0 + 1000 * checkpoints as u64));
    assert!(rep.witnesses[0].final_checkpoint);
}

/// Theft by pre-dating: the thief has a witness date a note-free prefix of their own
/// (checkpoint 0), then signs a victim's play behind the byte-identical prefix with the same
/// key and nonce. Every statement on the prefix still checks against the new stream, but
/// dates only the prefix: the play is dated by its final checkpoint, which no witness saw
/// before the victim's play existed.
#[test]
fn a_witnessed_prefix_does_not_date_a_play_signed_behind_it() {
    use bsor_stream_core::stream::{Profile, Settings};
    let settings = Settings::live(Profile::Lossless);
    // The victim's play, with no event in its first keyframe group (a song's first notes
    // come after a few seconds); the thief signs it behind their own first group.
    let mut victim = replay(7);
    let group = |r: &bsor_stream_core::bsor::Replay| {
        let s = sign(r, settings, KEY_B, NONCE_2);
        let (_, _, spans) = split_stream(&s).unwrap();
        let c = spans
            .iter()
            .find(|c| c.header.kind == ChunkType::Unknown(CHECKPOINT_CHUNK))
            .unwrap();
        let payload = c.bytes(&s)[c.header_len..].to_vec();
        let frames = u32::from_le_bytes(payload[57..61].try_into().unwrap()) as usize;
        (s, payload, frames)
    };
    let (_, _, n0) = group(&victim);
    let cut = victim.frames[n0].time + 0.1;
    victim.notes.retain(|n| n.event_time > cut);
    victim.walls.retain(|x| x.time > cut);
    victim.heights.retain(|x| x.time > cut);
    victim.pauses.retain(|x| x.time > cut);
    assert!(!victim.notes.is_empty());
    let (stolen, stolen_first, n0) = group(&victim);
    // The prefix: those frames alone, no event, streamed through the witness long before.
    let mut prefix = victim.clone();
    prefix.frames.truncate(n0);
    prefix.notes.clear();
    prefix.walls.clear();
    prefix.heights.clear();
    prefix.pauses.clear();
    let (_, prefix_first, _) = group(&prefix);
    assert_eq!(
        prefix_first, stolen_first,
        "a byte-identical first checkpoint"
    );
    let w = witness(WITNESS);
    let st = w.countersign(CHECKPOINT_CHUNK, &prefix_first, T0).unwrap();
    let mut file = Vec::new();
    append_record(&mut file, &st);
    let rep = check_witnesses(&stolen, &file, &[w.public_key()]);
    assert!(rep.rejected.is_empty(), "{:?}", rep.rejected);
    assert_eq!(rep.witnesses[0].checkpoints, vec![0], "the prefix checks");
    assert_eq!(rep.existed_by_ms, None, "but dates nothing of the play");
}

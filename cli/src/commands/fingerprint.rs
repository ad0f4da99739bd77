//! `fingerprint` and `similar`: the fingerprint of a play (proto-spec/integrity.md §11), its
//! exact event digest and its motion signature, and whether two files hold the same play.

use std::io::{self, Write};
use std::path::Path;

use bsor_stream::bsor::Replay;
use bsor_stream::integrity::fingerprint::{
    event_digest, similarity, MotionSignature, Similarity, THRESHOLD,
};
use bsor_stream::integrity::hex;

use super::{json_err, load_replay, stdout_err, Failure, Outcome};

/// A replay from a BSOR or a stream, with a notice on stderr when a stream was cut short.
fn load(path: &Path) -> Result<Replay, Failure> {
    let (replay, recovery, _) = load_replay(path)?;
    if recovery.is_some_and(|r| !r.complete) {
        eprintln!(
            "{}: the stream is incomplete; the fingerprint covers what was recovered",
            path.display()
        );
    }
    Ok(replay)
}

/// The event digest of `replay` in hex (`verify --signatures --json` reports it too).
pub fn digest_hex(replay: &Replay) -> String {
    hex(&event_digest(replay))
}

/// Prints a file's event digest as hex; with `json`, also its motion signature.
pub fn fingerprint(file: &Path, json: bool) -> Result<Outcome, Failure> {
    let replay = load(file)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let v = serde_json::json!({
            "eventDigest": digest_hex(&replay),
            "motion": MotionSignature::of(&replay),
        });
        serde_json::to_writer(&mut out, &v).map_err(json_err)?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        writeln!(out, "{}", digest_hex(&replay)).map_err(stdout_err)?;
    }
    out.flush().map_err(stdout_err)?;
    Ok(Outcome::Done)
}

/// Compares two files' plays: the score, the threshold, the verdict and whether the event
/// digests are equal. Exits 0 for the same play, 1 for a different one.
pub fn similar(a: &Path, b: &Path, json: bool) -> Result<Outcome, Failure> {
    let (ra, rb) = (load(a)?, load(b)?);
    let same_digest = event_digest(&ra) == event_digest(&rb);
    let s: Similarity = similarity(&MotionSignature::of(&ra), &MotionSignature::of(&rb));
    let verdict = if s.same_play {
        "same play"
    } else {
        "different play"
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let v = serde_json::json!({
            "score": s.score,
            "threshold": THRESHOLD,
            "verdict": verdict,
            "sameDigest": same_digest,
            "matchedNotes": s.matched,
            "offsetSeconds": s.offset,
            "distance": s.distance,
            "eventDigestA": digest_hex(&ra),
            "eventDigestB": digest_hex(&rb),
        });
        serde_json::to_writer(&mut out, &v).map_err(json_err)?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        let digests = if same_digest { "equal" } else { "different" };
        writeln!(out, "score    {:.4} (threshold {THRESHOLD})", s.score).map_err(stdout_err)?;
        writeln!(out, "verdict  {verdict}").map_err(stdout_err)?;
        writeln!(out, "digests  {digests}").map_err(stdout_err)?;
        let offset = s.offset.map_or("-".into(), |o| format!("{o:+.4} s"));
        writeln!(out, "matched  {} notes, time offset {offset}", s.matched).map_err(stdout_err)?;
    }
    out.flush().map_err(stdout_err)?;
    Ok(if s.same_play {
        Outcome::Done
    } else {
        Outcome::Failed
    })
}

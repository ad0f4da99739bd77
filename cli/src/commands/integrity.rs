//! Signed streams on the command line: `keygen`, `sign`, `encode --key` and
//! `verify --signatures` (proto-spec/integrity.md).

use std::io::{self, Write};
use std::path::Path;

use bsor_stream::integrity::witness::{check_witnesses, WitnessReport};
use bsor_stream::integrity::{self, Report, Signer, SigningKey, Verdict};
use bsor_stream::stream::Settings;

use super::{json_err, load_replay, read_all, stdout_err, Failure, Outcome};

/// Writes a new secret key to `output` (hex of its 32-byte seed, mode 0600, never over an
/// existing file) and prints the public key as hex.
pub fn keygen(output: &Path) -> Result<Outcome, Failure> {
    let key = integrity::generate_key().map_err(|e| Failure(format!("randomness: {e}")))?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(output).map_err(|e| (output, e))?;
    writeln!(f, "{}", integrity::hex(key.as_bytes())).map_err(|e| (output, e))?;
    println!("{}", integrity::hex(key.verifying_key().as_bytes()));
    Ok(Outcome::Done)
}

/// The secret key in a file `keygen` wrote.
pub fn load_key(path: &Path) -> Result<SigningKey, Failure> {
    let text = read_all(path)?;
    let seed = std::str::from_utf8(&text)
        .ok()
        .and_then(integrity::from_hex)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| {
            Failure(format!(
                "{}: not a key file (64 hex digits)",
                path.display()
            ))
        })?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A signer with the key in `path` and a fresh nonce.
pub fn signer(path: &Path) -> Result<Signer, Failure> {
    let nonce = integrity::random_nonce().map_err(|e| Failure(format!("randomness: {e}")))?;
    Ok(Signer::new(load_key(path)?, nonce))
}

/// Signs a BSOR or a (complete) stream into a signed lossless stream.
pub fn sign(
    input: &Path,
    key: &Path,
    output: &Path,
    settings: Settings,
) -> Result<Outcome, Failure> {
    let (replay, recovery, _) = load_replay(input)?;
    if recovery.is_some_and(|r| !r.complete) {
        return Err(Failure(format!(
            "{}: the stream is not complete; only a whole recording is signed",
            input.display()
        )));
    }
    let signer = signer(key)?;
    let public = integrity::hex(&signer.public_key());
    let bytes =
        integrity::sign_replay(&replay, settings, signer).map_err(|e| Failure(e.to_string()))?;
    std::fs::write(output, &bytes).map_err(|e| (output, e))?;
    println!(
        "signed with key {public}: this proves only that the key's holder signed these records, not who played them"
    );
    Ok(Outcome::Done)
}

/// Writes `replay` signed with the key in `key` (for `encode --key`).
pub fn encode_signed(
    input: &Path,
    key: &Path,
    output: &Path,
    settings: Settings,
) -> Result<Outcome, Failure> {
    let bytes = read_all(input)?;
    let replay = bsor_stream::bsor::parse(&bytes).map_err(|e| Failure::from((input, e)))?;
    let signed = integrity::sign_replay(&replay, settings, signer(key)?)
        .map_err(|e| Failure(e.to_string()))?;
    let mut w = super::open_output(output)?;
    w.write_all(&signed)
        .and_then(|_| w.flush())
        .map_err(|e| (output, e))?;
    Ok(Outcome::Done)
}

/// The JSON `verify --signatures --json` prints.
pub fn report_json(r: &Report) -> serde_json::Value {
    serde_json::json!({
        "signed": r.signed,
        "signerKey": r.signer_key.map(|k| integrity::hex(&k)),
        "playerId": r.player_id,
        "chainValidToChunk": r.chain_valid_to_chunk,
        "chainValidToSeconds": r.chain_valid_to_seconds,
        "checkpoints": r.checkpoints,
        "witnesses": [],
        "fingerprint": null,
        "verdict": r.verdict.name(),
        "reason": r.reason,
    })
}

/// `verify --signatures`' witness options.
pub struct WitnessArgs {
    /// Public keys (hex) of the witnesses to trust.
    pub trusted: Vec<String>,
    /// The `.witness` file (default: the stream's sibling, if there is one).
    pub file: Option<std::path::PathBuf>,
}

/// The witnesses' part of `verify --signatures --json` (integrity.md §12.3).
pub fn witness_json(w: &WitnessReport) -> (serde_json::Value, serde_json::Value) {
    let witnesses = w
        .witnesses
        .iter()
        .map(|s| {
            serde_json::json!({
                "key": integrity::hex(&s.key),
                "time": s.earliest_ms,
                "earliest": s.earliest_ms,
                "latest": s.latest_ms,
                "checkpoints": s.checkpoints,
                "finalCheckpoint": s.final_checkpoint,
                "trusted": s.trusted,
            })
        })
        .collect();
    let rejected = w
        .rejected
        .iter()
        .map(|r| {
            serde_json::json!({
                "record": r.record,
                "key": r.key.map(|k| integrity::hex(&k)),
                "reason": r.reason,
            })
        })
        .collect();
    (witnesses, rejected)
}

/// Reads the witness statements for `file` and checks them against `bytes`.
fn witnesses(file: &Path, bytes: &[u8], args: &WitnessArgs) -> Result<WitnessReport, Failure> {
    let mut trusted = Vec::new();
    for k in &args.trusted {
        let key = integrity::from_hex(k)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                Failure(format!(
                    "--witness-key {k}: not a public key (64 hex digits)"
                ))
            })?;
        trusted.push(key);
    }
    let statements = match &args.file {
        Some(path) => read_all(path)?,
        None => {
            let sibling = file.with_extension("witness");
            match std::fs::read(&sibling) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err((sibling.as_path(), e).into()),
            }
        }
    };
    Ok(check_witnesses(bytes, &statements, &trusted))
}

/// Verifies a stream's signatures and its witnesses' statements: exits 0 valid, 1 invalid
/// or unsigned, 2 incomplete (a statement that does not hold never changes the verdict).
pub fn verify_signatures(file: &Path, json: bool, args: &WitnessArgs) -> Result<Outcome, Failure> {
    let bytes = read_all(file)?;
    let r = integrity::verify_stream(&bytes);
    let w = witnesses(file, &bytes, args)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let mut v = report_json(&r);
        // The event digest of the whole play; none for a stream that does not decode whole.
        if let Ok((replay, rec)) = bsor_stream::transcode::decode_replay(&bytes) {
            if rec.complete {
                v["fingerprint"] = super::fingerprint::digest_hex(&replay).into();
            }
        }
        let (witnesses, rejected) = witness_json(&w);
        v["witnesses"] = witnesses;
        v["witnessStatementsRejected"] = rejected;
        v["existedBy"] = w.existed_by_ms.into();
        serde_json::to_writer(&mut out, &v).map_err(json_err)?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        let key = r.signer_key.map_or("-".into(), |k| integrity::hex(&k));
        writeln!(out, "{}: {}", file.display(), r.verdict.name()).map_err(stdout_err)?;
        writeln!(out, "  signer key   {key}").map_err(stdout_err)?;
        writeln!(
            out,
            "  player ID    {}",
            r.player_id.as_deref().unwrap_or("-")
        )
        .map_err(stdout_err)?;
        writeln!(out, "  checkpoints  {}", r.checkpoints).map_err(stdout_err)?;
        if let (Some(c), t) = (r.chain_valid_to_chunk, r.chain_valid_to_seconds) {
            let t = t.map_or("-".into(), |t| format!("{t:.3} s"));
            writeln!(out, "  chain valid  to chunk {c}, {t}").map_err(stdout_err)?;
        }
        if let Some(why) = &r.reason {
            writeln!(out, "  reason       {why}").map_err(stdout_err)?;
        }
        for s in &w.witnesses {
            let trust = if s.trusted { "trusted" } else { "not trusted" };
            writeln!(
                out,
                "  witness      {} ({trust}): {} checkpoints{}, {} to {} (Unix ms)",
                integrity::hex(&s.key),
                s.checkpoints.len(),
                if s.final_checkpoint {
                    " and the final one"
                } else {
                    ""
                },
                s.earliest_ms,
                s.latest_ms
            )
            .map_err(stdout_err)?;
        }
        for x in &w.rejected {
            writeln!(out, "  statement {}  rejected: {}", x.record, x.reason)
                .map_err(stdout_err)?;
        }
        if let Some(t) = w.existed_by_ms {
            writeln!(
                out,
                "  existed by   {t} (Unix ms, the earliest trusted witness)"
            )
            .map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(match r.verdict {
        Verdict::Valid => Outcome::Done,
        Verdict::Incomplete => Outcome::Partial,
        Verdict::Invalid | Verdict::Unsigned => Outcome::Failed,
    })
}

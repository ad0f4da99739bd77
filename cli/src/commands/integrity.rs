//! Signed streams on the command line: `keygen`, `sign`, `encode --key` and
//! `verify --signatures` (proto-spec/integrity.md).

use std::io::{self, Write};
use std::path::Path;

use bsor_stream::integrity::witness::{check_witnesses, verify_witnessed, WitnessReport};
use bsor_stream::integrity::{self, Report, Signer, SigningKey, Verdict};
use bsor_stream::stream::Settings;

use bsor_stream::bsor::Replay;
use bsor_stream::stream::{Profile, StreamItem};
use bsor_stream::transcode;

use super::{is_std, json_err, load_replay, read_all, stdout_err, Failure, Outcome};

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
    let (mut replay, recovery, _) = load_replay(input)?;
    strip_entry(input, &mut replay)?;
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
    let mut replay = bsor_stream::bsor::parse(&bytes).map_err(|e| Failure::from((input, e)))?;
    strip_entry(input, &mut replay)?;
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
                "finalTime": s.final_ms,
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

/// The witness statements for `file` (`--witnesses`, else its `.witness` sibling, else
/// none) and the trusted witness keys.
type WitnessInputs = (Vec<u8>, Vec<[u8; 32]>);

fn witness_inputs(file: &Path, args: &WitnessArgs) -> Result<WitnessInputs, Failure> {
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
    Ok((statements, trusted))
}

/// Verifies a stream's signatures and its witnesses' statements: exits 0 valid, 1 invalid
/// or unsigned, 2 incomplete (a statement that does not hold never changes the verdict).
pub fn verify_signatures(file: &Path, json: bool, args: &WitnessArgs) -> Result<Outcome, Failure> {
    let bytes = read_all(file)?;
    let is_bsor = bytes.starts_with(&bsor_stream::bsor::MAGIC.to_le_bytes());
    let (statements, trusted) = witness_inputs(file, args)?;
    let (r, w) = if is_bsor {
        (
            integrity::verify_bsor(&bytes),
            check_witnesses(&bytes, &statements, &trusted),
        )
    } else {
        verify_witnessed(&bytes, &statements, &trusted)
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let mut v = report_json(&r);
        // The event digest of the whole play; none for a file that does not decode whole.
        let whole = if is_bsor {
            bsor_stream::bsor::parse(&bytes).ok()
        } else {
            bsor_stream::transcode::decode_replay(&bytes)
                .ok()
                .and_then(|(replay, rec)| rec.complete.then_some(replay))
        };
        if let Some(replay) = whole {
            v["fingerprint"] = super::fingerprint::digest_hex(&replay).into();
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
                "  existed by   {t} (Unix ms: a trusted witness had the final checkpoint)"
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

/// Takes a signed BSOR's signature entry out before the replay is signed anew: the new
/// signature covers the replay as it was signed, not the old signature.
fn strip_entry(input: &Path, replay: &mut Replay) -> Result<(), Failure> {
    integrity::take_entry(replay)
        .map(|_| ())
        .map_err(|e| Failure(format!("{}: {e}", input.display())))
}

/// `encode` of a signed BSOR (integrity.md §13.4): to a lossless stream, its entry's
/// signing chunks carried back (`Some`); to a lossy one, the entry taken out and the stream
/// unsigned (`None`, with a notice). An unsigned BSOR is left as it is (`None`).
pub fn carried(
    input: &Path,
    replay: &mut Replay,
    settings: Settings,
) -> Result<Option<Vec<u8>>, Failure> {
    let chunks =
        integrity::take_entry(replay).map_err(|e| Failure(format!("{}: {e}", input.display())))?;
    let Some(chunks) = chunks else {
        return Ok(None);
    };
    if settings.profile != Profile::Lossless {
        eprintln!(
            "{}: signed, but a {} stream cannot carry the signature: written unsigned",
            input.display(),
            settings.profile
        );
        return Ok(None);
    }
    integrity::transcode_with_entry(&chunks, replay, settings)
        .map(Some)
        .map_err(|e| Failure(format!("{}: {e}", input.display())))
}

/// `decode` of a signed stream file (integrity.md §13.1): the BSOR with the signature entry
/// in its user data. `None` when the input is not a signed stream file (the caller decodes
/// it as usual).
pub fn decode_signed(input: &Path, output: &Path) -> Result<Option<Outcome>, Failure> {
    if is_std(input) {
        return Ok(None);
    }
    let bytes = read_all(input)?;
    if !starts_signed(&bytes) {
        return Ok(None);
    }
    let (mut replay, rec) = transcode::decode_replay(&bytes).map_err(|e| (input, e))?;
    // The signature goes into the BSOR only with the replay its verifier decoded: the
    // records the signatures cover, nothing read another way (integrity.md §8).
    let verified = integrity::decode_verified(&bytes);
    match verified.replay {
        Some(signed) => {
            let chunks = integrity::SigningChunks::from_stream(&bytes);
            match chunks.and_then(|c| {
                let mut with_entry = signed;
                integrity::add_entry(&mut with_entry, &c).map(|()| with_entry)
            }) {
                Ok(with_entry) => replay = with_entry,
                Err(e) => eprintln!(
                    "{}: the BSOR is written without its signature: {e}",
                    input.display()
                ),
            }
        }
        None => eprintln!(
            "{}: the signature does not verify ({}: {}): the BSOR is written without it",
            input.display(),
            verified.report.verdict.name(),
            verified.report.reason.unwrap_or_default()
        ),
    }
    super::stream::write_bsor(output, &replay)?;
    Ok(Some(super::stream::report(&rec)))
}

/// Does a stream's first chunk (after the header) hold a key chunk?
fn starts_signed(bytes: &[u8]) -> bool {
    let mut d = bsor_stream::stream::StreamDecoder::new();
    // The header and the first chunk are enough: a key chunk is chunk 0.
    let n = bytes.len().min(1 << 21);
    d.push(&bytes[..n]);
    loop {
        match d.next_item() {
            Ok(Some(StreamItem::Header(_))) => continue,
            Ok(Some(StreamItem::Skipped { kind, .. })) => return kind == integrity::KEY_CHUNK,
            _ => return false,
        }
    }
}

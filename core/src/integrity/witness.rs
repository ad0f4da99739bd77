//! Witnesses (`integrity.md` §12): a relay with a key of its own countersigns each
//! checkpoint and the final checkpoint it receives with its receive time. A *witness
//! statement* says "this key saw the signing chunk whose chain value is C, of the recording
//! with nonce N, by time T"; the earliest trusted one is how a recording proves it existed
//! by then (backdating, `integrity-notes.md`).
//!
//! Sans-IO: [`Witness::countersign`] turns a chunk's payload and a time into a statement;
//! the relay's session logic calls it, its shell stores the statements in the
//! `SESSION.witness` file ([`append_record`], [`parse_file`]). [`check_witnesses`] checks a
//! file's statements against a stream.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use super::layout::{chain_hash, CHECKPOINT_CHUNK, CHECKPOINT_LEN, FINAL_CHUNK, FINAL_LEN};
use super::verify::{feed, Verified, Verifier};
use super::{Report, Verdict, NONCE_LEN, VERSION};

/// Bytes of a witness statement.
pub const STATEMENT_LEN: usize = 1 + 32 + NONCE_LEN + 1 + 4 + 32 + 8 + 64;

/// The domain string of a witness statement's signature.
pub const DOMAIN_WITNESS: &[u8] = b"bsor-stream integrity v1 witness statement";

/// The most statements [`parse_file`] reads from one file (a 5-minute live recording has
/// about 300 checkpoints; a witness file from several relays' runs stays far below this).
pub const MAX_STATEMENTS: usize = 1 << 20;

/// Where the signed part of a statement ends (and the signature starts).
const SIGNED_LEN: usize = STATEMENT_LEN - 64;

/// Which signing chunk a statement countersigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// A checkpoint (`0x11`).
    Checkpoint,
    /// The final checkpoint (`0x12`).
    Final,
}

impl Subject {
    fn byte(self) -> u8 {
        match self {
            Subject::Checkpoint => 0,
            Subject::Final => 1,
        }
    }
}

/// A witness statement (`integrity.md` §12.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The witness's public key.
    pub witness: [u8; 32],
    /// The recording's nonce (its key chunk's).
    pub nonce: [u8; NONCE_LEN],
    /// Checkpoint or final checkpoint.
    pub subject: Subject,
    /// The countersigned chunk's index field.
    pub index: u32,
    /// The countersigned chunk's chain value (`integrity.md` §7).
    pub chain: [u8; 32],
    /// When the witness received it, in Unix milliseconds.
    pub time_ms: u64,
    /// The witness's signature over the domain string and bytes `0..94`.
    pub signature: [u8; 64],
}

/// Why a statement was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WitnessError {
    /// Not 158 bytes, an unknown version or subject, or a key that is not a curve point.
    Layout(String),
    /// The signature does not verify under the statement's key.
    Signature,
}

impl fmt::Display for WitnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WitnessError::Layout(s) => write!(f, "{s}"),
            WitnessError::Signature => write!(f, "its signature does not verify"),
        }
    }
}

impl Statement {
    /// The statement's bytes (`integrity.md` §12.1).
    pub fn to_bytes(&self) -> [u8; STATEMENT_LEN] {
        let mut out = [0u8; STATEMENT_LEN];
        out[..SIGNED_LEN].copy_from_slice(&self.signed_part());
        out[SIGNED_LEN..].copy_from_slice(&self.signature);
        out
    }

    fn signed_part(&self) -> [u8; SIGNED_LEN] {
        let mut out = [0u8; SIGNED_LEN];
        out[0] = VERSION;
        out[1..33].copy_from_slice(&self.witness);
        out[33..49].copy_from_slice(&self.nonce);
        out[49] = self.subject.byte();
        out[50..54].copy_from_slice(&self.index.to_le_bytes());
        out[54..86].copy_from_slice(&self.chain);
        out[86..94].copy_from_slice(&self.time_ms.to_le_bytes());
        out
    }

    /// What the signature is over: the domain string, then bytes `0..94`.
    pub fn message(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(DOMAIN_WITNESS.len() + SIGNED_LEN);
        m.extend_from_slice(DOMAIN_WITNESS);
        m.extend_from_slice(&self.signed_part());
        m
    }

    /// Reads a statement's layout (its signature is not checked: [`verify`](Self::verify)).
    pub fn parse(bytes: &[u8]) -> Result<Statement, WitnessError> {
        if bytes.len() != STATEMENT_LEN {
            return Err(WitnessError::Layout(format!(
                "{} bytes where a statement has {STATEMENT_LEN}",
                bytes.len()
            )));
        }
        if bytes[0] != VERSION {
            return Err(WitnessError::Layout(format!("version {}", bytes[0])));
        }
        let subject = match bytes[49] {
            0 => Subject::Checkpoint,
            1 => Subject::Final,
            b => return Err(WitnessError::Layout(format!("subject {b}"))),
        };
        let arr = |r: std::ops::Range<usize>| bytes[r].to_vec();
        let mut s = Statement {
            witness: [0; 32],
            nonce: [0; NONCE_LEN],
            subject,
            index: u32::from_le_bytes([bytes[50], bytes[51], bytes[52], bytes[53]]),
            chain: [0; 32],
            time_ms: u64::from_le_bytes(bytes[86..94].try_into().unwrap_or([0; 8])),
            signature: [0; 64],
        };
        s.witness.copy_from_slice(&arr(1..33));
        s.nonce.copy_from_slice(&arr(33..49));
        s.chain.copy_from_slice(&arr(54..86));
        s.signature.copy_from_slice(&arr(SIGNED_LEN..STATEMENT_LEN));
        Ok(s)
    }

    /// The witness's key, if a verifier may take it ([`strict_key`]: a canonical,
    /// torsion-free point).
    ///
    /// [`strict_key`]: super::strict_key
    pub fn key(&self) -> Result<VerifyingKey, WitnessError> {
        super::layout::strict_key(&self.witness)
            .map_err(|why| WitnessError::Layout(format!("the witness key {why}")))
    }

    /// Checks the signature with `verify_strict` (`integrity.md` §1).
    pub fn verify(&self) -> Result<(), WitnessError> {
        let key = self.key()?;
        key.verify_strict(&self.message(), &Signature::from_bytes(&self.signature))
            .map_err(|_| WitnessError::Signature)
    }
}

/// A relay's witness key. Its `Debug` shows the public key only: the secret is never
/// logged.
pub struct Witness {
    key: SigningKey,
}

impl fmt::Debug for Witness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Witness")
            .field(
                "public_key",
                &super::hex(self.key.verifying_key().as_bytes()),
            )
            .finish()
    }
}

impl Witness {
    /// A witness signing with `key`.
    pub fn new(key: SigningKey) -> Self {
        Witness { key }
    }

    /// The public key that verifies its statements.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// The statement for a signing chunk of type `kind` with `payload`, received at
    /// `time_ms` (Unix milliseconds); `None` for a chunk that is not a checkpoint or final
    /// checkpoint of this version's layout (its length and version byte). The chunk's own
    /// signature is not checked: the statement says what was received when, and a verifier
    /// matches it to a stream by its chain value.
    pub fn countersign(&self, kind: u8, payload: &[u8], time_ms: u64) -> Option<Statement> {
        let subject = match (kind, payload.len()) {
            (CHECKPOINT_CHUNK, CHECKPOINT_LEN) => Subject::Checkpoint,
            (FINAL_CHUNK, FINAL_LEN) => Subject::Final,
            _ => return None,
        };
        if payload[0] != VERSION {
            return None;
        }
        let mut s = Statement {
            witness: self.public_key(),
            nonce: payload[1..1 + NONCE_LEN].try_into().ok()?,
            subject,
            index: u32::from_le_bytes(payload[17..21].try_into().ok()?),
            chain: chain_hash(payload),
            time_ms,
            signature: [0; 64],
        };
        s.signature = self.key.sign(&s.message()).to_bytes();
        Some(s)
    }
}

/// Appends one record of a `.witness` file (`integrity.md` §12.2): the statement's length
/// as a `u32`, then the statement.
pub fn append_record(out: &mut Vec<u8>, s: &Statement) {
    out.extend_from_slice(&(STATEMENT_LEN as u32).to_le_bytes());
    out.extend_from_slice(&s.to_bytes());
}

/// A `.witness` file read: its statements' bytes in file order, and whether it ends inside
/// a record (a write cut short: that record is left out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WitnessFile<'a> {
    /// Each record's bytes (a statement, if its layout holds).
    pub records: Vec<&'a [u8]>,
    /// The file ends inside a record.
    pub cut: bool,
    /// Records past [`MAX_STATEMENTS`] that were not read.
    pub left_out: usize,
}

/// Splits a `.witness` file into its records (`integrity.md` §12.2).
pub fn parse_file(bytes: &[u8]) -> WitnessFile<'_> {
    let mut f = WitnessFile::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(len) = bytes.get(at..at + 4) else {
            f.cut = true;
            break;
        };
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(rec) = bytes.get(at + 4..(at + 4).saturating_add(len)) else {
            f.cut = true;
            break;
        };
        if f.records.len() < MAX_STATEMENTS {
            f.records.push(rec);
        } else {
            f.left_out += 1;
        }
        at += 4 + len;
    }
    f
}

/// What one witness key witnessed of a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WitnessSummary {
    /// Its public key.
    pub key: [u8; 32],
    /// The earliest receive time it signed, Unix milliseconds.
    pub earliest_ms: u64,
    /// The latest.
    pub latest_ms: u64,
    /// Indices of the checkpoints it countersigned, ascending.
    pub checkpoints: Vec<u32>,
    /// It countersigned the final checkpoint.
    pub final_checkpoint: bool,
    /// The earliest receive time it signed for the final checkpoint, Unix milliseconds.
    pub final_ms: Option<u64>,
    /// Its key was among those the verifier trusts.
    pub trusted: bool,
}

/// A statement that was not accepted, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The record's place in the file (0 first).
    pub record: usize,
    /// The key it names, if its layout held.
    pub key: Option<[u8; 32]>,
    /// Why.
    pub reason: String,
}

/// The witnesses of a recording: who witnessed what, and since when (`integrity.md`
/// §12.3). It never changes a stream's verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WitnessReport {
    /// Each witness key with accepted statements, in key order.
    pub witnesses: Vec<WitnessSummary>,
    /// The statements not accepted.
    pub rejected: Vec<Rejected>,
    /// The earliest time a trusted witness countersigned the final checkpoint of a stream
    /// that verified as `valid`: the whole play existed by then (`integrity.md` §12.3).
    /// Statements on earlier checkpoints date only what those cover, and not this.
    pub existed_by_ms: Option<u64>,
    /// The file ends inside a record.
    pub cut: bool,
}

/// A stream's verified checkpoints and final checkpoint by chain value: (subject, index).
type ByChain = HashMap<[u8; 32], (Subject, u32)>;

/// The signing chunks a statement may name: those of the chain the verifier verified.
fn subjects(verified: &[Verified]) -> ByChain {
    verified
        .iter()
        .map(|&(chain, fin, index)| {
            let subject = if fin {
                Subject::Final
            } else {
                Subject::Checkpoint
            };
            (chain, (subject, index))
        })
        .collect()
}

/// Checks statements' signatures (`integrity.md` §12.3), each alone with `verify_strict`
/// under a key [`strict_key`](super::strict_key) accepts; each distinct key is decoded once.
/// Returns, for each, whether it verifies.
pub fn verify_statements(statements: &[Statement]) -> Vec<bool> {
    let mut keys: HashMap<[u8; 32], Option<VerifyingKey>> = HashMap::new();
    statements
        .iter()
        .map(|s| {
            let key = *keys.entry(s.witness).or_insert_with(|| s.key().ok());
            key.is_some_and(|k| {
                k.verify_strict(&s.message(), &Signature::from_bytes(&s.signature))
                    .is_ok()
            })
        })
        .collect()
}

/// A `.witness` file's statements with their signatures checked: each laid-out statement
/// with its record number and whether its signature holds, the records that are not
/// statements, and whether the file is cut.
struct Checked {
    statements: Vec<(usize, Statement, bool)>,
    rejected: Vec<Rejected>,
    cut: bool,
}

fn check_file(file: &[u8]) -> Checked {
    let parsed = parse_file(file);
    let mut laid_out = Vec::new();
    let mut rejected = Vec::new();
    for (i, rec) in parsed.records.iter().enumerate() {
        match Statement::parse(rec) {
            Ok(s) => laid_out.push((i, s)),
            Err(e) => rejected.push(Rejected {
                record: i,
                key: None,
                reason: e.to_string(),
            }),
        }
    }
    let sigs = verify_statements(&laid_out.iter().map(|(_, s)| *s).collect::<Vec<_>>());
    Checked {
        statements: laid_out
            .into_iter()
            .zip(sigs)
            .map(|((i, s), ok)| (i, s, ok))
            .collect(),
        rejected,
        cut: parsed.cut,
    }
}

/// Judges checked statements against what the stream's verifier verified: its nonce, the
/// chain values of its verified signing chunks, and its verdict.
fn judge(
    checked: Checked,
    report: &Report,
    nonce: Option<[u8; NONCE_LEN]>,
    verified: &[Verified],
    trusted: &[[u8; 32]],
) -> WitnessReport {
    let chunks = subjects(verified);
    let trusted: HashSet<[u8; 32]> = trusted.iter().copied().collect();
    let mut report_out = WitnessReport {
        cut: checked.cut,
        rejected: checked.rejected,
        ..WitnessReport::default()
    };
    let mut by_key: BTreeMap<[u8; 32], WitnessSummary> = BTreeMap::new();
    for (i, s, ok) in checked.statements {
        let reject = |reason: String| Rejected {
            record: i,
            key: Some(s.witness),
            reason,
        };
        if !ok {
            report_out
                .rejected
                .push(reject(WitnessError::Signature.to_string()));
            continue;
        }
        if Some(s.nonce) != nonce {
            report_out
                .rejected
                .push(reject("it names another recording (nonce)".into()));
            continue;
        }
        match chunks.get(&s.chain) {
            Some(&(subject, index)) if subject == s.subject && index == s.index => {}
            _ => {
                report_out.rejected.push(reject(format!(
                    "it names a checkpoint (index {}) this stream does not hold",
                    s.index
                )));
                continue;
            }
        }
        let w = by_key.entry(s.witness).or_insert_with(|| WitnessSummary {
            key: s.witness,
            earliest_ms: s.time_ms,
            latest_ms: s.time_ms,
            checkpoints: Vec::new(),
            final_checkpoint: false,
            final_ms: None,
            trusted: trusted.contains(&s.witness),
        });
        w.earliest_ms = w.earliest_ms.min(s.time_ms);
        w.latest_ms = w.latest_ms.max(s.time_ms);
        match s.subject {
            Subject::Checkpoint => w.checkpoints.push(s.index),
            Subject::Final => {
                w.final_checkpoint = true;
                w.final_ms = Some(w.final_ms.map_or(s.time_ms, |t| t.min(s.time_ms)));
            }
        }
    }
    for w in by_key.values_mut() {
        w.checkpoints.sort_unstable();
        w.checkpoints.dedup();
    }
    // Only the final checkpoint covers the whole play (every event and the final info), and
    // only a valid stream's final checkpoint is the play's.
    report_out.existed_by_ms = if report.verdict == Verdict::Valid {
        by_key
            .values()
            .filter(|w| w.trusted)
            .filter_map(|w| w.final_ms)
            .min()
    } else {
        None
    };
    report_out.witnesses = by_key.into_values().collect();
    report_out
}

/// Reads a `.witness` file's statements against a stream: each statement's layout, its
/// signature, that it names this recording (its nonce) and one of the checkpoints of this
/// stream that verified (its chain value, subject and index). Keys in `trusted` are marked
/// trusted; the earliest time among their accepted statements on the final checkpoint of a
/// `valid` stream is the play's "existed by" time.
pub fn check_witnesses(stream: &[u8], file: &[u8], trusted: &[[u8; 32]]) -> WitnessReport {
    verify_witnessed(stream, file, trusted).1
}

/// Verifies a whole stream file and its witnesses' statements: [`verify_stream`]'s report
/// and [`check_witnesses`]'s, the statements' signatures checked on a second thread while
/// the stream is verified on this one (one after the other where no thread can be made).
///
/// [`verify_stream`]: super::verify_stream
pub fn verify_witnessed(
    stream: &[u8],
    file: &[u8],
    trusted: &[[u8; 32]],
) -> (Report, WitnessReport) {
    let verify = || {
        let mut v = Verifier::new();
        let report = feed(stream, &mut v);
        (report, v)
    };
    let ((report, v), checked) = if file.is_empty() {
        (verify(), check_file(file))
    } else {
        std::thread::scope(|scope| {
            let statements = std::thread::Builder::new()
                .name("bsrs-witness".into())
                .spawn_scoped(scope, || check_file(file));
            let done = verify();
            let checked = match statements {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => check_file(file),
            };
            (done, checked)
        })
    };
    let witnesses = judge(checked, &report, v.nonce(), v.verified(), trusted);
    (report, witnesses)
}

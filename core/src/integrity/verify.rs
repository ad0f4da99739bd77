//! The verifying side (`integrity.md` §8): fed with a stream's items and its signing chunks,
//! in stream order, it checks each as it comes and keeps only the records since the last
//! checkpoint.

use std::collections::{BTreeMap, VecDeque};

use ed25519_dalek::VerifyingKey;

use crate::bsor::{BsorString, Frame, Height, NoteEvent, Pause, Replay, Wall};
use crate::stream::{
    ChunkHeader, ChunkType, DamageKind, DecoderHook, StreamDecoder, StreamError, StreamItem,
    Trailer,
};

use super::layout::{
    binding_of, chain_hash, final_hash, Checkpoint, FinalCheckpoint, KeyChunk, Ranges,
    RecordHasher, CHECKPOINT_CHUNK, FINAL_CHUNK, KEY_CHUNK, KINDS, NONCE_LEN,
};

/// The most records a verifier holds that no checkpoint has covered yet: a signed stream
/// with more between two checkpoints is invalid (`integrity.md` §8).
pub const MAX_UNCHECKED: usize = 1 << 20;

/// What a verification concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Signed, every check holds, nothing is missing, and the final checkpoint covers the
    /// whole recording.
    Valid,
    /// Signed, nothing checked failed, but something is missing (a cut stream, a gap, a late
    /// join): valid up to `chain_valid_to_chunk`.
    Incomplete,
    /// Something checked failed: `reason` says what and where.
    Invalid,
    /// No signing chunks at all.
    Unsigned,
}

impl Verdict {
    /// The verdict's name in reports: `valid`, `incomplete`, `invalid`, `unsigned`.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Incomplete => "incomplete",
            Verdict::Invalid => "invalid",
            Verdict::Unsigned => "unsigned",
        }
    }
}

/// The facts a verification establishes. A valid signature proves who held the key, not
/// who played: binding a key to a player is the key registry's business.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// A key chunk or a checkpoint was found.
    pub signed: bool,
    /// The signer's public key, from a key chunk whose signature holds.
    pub signer_key: Option<[u8; 32]>,
    /// The player ID the key chunk binds.
    pub player_id: Option<String>,
    /// Sequence number of the last signing chunk of the unbroken chain that verified.
    pub chain_valid_to_chunk: Option<u32>,
    /// Song time of the last frame that chain covers.
    pub chain_valid_to_seconds: Option<f32>,
    /// Checkpoints whose signature and records verified.
    pub checkpoints: u32,
    /// The conclusion.
    pub verdict: Verdict,
    /// Why the verdict is not `valid`, naming the chunk and its byte offset.
    pub reason: Option<String>,
}

/// Records of one kind by index: a run of consecutive indices in a deque (a stream's
/// records come in order, so nearly all go there, without a map's node per record), any
/// other in a map. No index is in both.
#[derive(Debug)]
struct Kept<T> {
    /// Index of `run[0]`; `start + run.len()` never wraps.
    start: u32,
    run: VecDeque<T>,
    other: BTreeMap<u32, T>,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept {
            start: 0,
            run: VecDeque::new(),
            other: BTreeMap::new(),
        }
    }
}

impl<T> Kept<T> {
    fn len(&self) -> usize {
        self.run.len() + self.other.len()
    }

    fn in_run(&self, at: u32) -> Option<usize> {
        let off = at.checked_sub(self.start)? as usize;
        (off < self.run.len()).then_some(off)
    }

    fn get(&self, at: &u32) -> Option<&T> {
        match self.in_run(*at) {
            Some(off) => self.run.get(off),
            None => self.other.get(at),
        }
    }

    /// Holds `r` at `at`; `false` if a record is held there already.
    fn insert(&mut self, at: u32, r: T) -> bool {
        if self.in_run(at).is_some() {
            return false;
        }
        if self.other.contains_key(&at) {
            return false;
        }
        if self.run.is_empty() {
            self.start = at;
        }
        let next = u32::try_from(self.run.len())
            .ok()
            .and_then(|n| self.start.checked_add(n));
        if next == Some(at) {
            self.run.push_back(r);
        } else {
            self.other.insert(at, r);
        }
        true
    }

    /// Keeps only the records at `end` and above.
    fn split_off(&mut self, end: &u32) -> Self {
        let n = end.saturating_sub(self.start) as usize;
        let n = n.min(self.run.len());
        self.run.drain(..n);
        self.start = self.start.wrapping_add(n as u32);
        Kept {
            start: self.start,
            run: std::mem::take(&mut self.run),
            other: self.other.split_off(end),
        }
    }
}

/// Records received and not yet covered by a checkpoint, by kind and index.
#[derive(Debug, Default)]
struct Held {
    frames: Kept<Frame>,
    notes: Kept<NoteEvent>,
    walls: Kept<Wall>,
    heights: Kept<Height>,
    pauses: Kept<Pause>,
}

impl Held {
    fn len(&self) -> usize {
        self.frames.len()
            + self.notes.len()
            + self.walls.len()
            + self.heights.len()
            + self.pauses.len()
    }

    /// Drops every record below `end` (what a checkpoint covered).
    fn drop_below(&mut self, end: [u32; KINDS]) {
        fn keep<T>(m: &mut Kept<T>, end: u32) {
            *m = m.split_off(&end);
        }
        keep(&mut self.frames, end[0]);
        keep(&mut self.notes, end[1]);
        keep(&mut self.walls, end[2]);
        keep(&mut self.heights, end[3]);
        keep(&mut self.pauses, end[4]);
    }

    /// The records hash over `r` and the time of its last frame, or the first kind and
    /// index missing.
    fn hash(&self, r: &Ranges) -> Result<([u8; 32], Option<f32>), (usize, u32)> {
        fn each<T>(
            m: &Kept<T>,
            k: usize,
            r: &Ranges,
            mut f: impl FnMut(&T),
        ) -> Result<(), (usize, u32)> {
            for i in 0..r.count[k] {
                let at = r.first[k].wrapping_add(i);
                f(m.get(&at).ok_or((k, at))?);
            }
            Ok(())
        }
        let mut h = RecordHasher::default();
        let mut last = None;
        each(&self.frames, 0, r, |f| {
            h.frame(f);
            last = Some(f.time);
        })?;
        each(&self.notes, 1, r, |n| h.note(n))?;
        each(&self.walls, 2, r, |w| h.wall(w))?;
        each(&self.heights, 3, r, |x| h.height(x))?;
        each(&self.pauses, 4, r, |p| h.pause(p))?;
        Ok((h.take(), last))
    }

    /// Appends the records of `r` (all held: [`hash`](Self::hash) found them) to `out`,
    /// in index order.
    fn release(&self, r: &Ranges, out: &mut Released) {
        fn each<T: Copy>(m: &Kept<T>, k: usize, r: &Ranges, out: &mut Vec<T>) {
            for i in 0..r.count[k] {
                if let Some(x) = m.get(&r.first[k].wrapping_add(i)) {
                    out.push(*x);
                }
            }
        }
        each(&self.frames, 0, r, &mut out.frames);
        each(&self.notes, 1, r, &mut out.notes);
        each(&self.walls, 2, r, &mut out.walls);
        each(&self.heights, 3, r, &mut out.heights);
        each(&self.pauses, 4, r, &mut out.pauses);
    }
}

/// The records the checkpoints covered, in index order: what a verifying decode yields
/// ([`decode_verified`]).
#[derive(Debug, Default)]
struct Released {
    frames: Vec<Frame>,
    notes: Vec<NoteEvent>,
    walls: Vec<Wall>,
    heights: Vec<Height>,
    pauses: Vec<Pause>,
}

/// A signing chunk that verified: its chain value, whether it is the final checkpoint, and
/// its index (what a witness statement names, `integrity.md` §12.3).
pub(crate) type Verified = ([u8; 32], bool, u32);

/// How records of a kind arrived against the order they must come in.
enum Order {
    /// Each was the next one due.
    InOrder,
    /// The first one was past the next one due: the records between were not received.
    Gap { due: u64, found: u32 },
}

/// Holds records `first..` of a kind, which must come in index order (`integrity.md` §8:
/// each record once, each after the one before it); `due` is the index of the next one,
/// once known. Err: the index of one that came before (held, below `covered`, the end of
/// what the checkpoints so far covered, or below the next one due).
fn put<T: Copy>(
    m: &mut Kept<T>,
    covered: Option<u32>,
    due: &mut Option<u64>,
    first: u32,
    rs: &[T],
) -> Result<Order, u32> {
    let mut order = Order::InOrder;
    for (i, r) in rs.iter().enumerate() {
        let Some(at) = u32::try_from(i).ok().and_then(|i| first.checked_add(i)) else {
            // Past the last index there is: no record can be there.
            return Err(u32::MAX);
        };
        let wide = u64::from(at);
        if covered.is_some_and(|c| at < c) || due.is_some_and(|d| wide < d) || !m.insert(at, *r) {
            return Err(at);
        }
        if let (Some(d), Order::InOrder) = (*due, &order) {
            if wide != d {
                order = Order::Gap { due: d, found: at };
            }
        }
        *due = Some(wide + 1);
    }
    Ok(order)
}

const KIND_NAMES: [&str; KINDS] = ["frame", "note", "wall", "height", "pause"];
const BINDING_NAMES: [&str; 5] = ["player ID", "map hash", "difficulty", "mode", "start time"];

/// Verifies one stream as it is read: give it every item a [`StreamDecoder`] yields
/// ([`item`](Self::item)) and the payload of every signing chunk the decoder skipped
/// ([`chunk`](Self::chunk)), in stream order; then [`report`](Self::report). Every signature
/// is checked with `verify_strict` when its chunk comes.
#[derive(Debug)]
pub struct Verifier {
    joining: bool,
    header: Option<[BsorString; 5]>,
    key: Option<(KeyChunk, VerifyingKey)>,
    signed: bool,
    /// What came after the header before any key chunk: a signed stream's key chunk is its
    /// first chunk (`integrity.md` §8), so a key chunk after it is a failure.
    before_key: Option<String>,
    /// Chain value, index and record ends the next checkpoint must carry, once known.
    prev: Option<[u8; 32]>,
    next_index: u32,
    covered: Option<[u32; KINDS]>,
    /// The index of the next record of each kind, once one came: records come in order.
    due: [Option<u64>; KINDS],
    /// The chain from the start (or, joining, from the first whole checkpoint) holds.
    chain: bool,
    valid_to: Option<(u32, Option<f32>)>,
    checkpoints: u32,
    held: Held,
    fin: Option<(u32, u64, FinalCheckpoint)>,
    trailer: Option<Trailer>,
    failure: Option<String>,
    /// First thing missing: a gap, damage, a cut.
    missing: Option<String>,
    /// The signing chunks of the unbroken chain that verified, in order.
    verified: Vec<Verified>,
    /// Decoding ([`decode_verified`]): the records each checkpoint covered, once it verified.
    released: Option<Released>,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Verifier {
    /// A verifier that reads a stream from its start.
    pub fn new() -> Self {
        Verifier {
            joining: false,
            header: None,
            key: None,
            signed: false,
            before_key: None,
            prev: None,
            next_index: 0,
            covered: None,
            due: [None; KINDS],
            chain: true,
            valid_to: None,
            checkpoints: 0,
            held: Held::default(),
            fin: None,
            trailer: None,
            failure: None,
            missing: None,
            verified: Vec::new(),
            released: None,
        }
    }

    /// A verifier that also keeps the records each checkpoint covers once it verified: the
    /// replay [`decode_verified`] yields.
    fn decoding() -> Self {
        Verifier {
            released: Some(Released::default()),
            ..Self::new()
        }
    }

    /// A verifier for a viewer that joined late: it has the header and the key chunk, then
    /// the stream from some keyframe group on. Its chain starts at the first checkpoint
    /// whose records it has; it can conclude `incomplete` at best.
    pub fn joining() -> Self {
        Verifier {
            joining: true,
            chain: false,
            ..Self::new()
        }
    }

    fn fail(&mut self, why: String) {
        if self.failure.is_none() {
            self.failure = Some(why);
        }
    }

    fn miss(&mut self, why: String) {
        if self.missing.is_none() {
            self.missing = Some(why);
        }
        self.chain = false;
    }

    /// Holds a run of records of kind `k` (index `K` of `held`, `due`, `covered`).
    fn records<T: Copy>(
        &mut self,
        k: usize,
        first: u32,
        rs: &[T],
        held: impl FnOnce(&mut Held) -> &mut Kept<T>,
    ) {
        if rs.is_empty() {
            return;
        }
        if let Some(f) = &self.fin {
            let at = f.1;
            return self.fail(format!(
                "{} {first} comes after the final checkpoint (byte offset {at})",
                KIND_NAMES[k]
            ));
        }
        let covered = self.covered.map(|c| c[k]);
        let mut due = self.due[k];
        let r = put(held(&mut self.held), covered, &mut due, first, rs);
        self.due[k] = due;
        match r {
            Err(i) => self.fail(format!("{} {i} comes twice or out of order", KIND_NAMES[k])),
            Ok(Order::Gap { due, found }) => self.miss(format!(
                "{}s {due} to {} were not received",
                KIND_NAMES[k],
                found.saturating_sub(1)
            )),
            Ok(Order::InOrder) => {}
        }
    }

    /// Notes what came before a key chunk (the first thing only).
    fn before_key(&mut self, what: impl FnOnce() -> String) {
        if self.key.is_none() && self.before_key.is_none() {
            self.before_key = Some(what());
        }
    }

    /// An item of the stream, as the decoder yields it.
    pub fn item(&mut self, item: &StreamItem) {
        if self.failure.is_some() {
            return;
        }
        match item {
            StreamItem::Header(h) => self.header = Some(binding_of(&h.info)),
            StreamItem::Frame { index, .. } if self.key.is_none() => {
                self.before_key(|| format!("frame {index}"))
            }
            StreamItem::FrameRecords { first, .. } if self.key.is_none() => {
                self.before_key(|| format!("frame {first}"))
            }
            StreamItem::Events(b) if self.key.is_none() => {
                self.before_key(|| format!("an events chunk (notes from {})", b.notes.first))
            }
            StreamItem::Frame { index, frame } => {
                self.records(0, *index, std::slice::from_ref(frame), |h| &mut h.frames)
            }
            StreamItem::FrameRecords { first, records } => {
                let frames: Vec<Frame> = records
                    .chunks_exact(crate::bsor::FRAME_SIZE)
                    .filter_map(|r| r.try_into().ok().map(crate::bsor::decode_frame))
                    .collect();
                self.records(0, *first, &frames, |h| &mut h.frames)
            }
            StreamItem::Events(b) => {
                self.records(1, b.notes.first, &b.notes.records, |h| &mut h.notes);
                self.records(2, b.walls.first, &b.walls.records, |h| &mut h.walls);
                self.records(3, b.heights.first, &b.heights.records, |h| &mut h.heights);
                self.records(4, b.pauses.first, &b.pauses.records, |h| &mut h.pauses);
            }
            StreamItem::Trailer(_) if self.key.is_some() && self.trailer.is_some() => {
                self.fail("a second trailer".into())
            }
            StreamItem::Trailer(t) => {
                self.before_key(|| "the trailer".into());
                self.trailer = Some((**t).clone());
            }
            StreamItem::Index(_) => self.before_key(|| "the index".into()),
            StreamItem::Damage(d) if self.key.is_none() => {
                self.before_key(|| format!("damage at byte offset {}: {}", d.offset, d.what()))
            }
            StreamItem::Damage(d) if self.late_join_gap(&d.kind) => {
                // Header and key chunk, then a gap to some later chunk: what a relay gives
                // a viewer that joined late (wire.md §3). Verified as a joiner (§8).
                self.joining = true;
                self.chain = false;
                self.covered = None;
                self.valid_to = None;
                self.verified.clear();
                self.missing = Some(format!(
                    "joined late: chunks 1 to {} were not received",
                    match d.kind {
                        DamageKind::SequenceGap { found, .. } => found.saturating_sub(1),
                        _ => 0,
                    }
                ));
            }
            StreamItem::Damage(d) if !self.joining || self.checkpoints > 0 => {
                self.miss(format!("damage at byte offset {}: {}", d.offset, d.what()))
            }
            _ => {}
        }
        if self.held.len() > MAX_UNCHECKED {
            self.fail(format!(
                "more than {MAX_UNCHECKED} records without a checkpoint"
            ));
            self.held = Held::default();
        }
    }

    /// A sequence gap right after the key chunk (chunk 0), before anything else: a late
    /// joiner's stream.
    fn late_join_gap(&self, kind: &DamageKind) -> bool {
        !self.joining
            && self.key.is_some()
            && self.valid_to.is_some_and(|v| v.0 == 0)
            && self.checkpoints == 0
            && self.held.len() == 0
            && self.fin.is_none()
            && self.missing.is_none()
            && matches!(kind, DamageKind::SequenceGap { expected: 1, .. })
    }

    /// A signing chunk: its sequence number, byte offset, type and payload. Other types are
    /// ignored.
    pub fn chunk(&mut self, seq: u32, offset: u64, kind: u8, payload: &[u8]) {
        if self.failure.is_some() {
            return;
        }
        match kind {
            KEY_CHUNK => self.key_chunk(seq, offset, payload),
            CHECKPOINT_CHUNK => self.checkpoint(seq, offset, payload),
            FINAL_CHUNK => self.final_checkpoint(seq, offset, payload),
            _ => {}
        }
    }

    fn key_chunk(&mut self, seq: u32, offset: u64, payload: &[u8]) {
        self.signed = true;
        let at = format!("key chunk {seq} at byte offset {offset}");
        if self.key.is_some() {
            return self.fail(format!("a second {at}"));
        }
        if let Some(what) = &self.before_key {
            return self.fail(format!(
                "{at} is not the stream's first chunk: {what} came before it"
            ));
        }
        if seq != 0 {
            return self.fail(format!("{at} is not chunk 0"));
        }
        let (k, vk) = match KeyChunk::parse(payload) {
            Ok(k) => k,
            Err(e) => return self.fail(format!("{at}: {e}")),
        };
        if let Some(h) = &self.header {
            for (i, (bound, said)) in k.binding.iter().zip(h).enumerate() {
                if bound != said {
                    return self.fail(format!(
                        "{at} binds {} {:?} but the header says {:?}",
                        BINDING_NAMES[i],
                        bound.to_string_lossy(),
                        said.to_string_lossy()
                    ));
                }
            }
        }
        self.prev = Some(chain_hash(payload));
        if !self.joining {
            self.covered = Some([0; KINDS]);
            self.due = [Some(0); KINDS];
            self.valid_to = Some((seq, None));
        }
        self.key = Some((k, vk));
    }

    fn checkpoint(&mut self, seq: u32, offset: u64, payload: &[u8]) {
        self.signed = true;
        let at = format!("checkpoint chunk {seq} at byte offset {offset}");
        let Some((k, vk)) = &self.key else {
            return self.fail(format!("{at} comes without a key chunk before it"));
        };
        let (nonce, vk) = (k.nonce, *vk);
        if self.fin.is_some() {
            return self.fail(format!("{at} comes after the final checkpoint"));
        }
        let c = match Checkpoint::parse(payload, &vk) {
            Ok(c) => c,
            Err(e) => return self.fail(format!("{at}: {e}")),
        };
        if c.nonce != nonce {
            return self.fail(format!("{at} belongs to another recording (nonce)"));
        }
        // Joining: the first checkpoint seen has nothing before it to chain to.
        if self.covered.is_some() {
            if c.index != self.next_index {
                return self.fail(format!(
                    "{at} has index {} where {} was due",
                    c.index, self.next_index
                ));
            }
            if Some(c.prev) != self.prev {
                return self.fail(format!(
                    "{at} does not chain to the signing chunk before it"
                ));
            }
            if Some(c.ranges.first) != self.covered {
                return self.fail(format!(
                    "{at} starts its records at {:?}, not where the last checkpoint ended",
                    c.ranges.first
                ));
            }
        }
        match self.held.hash(&c.ranges) {
            Ok((h, last)) if h == c.records => {
                self.checkpoints += 1;
                if self.joining && self.checkpoints == 1 {
                    self.chain = true;
                }
                if self.chain {
                    let t = last.or(self.valid_to.and_then(|v| v.1));
                    self.valid_to = Some((seq, t));
                    self.verified.push((chain_hash(payload), false, c.index));
                    if let Some(out) = &mut self.released {
                        self.held.release(&c.ranges, out);
                    }
                }
            }
            Ok(_) => {
                return self.fail(format!(
                "{at}: the records it covers (frames from {}, notes from {}) do not match its hash",
                c.ranges.first[0], c.ranges.first[1]
            ))
            }
            // Joining: records before the join are not missing, just not seen.
            Err(_) if self.joining && self.checkpoints == 0 => {}
            Err((kind, i)) => self.miss(format!(
                "{at} covers {} {i}, which is missing",
                KIND_NAMES[kind]
            )),
        }
        let end = c.ranges.end();
        self.held.drop_below(end);
        self.covered = Some(end);
        self.prev = Some(chain_hash(payload));
        self.next_index = c.index.wrapping_add(1);
    }

    fn final_checkpoint(&mut self, seq: u32, offset: u64, payload: &[u8]) {
        self.signed = true;
        let at = format!("final checkpoint chunk {seq} at byte offset {offset}");
        let Some((k, vk)) = &self.key else {
            return self.fail(format!("{at} comes without a key chunk before it"));
        };
        let (nonce, vk) = (k.nonce, *vk);
        if self.fin.is_some() {
            return self.fail(format!("a second {at}"));
        }
        let f = match FinalCheckpoint::parse(payload, &vk) {
            Ok(f) => f,
            Err(e) => return self.fail(format!("{at}: {e}")),
        };
        if f.nonce != nonce {
            return self.fail(format!("{at} belongs to another recording (nonce)"));
        }
        if self.covered.is_some() {
            if f.index != self.next_index {
                return self.fail(format!(
                    "{at} follows {} checkpoints but {} came",
                    f.index, self.next_index
                ));
            }
            if Some(f.prev) != self.prev {
                return self.fail(format!(
                    "{at} does not chain to the signing chunk before it"
                ));
            }
            if Some(f.totals) != self.covered {
                return self.fail(format!(
                    "{at} counts {:?} records, the checkpoints cover {:?}",
                    f.totals,
                    self.covered.unwrap_or_default()
                ));
            }
        }
        if self.chain {
            let t = self.valid_to.and_then(|v| v.1);
            self.valid_to = Some((seq, t));
            self.verified.push((chain_hash(payload), true, f.index));
        }
        self.fin = Some((seq, offset, f));
    }

    /// The conclusion, from everything given so far (the stream may go on).
    pub fn report(&self) -> Report {
        let mut r = Report {
            signed: self.signed,
            signer_key: self.key.as_ref().map(|(k, _)| k.key),
            player_id: self
                .key
                .as_ref()
                .map(|(k, _)| k.binding[0].to_string_lossy()),
            chain_valid_to_chunk: self.valid_to.map(|v| v.0),
            chain_valid_to_seconds: self.valid_to.and_then(|v| v.1),
            checkpoints: self.checkpoints,
            verdict: Verdict::Valid,
            reason: None,
        };
        let (verdict, reason) = self.conclude();
        r.verdict = verdict;
        r.reason = reason;
        if verdict == Verdict::Unsigned {
            r.chain_valid_to_chunk = None;
        }
        r
    }

    fn conclude(&self) -> (Verdict, Option<String>) {
        if let Some(f) = &self.failure {
            return (Verdict::Invalid, Some(f.clone()));
        }
        if !self.signed {
            return (Verdict::Unsigned, Some("no signing chunks".into()));
        }
        let Some((seq, offset, f)) = &self.fin else {
            let why = self.missing.clone().unwrap_or_else(|| {
                "no final checkpoint: the stream ends before its end was signed".into()
            });
            return (Verdict::Incomplete, Some(why));
        };
        let at = format!("final checkpoint chunk {seq} at byte offset {offset}");
        if self.joining {
            return (
                Verdict::Incomplete,
                Some("joined late: the records before the first checkpoint were not seen".into()),
            );
        }
        if let Some(m) = &self.missing {
            return (
                Verdict::Invalid,
                Some(format!("a finished stream with {m}")),
            );
        }
        if self.held.len() > 0 {
            return (
                Verdict::Invalid,
                Some(format!(
                    "records after the last checkpoint are not covered by {at}"
                )),
            );
        }
        let Some(t) = &self.trailer else {
            return (
                Verdict::Invalid,
                Some(format!("{at} has no trailer after it")),
            );
        };
        let c = t.counts;
        let counts = [c.frames, c.notes, c.walls, c.heights, c.pauses];
        if counts != f.totals.map(u64::from) {
            return (
                Verdict::Invalid,
                Some(format!(
                    "the trailer counts {counts:?} records, {at} {:?}",
                    f.totals
                )),
            );
        }
        let h = final_hash(
            &t.info,
            t.controller_offsets.as_ref(),
            t.user_data.as_deref(),
            &t.trailing,
        );
        if h != f.sections {
            return (
                Verdict::Invalid,
                Some(format!(
                    "the trailer's final info, offsets, user data or trailing bytes do not match {at}"
                )),
            );
        }
        (Verdict::Valid, None)
    }
}

impl Verifier {
    /// The recording's nonce, from a key chunk that verified.
    pub(crate) fn nonce(&self) -> Option<[u8; NONCE_LEN]> {
        self.key.as_ref().map(|(k, _)| k.nonce)
    }

    /// The signing chunks of the unbroken chain that verified, in stream order: each one's
    /// chain value, whether it is the final checkpoint, and its index.
    pub(crate) fn verified(&self) -> &[Verified] {
        &self.verified
    }

    /// The replay the verified records make: the records the checkpoints covered, in index
    /// order, with the trailer's final info, offsets, user data and trailing bytes: for a
    /// verdict of `valid` (the caller's to check), exactly what the signer signed.
    fn replay(self) -> Option<Replay> {
        let (out, t) = (self.released?, self.trailer?);
        Some(Replay {
            info: t.info,
            frames: out.frames,
            notes: out.notes,
            walls: out.walls,
            heights: out.heights,
            pauses: out.pauses,
            controller_offsets: t.controller_offsets,
            user_data: t.user_data,
            trailing: t.trailing,
        })
    }
}

/// Verifies a whole stream file (or a prefix of one), each signature with `verify_strict`
/// when its chunk comes (`integrity.md` §8).
pub fn verify_stream(bytes: &[u8]) -> Report {
    feed(bytes, &mut Verifier::new())
}

/// A signed stream decoded by its verifier: the report, and when it is `valid` the replay
/// made of exactly the records the signatures cover.
#[derive(Clone, Debug)]
pub struct VerifiedReplay {
    /// The verification's report.
    pub report: Report,
    /// With a verdict of `valid`, the replay signed: the records each checkpoint covered, in
    /// index order, and the final sections the final checkpoint covered. `None` otherwise.
    pub replay: Option<Replay>,
}

/// Decodes and verifies a stream in one pass (`integrity.md` §8): the replay is made of the
/// records the verifier hashed, released as each checkpoint verifies, so whatever verifies
/// as `valid` decodes to exactly what was signed; there is no second reading of the stream
/// to disagree with the first.
///
/// ```
/// use bsor_stream_core::integrity::{decode_verified, sign_replay, Signer, SigningKey, Verdict};
/// use bsor_stream_core::stream::{Profile, Settings};
/// use bsor_stream_core::{bsor, synth};
///
/// let replay = synth::replay(synth::Settings { seed: 7, seconds: 3.0, fps: 60 });
/// let key = SigningKey::from_bytes(&[0x42; 32]);
/// let signed = sign_replay(&replay, Settings::live(Profile::Lossless), Signer::new(key, [0x4e; 16]))?;
/// let v = decode_verified(&signed);
/// assert_eq!(v.report.verdict, Verdict::Valid);
/// assert_eq!(bsor::to_vec(&v.replay.unwrap())?, bsor::to_vec(&replay)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decode_verified(bytes: &[u8]) -> VerifiedReplay {
    let mut v = Verifier::decoding();
    let report = feed(bytes, &mut v);
    let replay = if report.verdict == Verdict::Valid {
        v.replay()
    } else {
        None
    };
    VerifiedReplay { report, replay }
}

/// Gives `v` the stream's items and signing chunks in order (it rides along the decoder as
/// its hook); its report at the end, or at the first place the stream cannot be read (then
/// `invalid`).
pub(crate) fn feed(bytes: &[u8], v: &mut Verifier) -> Report {
    let mut d = StreamDecoder::new().with_hook(&mut *v);
    d.push(bytes);
    d.finish();
    loop {
        match d.next_item() {
            Ok(Some(StreamItem::End)) | Ok(None) => break,
            Ok(Some(_)) => {}
            Err(e) => return unreadable(v, &e),
        }
    }
    v.report()
}

/// The verifier as the decoder's hook: items as they come, and the signing chunks the
/// decoder skips (any other extension chunk before the key chunk makes a signed stream's
/// key chunk late).
impl DecoderHook for Verifier {
    fn item(&mut self, item: &StreamItem) {
        Verifier::item(self, item);
    }

    fn extension(&mut self, header: &ChunkHeader, offset: u64, payload: &[u8]) {
        match header.kind {
            ChunkType::Unknown(kind) if super::is_integrity_chunk(kind) => {
                self.chunk(header.seq, offset, kind, payload)
            }
            kind => self.before_key(|| {
                format!(
                    "chunk {} of type {:#04x} at byte offset {offset}",
                    header.seq,
                    kind.byte()
                )
            }),
        }
    }
}

fn unreadable(v: &Verifier, e: &StreamError) -> Report {
    let mut r = v.report();
    r.verdict = Verdict::Invalid;
    r.reason = Some(format!("the stream cannot be read: {e}"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Kept` holds what a map would: the same answers to inserts, lookups, lengths and
    /// drops, over mostly consecutive indices with repeats, jumps back, far jumps and
    /// indices near `u32::MAX`.
    #[test]
    fn kept_is_a_map_by_index() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for base in [0u32, 1000, u32::MAX - 300] {
            let mut kept = Kept::default();
            let mut map = BTreeMap::new();
            let mut at = base;
            for step in 0..5000u32 {
                let r = next();
                at = match r % 16 {
                    0 => at.wrapping_sub((r >> 8) as u32 % 50),
                    1 => at.wrapping_add((r >> 8) as u32 % 5000),
                    2 => (r >> 8) as u32,
                    _ => at.wrapping_add(1),
                };
                // A repeat is refused and keeps the first record.
                let fresh = !map.contains_key(&at);
                map.entry(at).or_insert(step);
                assert_eq!(kept.insert(at, step), fresh);
                if r % 97 == 0 {
                    let end = at.wrapping_sub((r >> 16) as u32 % 40);
                    kept = kept.split_off(&end);
                    map = map.split_off(&end);
                }
                assert_eq!(kept.len(), map.len());
                for probe in [at, at.wrapping_sub(1), at.wrapping_add(1), (r >> 32) as u32] {
                    assert_eq!(kept.get(&probe), map.get(&probe), "{probe}");
                }
            }
        }
        // Records in order go to the run, from wherever they start.
        let mut kept = Kept::default();
        for at in 7000..8000u32 {
            assert!(kept.insert(at, ()));
        }
        kept = kept.split_off(&7500);
        for at in 8000..9000u32 {
            assert!(kept.insert(at, ()));
        }
        assert_eq!((kept.run.len(), kept.other.len()), (1500, 0));
    }
}

//! The stream decoder: `.bsors` bytes in, in pieces of any size; frames, events, the
//! trailer and the index out, and a report of any damage it stepped over. Sans-IO, like the
//! classic push parser.

use std::collections::VecDeque;

use crate::bsor::Frame;

use super::chunk::{parse_footer, ChunkHeader, ChunkType, FOOTER_SIZE, MAX_CHUNK_FRAMES, SYNC};
use super::error::{ChunkError, ChunkHeaderError, Damage, DamageKind, HeaderError, StreamError};
use super::events::{EventBatch, EventCodec};
use super::frames::FrameCodec;
use super::header::StreamHeader;
use super::reader::Short;
use super::trailer::{decode_index, IndexEntry, Trailer};

/// What the decoder yields, in stream order.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamItem {
    /// The stream header (always first).
    Header(Box<StreamHeader>),
    /// A frame and its index in the replay.
    Frame {
        /// Index of the frame among all frames.
        index: u32,
        /// The frame.
        frame: Frame,
    },
    /// The frames of one chunk as BSOR frame records (92 bytes each, in the layout of
    /// `bsor-v1.md`'s frames section), from a decoder made with
    /// [`StreamDecoder::bsor_records`] instead of [`StreamItem::Frame`]s.
    FrameRecords {
        /// Index of the first frame among all frames.
        first: u32,
        /// The records, one after another.
        records: Vec<u8>,
    },
    /// A chunk of events.
    Events(EventBatch),
    /// The trailer.
    Trailer(Box<Trailer>),
    /// The index.
    Index(Vec<IndexEntry>),
    /// A chunk of a type this reader does not know, skipped.
    Skipped {
        /// Offset of the chunk.
        offset: u64,
        /// Its type byte.
        kind: u8,
    },
    /// Damage that was stepped over.
    Damage(Damage),
    /// The input ended.
    End,
}

/// Counts of what a decode went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Chunks decoded.
    pub chunks: u64,
    /// Keyframe chunks among them.
    pub keyframes: u64,
    /// Chunks (or stretches of bytes) skipped as damaged or undecodable.
    pub damaged: u64,
    /// Frames in chunks that could not be decoded (from their headers, when readable).
    pub frames_lost: u64,
    /// Events in chunks that could not be decoded.
    pub events_lost: u64,
    /// Bytes skipped.
    pub bytes_skipped: u64,
    /// Bytes of frame chunks read (payloads and headers).
    pub frame_bytes: u64,
    /// Bytes of event chunks read.
    pub event_bytes: u64,
}

#[derive(Debug)]
enum State {
    Header,
    Chunks,
    Done,
}

/// What rides along a decode (the integrity layer's verifier is one: `integrity::Verifier`,
/// whose single pass over a signed stream hashes the very records the decoder yields). It
/// sees, in stream order, every item as the decoder queues it and every extension chunk
/// whole (a non-critical chunk type this decoder does not know, `format.md` §4.2), which the
/// decoder then yields as [`StreamItem::Skipped`]. Both methods do nothing by default.
///
/// The decoder holds its hook by value, as a type parameter: a decode without one
/// ([`NoHook`], the default) costs nothing for it. `&mut H` is a hook too, for a hook that
/// outlives the decoder.
pub trait DecoderHook {
    /// An item, as the decoder queues it (before it is yielded).
    fn item(&mut self, item: &StreamItem) {
        let _ = item;
    }

    /// An extension chunk: its header, its byte offset in the stream and its payload (the
    /// CRC checked).
    fn extension(&mut self, header: &ChunkHeader, offset: u64, payload: &[u8]) {
        let _ = (header, offset, payload);
    }
}

/// No hook: the decoder alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHook;

impl DecoderHook for NoHook {}

impl<H: DecoderHook + ?Sized> DecoderHook for &mut H {
    fn item(&mut self, item: &StreamItem) {
        (**self).item(item);
    }

    fn extension(&mut self, header: &ChunkHeader, offset: u64, payload: &[u8]) {
        (**self).extension(header, offset, payload);
    }
}

/// Decodes a `.bsors` stream: push bytes in pieces of any size, pull [`StreamItem`]s out
/// as soon as each chunk is whole.
///
/// ```
/// use bsor_stream_core::stream::{Profile, Settings, StreamDecoder, StreamItem};
/// use bsor_stream_core::{synth, transcode};
///
/// let replay = synth::replay(synth::Settings {
///     seed: 7,
///     seconds: 3.0,
///     fps: 60,
/// });
/// let stream = transcode::encode_replay(&replay, Settings::archive(Profile::Lossless));
/// let mut decoder = StreamDecoder::new();
/// let mut frames = Vec::new();
/// for piece in stream.chunks(1000) {
///     decoder.push(piece);
///     while let Some(item) = decoder.next_item()? {
///         if let StreamItem::Frame { frame, .. } = item {
///             frames.push(frame);
///         }
///     }
/// }
/// decoder.finish();
/// while let Some(item) = decoder.next_item()? {
///     assert!(matches!(item, StreamItem::End)); // nothing after the footer
/// }
/// assert_eq!(frames, replay.frames); // the lossless profile keeps every bit
/// assert_eq!(decoder.stats().damaged, 0);
/// # Ok::<(), bsor_stream_core::stream::StreamError>(())
/// ```
#[derive(Debug)]
pub struct StreamDecoder<H = NoHook> {
    buf: Vec<u8>,
    start: usize,
    /// Absolute offset of `buf[start]`.
    offset: u64,
    eof: bool,
    state: State,
    codec: Option<FrameCodec>,
    events: EventCodec,
    /// Frames of the current group can be decoded (its keyframe was, and nothing since was
    /// lost).
    frames_ok: bool,
    events_ok: bool,
    next_seq: Option<u32>,
    next_frame: u32,
    queue: VecDeque<StreamItem>,
    stats: DecodeStats,
    skip_frames: bool,
    /// Frames come out as [`StreamItem::FrameRecords`].
    records: bool,
    /// Bytes skipped as not a chunk since the last chunk: (offset, count), reported as one
    /// stretch when something readable (or the end) comes.
    junk: Option<(u64, u64)>,
    /// The chunk header last parsed, by its offset.
    head: Option<(u64, Head)>,
    /// The error that stopped the decoder: returned again by every later call.
    failed: Option<StreamError>,
    hook: H,
}

/// A chunk header parsed at some offset, kept while more input is awaited.
#[derive(Clone, Copy, Debug)]
enum Head {
    /// Whole and valid, with its length.
    Whole(ChunkHeader, usize),
    /// Short: the bytes that were there.
    Short(usize),
}

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamDecoder {
    /// A decoder waiting for the stream header.
    pub fn new() -> Self {
        StreamDecoder {
            buf: Vec::new(),
            start: 0,
            offset: 0,
            eof: false,
            state: State::Header,
            codec: None,
            events: EventCodec::default(),
            frames_ok: false,
            events_ok: true,
            next_seq: None,
            next_frame: 0,
            queue: VecDeque::new(),
            stats: DecodeStats::default(),
            skip_frames: false,
            records: false,
            junk: None,
            head: None,
            failed: None,
            hook: NoHook,
        }
    }

    /// A decoder that reads frame chunks' headers but not their payloads: for readers that
    /// want events only.
    pub fn events_only() -> Self {
        StreamDecoder {
            skip_frames: true,
            ..Self::new()
        }
    }

    /// A decoder for chunks of a stream whose header was read elsewhere (to start at a
    /// keyframe found through the index).
    pub fn with_header(header: StreamHeader) -> Self {
        StreamDecoder {
            codec: Some(FrameCodec::new(header.quantization())),
            events: EventCodec::new(header.quantization().is_lossy()),
            state: State::Chunks,
            ..Self::new()
        }
    }

    /// The same decoder with `hook` riding along (see [`DecoderHook`]); give it before any
    /// input.
    pub fn with_hook<H: DecoderHook>(self, hook: H) -> StreamDecoder<H> {
        StreamDecoder {
            buf: self.buf,
            start: self.start,
            offset: self.offset,
            eof: self.eof,
            state: self.state,
            codec: self.codec,
            events: self.events,
            frames_ok: self.frames_ok,
            events_ok: self.events_ok,
            next_seq: self.next_seq,
            next_frame: self.next_frame,
            queue: self.queue,
            stats: self.stats,
            skip_frames: self.skip_frames,
            records: self.records,
            junk: self.junk,
            head: self.head,
            failed: self.failed,
            hook,
        }
    }
}

impl<H: DecoderHook> StreamDecoder<H> {
    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The hook, to change.
    pub fn hook_mut(&mut self) -> &mut H {
        &mut self.hook
    }

    /// The hook, the decoder done with.
    pub fn into_hook(self) -> H {
        self.hook
    }

    /// Queues an item, shown to the hook first.
    fn emit(&mut self, item: StreamItem) {
        self.hook.item(&item);
        self.queue.push_back(item);
    }

    /// The same decoder, yielding each frame chunk's frames as one
    /// [`StreamItem::FrameRecords`] of BSOR frame records rather than [`StreamItem::Frame`]s:
    /// for readers that write a BSOR (a lossless stream's records are written straight
    /// from the decoded words).
    pub fn bsor_records(mut self) -> Self {
        self.records = true;
        self
    }

    /// Starts a new keyframe group's event context (for readers that skip frame chunks).
    pub fn new_group(&mut self) {
        self.events.reset();
        self.events_ok = true;
    }

    /// Decodes one whole event chunk (header and payload) in the current group's context.
    pub fn decode_events_chunk(&mut self, chunk: &[u8]) -> Result<EventBatch, ChunkError> {
        let (h, hlen) = ChunkHeader::parse(chunk).map_err(|s| match s {
            Short::More => ChunkError::HeaderEndsEarly,
            Short::Bad(e) => ChunkError::Header(e),
        })?;
        let payload = chunk
            .get(hlen..hlen + h.len as usize)
            .ok_or(ChunkError::PayloadEndsEarly)?;
        if h.kind != ChunkType::Events {
            return Err(ChunkError::NotEvents(h.kind));
        }
        if crc32fast::hash(payload) != h.payload_crc {
            return Err(ChunkError::PayloadCrc);
        }
        self.events.decode(payload)
    }

    /// Adds input.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.eof || self.failed.is_some() {
            return;
        }
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Declares the end of the input.
    pub fn finish(&mut self) {
        self.eof = true;
    }

    /// What the decode went through so far.
    pub fn stats(&self) -> DecodeStats {
        self.stats
    }

    /// The next item; `Ok(None)` when more input is needed (or after [`StreamItem::End`]).
    ///
    /// An error is final (format.md: a critical chunk stops the reader): everything
    /// yielded before it was valid, and every later call returns the same error again,
    /// whatever input is pushed.
    pub fn next_item(&mut self) -> Result<Option<StreamItem>, StreamError> {
        loop {
            // What was queued before a fault is valid and comes out first.
            if let Some(e) = self.queue.pop_front() {
                return Ok(Some(e));
            }
            if let Some(e) = &self.failed {
                return Err(e.clone());
            }
            match self.step() {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) => {
                    self.state = State::Done;
                    self.failed = Some(e);
                }
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    fn damage(&mut self, kind: DamageKind, skipped: usize) {
        self.stats.damaged += 1;
        self.stats.bytes_skipped += skipped as u64;
        self.emit(StreamItem::Damage(Damage::new(
            self.offset,
            skipped as u64,
            kind,
        )));
        self.consume(skipped);
    }

    /// Skips `n` bytes that are not a chunk, adding them to the current stretch (reported
    /// once a valid chunk header, the footer or the end of the input follows it).
    fn junk(&mut self, n: usize) {
        let start = self.junk.map_or(self.offset, |(at, _)| at);
        let count = self.junk.map_or(0, |(_, c)| c) + n as u64;
        self.junk = Some((start, count));
        self.consume(n);
    }

    /// The chunk header at the current position (which holds the sync marker). Parsed once:
    /// while its payload, or the rest of the header, is awaited, the result is kept, so
    /// that waiting for a large payload in small pieces does not check the header again
    /// and again.
    fn head_at(&mut self) -> Result<(ChunkHeader, usize), Short<ChunkHeaderError>> {
        let have = self.buf.len() - self.start;
        match self.head {
            Some((at, Head::Whole(h, n))) if at == self.offset => return Ok((h, n)),
            Some((at, Head::Short(seen))) if at == self.offset && seen == have && !self.eof => {
                return Err(Short::More)
            }
            _ => {}
        }
        let r = ChunkHeader::parse(&self.buf[self.start..]);
        self.head = match r {
            Ok((h, n)) => Some((self.offset, Head::Whole(h, n))),
            Err(Short::More) => Some((self.offset, Head::Short(have))),
            Err(Short::Bad(_)) => None,
        };
        r
    }

    /// Reports the stretch of skipped bytes, if any.
    fn flush_junk(&mut self) {
        if let Some((offset, count)) = self.junk.take() {
            self.stats.damaged += 1;
            self.stats.bytes_skipped += count;
            self.emit(StreamItem::Damage(Damage::new(
                offset,
                count,
                DamageKind::NotAChunk,
            )));
        }
    }

    /// Makes progress; false when nothing more can be done until more input arrives.
    fn step(&mut self) -> Result<bool, StreamError> {
        let pending = &self.buf[self.start..];
        match self.state {
            State::Done => Ok(false),
            State::Header => match StreamHeader::parse(pending) {
                Ok((h, n)) => {
                    self.codec = Some(FrameCodec::new(h.quantization()));
                    self.events = EventCodec::new(h.quantization().is_lossy());
                    self.consume(n);
                    self.emit(StreamItem::Header(Box::new(h)));
                    self.state = State::Chunks;
                    Ok(true)
                }
                Err(Short::More) if !self.eof => Ok(false),
                Err(Short::More) => Err(StreamError::Header(HeaderError::Truncated)),
                Err(Short::Bad(e)) => Err(StreamError::Header(e)),
            },
            State::Chunks => self.chunk_step(),
        }
    }

    fn end(&mut self) -> Result<bool, StreamError> {
        self.flush_junk();
        self.state = State::Done;
        self.emit(StreamItem::End);
        Ok(true)
    }

    fn chunk_step(&mut self) -> Result<bool, StreamError> {
        let pending = &self.buf[self.start..];
        if pending.is_empty() {
            return if self.eof { self.end() } else { Ok(false) };
        }
        // Fewer bytes than a footer: neither a footer nor a chunk header (at least 18 bytes)
        // can be judged yet.
        if pending.len() < FOOTER_SIZE && !self.eof {
            return Ok(false);
        }
        // The footer first: its offset may begin with the sync marker's byte, while its
        // magic and CRC make it unmistakable.
        if pending.len() >= FOOTER_SIZE && parse_footer(&pending[..FOOTER_SIZE]).is_some() {
            self.flush_junk();
            self.consume(FOOTER_SIZE);
            return self.end();
        }
        if pending[0] != SYNC {
            return Ok(self.skip_to_sync());
        }
        // A chunk may start here, if its header holds.
        let (h, hlen) = match self.head_at() {
            Ok(x) => x,
            Err(Short::More) if !self.eof => return Ok(false),
            Err(_) => {
                // A false sync marker, a damaged header, or one that the input cuts: the
                // byte joins the stretch of bytes that are not a chunk, and the search goes
                // on one byte further (a real chunk lost with its header shows as a gap in
                // the sequence numbers).
                self.junk(1);
                return Ok(true);
            }
        };
        // What was skipped before it is one stretch, reported before anything about the
        // chunk (alone, so that it comes out even if the chunk stops the decoder; the header
        // is kept, not checked again).
        if self.junk.is_some() {
            self.flush_junk();
            return Ok(true);
        }
        let pending = &self.buf[self.start..];
        let total = hlen + h.len as usize;
        if pending.len() < total {
            if !self.eof {
                return Ok(false);
            }
            let n = pending.len();
            self.lose_group();
            self.count_lost(&h);
            let kind = DamageKind::Truncated {
                seq: h.seq,
                kind: h.kind,
            };
            self.damage(kind, n);
            return Ok(true);
        }
        let offset = self.offset;
        if crc32fast::hash(&pending[hlen..total]) != h.payload_crc {
            self.bad_payload(&h, total);
            return Ok(true);
        }
        self.check_seq(&h, offset);
        // The payload stays where it is: the buffer is lent out while the chunk is decoded.
        let buf = std::mem::take(&mut self.buf);
        let payload = &buf[self.start + hlen..self.start + total];
        self.consume(total);
        let result = self.dispatch(&h, payload, offset, total);
        self.buf = buf;
        result
    }

    /// At a byte that is not the sync marker: skips to where a chunk or the footer may
    /// start; false if nothing can be skipped until more input arrives. Where the input
    /// has not ended, the last 15 bytes cannot be judged yet (a footer may be arriving):
    /// they are waited for. Every position is judged once, from its own bytes.
    fn skip_to_sync(&mut self) -> bool {
        let pending = &self.buf[self.start..];
        let judge = |i: usize| {
            pending[i] == SYNC
                || pending
                    .get(i..i + FOOTER_SIZE)
                    .is_some_and(|f| parse_footer(f).is_some())
        };
        let last = if self.eof {
            pending.len()
        } else {
            pending.len() - (FOOTER_SIZE - 1)
        };
        let skip = (1..last).find(|&i| judge(i)).unwrap_or(last);
        if skip == 0 {
            return false;
        }
        // Nothing is assumed lost: if a chunk went with these bytes, the next chunk's
        // sequence number says so.
        self.junk(skip);
        true
    }

    /// Steps over the whole chunk `h` (of `total` bytes) whose payload fails its CRC.
    fn bad_payload(&mut self, h: &ChunkHeader, total: usize) {
        self.next_seq = Some(h.seq.wrapping_add(1));
        match h.kind {
            // The group's start is gone: its events' context too.
            ChunkType::Keyframes => self.lose_group(),
            ChunkType::Frames => self.frames_ok = false,
            ChunkType::Events => self.events_ok = false,
            _ => {}
        }
        self.count_lost(h);
        let kind = DamageKind::PayloadCrc {
            seq: h.seq,
            kind: h.kind,
        };
        self.damage(kind, total);
    }

    /// Reports a gap before chunk `h` (at `offset`) in the sequence numbers; the next
    /// chunk is expected after `h`.
    fn check_seq(&mut self, h: &ChunkHeader, offset: u64) {
        if let Some(expected) = self.next_seq {
            if h.seq != expected {
                // Chunks went missing between the last one and this one.
                self.lose_group();
                self.damage_at(
                    offset,
                    DamageKind::SequenceGap {
                        expected,
                        found: h.seq,
                    },
                );
            }
        }
        self.next_seq = Some(h.seq.wrapping_add(1));
    }

    fn dispatch(
        &mut self,
        h: &ChunkHeader,
        payload: &[u8],
        offset: u64,
        total: usize,
    ) -> Result<bool, StreamError> {
        self.stats.chunks += 1;
        match h.kind {
            ChunkType::Keyframes | ChunkType::Frames => {
                self.stats.keyframes += u64::from(h.kind == ChunkType::Keyframes);
                self.stats.frame_bytes += total as u64;
                self.frames_chunk(h, payload, offset);
            }
            ChunkType::Events => {
                self.stats.event_bytes += total as u64;
                self.events_chunk(h, payload, offset);
            }
            ChunkType::Trailer => match Trailer::decode(payload) {
                Ok(t) => self.emit(StreamItem::Trailer(Box::new(t))),
                Err(error) => self.damage_at(offset, undecodable(h, error)),
            },
            ChunkType::Index => match decode_index(payload) {
                Ok(i) => self.emit(StreamItem::Index(i)),
                Err(error) => self.damage_at(offset, undecodable(h, error)),
            },
            ChunkType::Unknown(kind) if h.kind.is_critical() => {
                return Err(StreamError::CriticalChunk {
                    offset,
                    seq: h.seq,
                    kind,
                });
            }
            ChunkType::Unknown(kind) => {
                self.hook.extension(h, offset, payload);
                self.emit(StreamItem::Skipped { offset, kind });
            }
        }
        Ok(true)
    }

    fn damage_at(&mut self, offset: u64, kind: DamageKind) {
        self.stats.damaged += 1;
        self.emit(StreamItem::Damage(Damage::new(offset, 0, kind)));
    }

    /// Something of the current group was lost: resume at the next keyframe.
    fn lose_group(&mut self) {
        self.frames_ok = false;
        self.events_ok = false;
    }

    fn count_lost(&mut self, h: &ChunkHeader) {
        match h.kind {
            ChunkType::Keyframes | ChunkType::Frames => {
                self.stats.frames_lost += u64::from(h.count)
            }
            ChunkType::Events => self.stats.events_lost += u64::from(h.count),
            _ => {}
        }
    }

    fn frames_chunk(&mut self, h: &ChunkHeader, payload: &[u8], offset: u64) {
        if h.kind == ChunkType::Keyframes {
            self.frames_ok = true;
            self.events_ok = true;
            self.events.reset();
            if let Some(c) = &mut self.codec {
                c.reset();
            }
        } else if h.first != self.next_frame {
            self.frames_ok = false;
        }
        if self.skip_frames {
            self.next_frame = h.first.saturating_add(h.count);
            return;
        }
        if h.count > MAX_CHUNK_FRAMES {
            self.frames_ok = false;
            self.count_lost(h);
            let kind = DamageKind::TooManyFrames {
                seq: h.seq,
                count: h.count,
            };
            self.damage_at(offset, kind);
            return;
        }
        if !self.frames_ok {
            self.count_lost(h);
            self.damage_at(offset, DamageKind::FramesWithoutKeyframe { seq: h.seq });
            return;
        }
        let Some(codec) = &mut self.codec else { return };
        // No overrun check: the encoder leaves out trailing zero bytes, and a well
        // compressed chunk (a device at rest) legitimately reads many of them. The count is
        // capped, so a chunk that claims more than it holds costs bounded work, and its
        // CRC already said whether it is what was written.
        if self.records {
            let mut records = Vec::with_capacity(h.count as usize * crate::bsor::FRAME_SIZE);
            codec.decode_chunk_records(payload, h.count, &mut records);
            self.emit(StreamItem::FrameRecords {
                first: h.first,
                records,
            });
        } else {
            self.queue.reserve(h.count as usize);
            let mut index = h.first;
            let (queue, hook) = (&mut self.queue, &mut self.hook);
            codec.decode_chunk(payload, h.count, |frame| {
                let item = StreamItem::Frame { index, frame };
                hook.item(&item);
                queue.push_back(item);
                index = index.wrapping_add(1);
            });
        }
        self.next_frame = h.first.wrapping_add(h.count);
    }

    fn events_chunk(&mut self, h: &ChunkHeader, payload: &[u8], offset: u64) {
        if !self.events_ok {
            self.count_lost(h);
            self.damage_at(offset, DamageKind::EventsWithoutContext { seq: h.seq });
            return;
        }
        match self.events.decode(payload) {
            Ok(batch) => self.emit(StreamItem::Events(batch)),
            Err(error) => {
                self.events_ok = false;
                self.count_lost(h);
                self.damage_at(offset, undecodable(h, error));
            }
        }
    }
}

/// The damage of a chunk whose CRC holds but whose payload does not decode.
fn undecodable(h: &ChunkHeader, error: ChunkError) -> DamageKind {
    DamageKind::Undecodable {
        seq: h.seq,
        kind: h.kind,
        error,
    }
}

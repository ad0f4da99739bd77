//! The stream encoder: frames and events in, `.bsors` bytes out. Sans-IO: it never writes
//! anywhere itself; the caller takes the bytes with [`StreamEncoder::take_output`] whenever
//! it likes (after every call, for a live stream).

use crate::bsor::{ControllerOffsets, Frame, Height, Info, NoteEvent, Pause, Wall};

use super::chunk::{footer, ChunkHeader, ChunkType, MAX_CHUNK_FRAMES};
use super::events::{EventBatch, EventCodec, Records, MAX_RECORDS};
use super::frames::{FrameCodec, FrameOut};
use super::header::{Settings, StreamHeader};
use super::trailer::{encode_index, IndexEntry, SectionCounts, Trailer};

#[derive(Clone, Copy, Debug)]
struct OpenChunk {
    kind: ChunkType,
    first: u32,
    count: u32,
    t0: f32,
    t1: f32,
}

#[derive(Clone, Copy, Debug)]
struct Group {
    t0: f32,
    frames: u32,
}

/// One kind's pending events (index of the first, records) and its count so far.
type Pending<'a, T> = (&'a mut Records<T>, &'a mut u64);

/// Encodes one replay into the stream format as it is played.
///
/// Push the frames and the events as they happen; take the bytes whenever they are
/// wanted (a chunk goes out at each keyframe or flush); [`finish`](Self::finish) adds the
/// trailer, the index and the footer.
///
/// ```
/// use bsor_stream_core::stream::{Profile, Settings, StreamEncoder};
/// use bsor_stream_core::synth;
///
/// let replay = synth::replay(synth::Settings {
///     seed: 7,
///     seconds: 3.0,
///     fps: 60,
/// });
/// let mut encoder = StreamEncoder::new(replay.info.clone(), Settings::live(Profile::Compact));
/// let mut stream = Vec::new();
/// for frame in &replay.frames {
///     encoder.push_frame(frame);
///     stream.extend(encoder.take_output()); // what a live spectator is sent
/// }
/// for note in &replay.notes {
///     encoder.push_note(*note);
/// }
/// encoder.finish(replay.info.clone(), None, None, Vec::new());
/// stream.extend(encoder.take_output());
/// assert_eq!(&stream[..4], b"BSRS");
/// assert_eq!(encoder.counts().frames, replay.frames.len() as u64);
/// ```
#[derive(Debug)]
pub struct StreamEncoder {
    settings: Settings,
    out: Vec<u8>,
    /// Bytes produced so far, taken or not: the offset of the next chunk.
    offset: u64,
    seq: u32,
    codec: FrameCodec,
    raw: FrameOut,
    group: Option<Group>,
    chunk: Option<OpenChunk>,
    events: EventCodec,
    pending: EventBatch,
    counts: SectionCounts,
    index: Vec<IndexEntry>,
    finished: bool,
    /// The time of the last frame pushed.
    last_t: Option<f32>,
    /// Rides along and adds chunks of its own (the signer of `proto-spec/integrity.md`).
    hook: Option<Box<dyn EncoderHook>>,
}

/// The most bytes of a skippable chunk's payload (`format.md` §4.2).
pub const MAX_EXTENSION_LEN: usize = 1 << 20;

/// What rides along with a [`StreamEncoder`] and adds skippable chunks of its own
/// (`format.md` §4.2): the integrity layer's signer is one (`integrity::Signer`, which
/// depends on this module, not the other way round). It sees every record as it is pushed,
/// in order, and may give a chunk `(type, payload)` to emit where a keyframe group ends and
/// where the stream ends, before the trailer.
pub trait EncoderHook: std::fmt::Debug + Send {
    /// A frame was pushed.
    fn frame(&mut self, f: &Frame);
    /// A note event was pushed.
    fn note(&mut self, n: &NoteEvent);
    /// A wall event was pushed.
    fn wall(&mut self, w: &Wall);
    /// A height change was pushed.
    fn height(&mut self, h: &Height);
    /// A pause was pushed.
    fn pause(&mut self, p: &Pause);
    /// A keyframe group ended (its chunks are out): the chunk to emit after them, if any.
    fn group_end(&mut self) -> Option<(u8, Vec<u8>)>;
    /// The stream ends with this trailer's contents: the chunk to emit before the trailer,
    /// if any (called after the last `group_end`).
    fn stream_end(
        &mut self,
        info: &Info,
        offsets: Option<&ControllerOffsets>,
        user_data: Option<&[u8]>,
        trailing: &[u8],
    ) -> Option<(u8, Vec<u8>)>;
    /// The hook as `Any`, so that its owner can reach its own type again.
    fn as_any(&self) -> &dyn std::any::Any;
}

impl StreamEncoder {
    /// Starts a stream: the header (with `info` as known at the start) is the first output.
    pub fn new(info: Info, settings: Settings) -> Self {
        let header = StreamHeader { settings, info };
        let out = header.encode();
        StreamEncoder {
            settings,
            offset: out.len() as u64,
            out,
            seq: 0,
            codec: FrameCodec::new(header.quantization()),
            raw: FrameOut::new(header.quantization()),
            group: None,
            chunk: None,
            events: EventCodec::new(header.quantization().is_lossy()),
            pending: EventBatch::default(),
            counts: SectionCounts::default(),
            index: Vec::new(),
            finished: false,
            last_t: None,
            hook: None,
        }
    }

    /// Starts a stream with `hook` riding along (a signed stream: the integrity layer's
    /// `Signer::into_encoder`, which emits its key chunk right after the header).
    pub fn with_hook(info: Info, settings: Settings, hook: Box<dyn EncoderHook>) -> Self {
        let mut e = StreamEncoder::new(info, settings);
        e.hook = Some(hook);
        e
    }

    /// The hook riding along, if any.
    pub fn hook(&self) -> Option<&dyn EncoderHook> {
        self.hook.as_deref()
    }

    /// Emits everything pushed so far, then a skippable chunk of type `kind` (a signing
    /// chunk carried over from another stream). `None` for a type that is not skippable
    /// (`format.md` §4.2) or a payload over the [`MAX_EXTENSION_LEN`] limit of such a chunk.
    pub fn push_extension(&mut self, kind: u8, payload: &[u8]) -> Option<()> {
        if !matches!(ChunkType::from_byte(kind), ChunkType::Unknown(_))
            || ChunkType::from_byte(kind).is_critical()
            || payload.len() > MAX_EXTENSION_LEN
        {
            return None;
        }
        self.flush();
        self.emit_extension(kind, payload);
        Some(())
    }

    fn emit_extension(&mut self, kind: u8, payload: &[u8]) {
        self.emit(ChunkType::Unknown(kind), 0, 0, (0.0, 0.0), payload, false);
    }

    /// The hook's chunk where a keyframe group ends, if it gives one.
    fn group_end(&mut self) {
        if let Some((kind, payload)) = self.hook.as_mut().and_then(|h| h.group_end()) {
            self.emit_extension(kind, &payload);
        }
    }

    /// The bytes produced since the last call.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Bytes produced so far (taken or not).
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Records pushed so far.
    pub fn counts(&self) -> SectionCounts {
        self.counts
    }

    /// Frames and events pushed but not yet out in a chunk: what a [`flush`](Self::flush)
    /// would emit now.
    pub fn unflushed(&self) -> usize {
        self.chunk.map_or(0, |c| c.count as usize) + self.pending.len()
    }

    /// Adds a frame, and returns it as a decoder will see it (itself, when lossless).
    pub fn push_frame(&mut self, f: &Frame) -> Frame {
        let t = f.time;
        let s = self.settings;
        match (self.group, self.chunk) {
            (Some(g), _)
                if (s.keyframe_seconds > 0.0 && t - g.t0 >= s.keyframe_seconds)
                    || (s.keyframe_frames > 0 && g.frames >= s.keyframe_frames) =>
            {
                self.close_chunk();
                self.start_group(t);
            }
            (None, _) => self.start_group(t),
            (Some(_), Some(c))
                if c.count >= MAX_CHUNK_FRAMES
                    || (s.flush_seconds > 0.0 && t - c.t0 >= s.flush_seconds) =>
            {
                self.close_chunk();
                self.open_chunk(ChunkType::Frames, t);
            }
            (Some(_), None) => self.open_chunk(ChunkType::Frames, t),
            (Some(_), Some(_)) => {}
        }
        let decoded = self.codec.encode(f, &mut self.raw);
        if let Some(hook) = &mut self.hook {
            hook.frame(f);
        }
        if let Some(c) = &mut self.chunk {
            c.count += 1;
            c.t1 = t;
        }
        if let Some(g) = &mut self.group {
            g.frames += 1;
        }
        self.counts.frames += 1;
        // If the next frame, one more step of the same length away, would be past the
        // flush interval, the chunk goes out now rather than when that frame comes: no
        // frame waits longer than the flush interval for its chunk.
        if let (Some(c), Some(prev)) = (self.chunk, self.last_t) {
            let step = t - prev;
            if s.flush_seconds > 0.0 && step > 0.0 && (t - c.t0) + step >= s.flush_seconds {
                self.close_chunk();
            }
        }
        self.last_t = Some(t);
        decoded
    }

    /// Adds an event of one kind to the pending batch (numbering it in its section), and
    /// sends the batch early when that kind fills a chunk's limit.
    fn pend<T>(&mut self, pick: fn(&mut Self) -> Pending<'_, T>, item: T) {
        let (pending, count) = pick(self);
        if pending.records.is_empty() {
            pending.first = *count as u32;
        }
        pending.records.push(item);
        *count += 1;
        if pending.records.len() >= MAX_RECORDS as usize {
            self.emit_events();
        }
    }

    /// Adds a note event; it goes out with the next chunk.
    pub fn push_note(&mut self, n: NoteEvent) {
        if let Some(hook) = &mut self.hook {
            hook.note(&n);
        }
        self.pend(|e| (&mut e.pending.notes, &mut e.counts.notes), n);
    }

    /// Adds a wall event.
    pub fn push_wall(&mut self, w: Wall) {
        if let Some(hook) = &mut self.hook {
            hook.wall(&w);
        }
        self.pend(|e| (&mut e.pending.walls, &mut e.counts.walls), w);
    }

    /// Adds a height change.
    pub fn push_height(&mut self, h: Height) {
        if let Some(hook) = &mut self.hook {
            hook.height(&h);
        }
        self.pend(|e| (&mut e.pending.heights, &mut e.counts.heights), h);
    }

    /// Adds a pause.
    pub fn push_pause(&mut self, p: Pause) {
        if let Some(hook) = &mut self.hook {
            hook.pause(&p);
        }
        self.pend(|e| (&mut e.pending.pauses, &mut e.counts.pauses), p);
    }

    /// Emits everything pushed so far: the open frame chunk and the pending events. The
    /// next frame continues the keyframe group in a new chunk.
    pub fn flush(&mut self) {
        self.close_chunk();
        self.emit_events();
    }

    /// Ends the stream: the last chunks, the trailer, the index and the footer.
    pub fn finish(
        &mut self,
        info: Info,
        controller_offsets: Option<ControllerOffsets>,
        user_data: Option<Vec<u8>>,
        trailing: Vec<u8>,
    ) {
        if self.finished {
            return;
        }
        self.flush();
        self.group_end();
        let last = self.hook.as_mut().and_then(|h| {
            h.stream_end(
                &info,
                controller_offsets.as_ref(),
                user_data.as_deref(),
                &trailing,
            )
        });
        if let Some((kind, payload)) = last {
            self.emit_extension(kind, &payload);
        }
        let trailer = Trailer {
            info,
            counts: self.counts,
            controller_offsets,
            user_data,
            trailing,
        };
        let payload = trailer.encode(self.settings.zstd_level);
        self.emit(ChunkType::Trailer, 0, 0, (0.0, 0.0), &payload, true);
        let index_at = self.offset;
        let payload = encode_index(&self.index, self.settings.zstd_level);
        self.emit(
            ChunkType::Index,
            0,
            self.index.len() as u32,
            (0.0, 0.0),
            &payload,
            false,
        );
        let f = footer(index_at);
        self.out.extend_from_slice(&f);
        self.offset += f.len() as u64;
        self.finished = true;
    }

    fn start_group(&mut self, t: f32) {
        // Pending events belong to the group they were pushed in.
        self.emit_events();
        if self.group.is_some() {
            self.group_end();
        }
        self.codec.reset();
        self.events.reset();
        self.group = Some(Group { t0: t, frames: 0 });
        self.open_chunk(ChunkType::Keyframes, t);
    }

    fn open_chunk(&mut self, kind: ChunkType, t: f32) {
        self.chunk = Some(OpenChunk {
            kind,
            first: self.counts.frames as u32,
            count: 0,
            t0: t,
            t1: t,
        });
    }

    fn close_chunk(&mut self) {
        let Some(c) = self.chunk.take() else { return };
        let payload = self.raw.finish();
        let indexed = c.kind == ChunkType::Keyframes;
        self.emit(c.kind, c.first, c.count, (c.t0, c.t1), &payload, indexed);
        self.emit_events();
    }

    fn emit_events(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        let payload = self.events.encode(&batch);
        let span = batch.span();
        self.emit(
            ChunkType::Events,
            0,
            batch.len() as u32,
            span,
            &payload,
            true,
        );
    }

    fn emit(
        &mut self,
        kind: ChunkType,
        first: u32,
        count: u32,
        (t0, t1): (f32, f32),
        payload: &[u8],
        indexed: bool,
    ) {
        if indexed {
            self.index.push(IndexEntry {
                offset: self.offset,
                kind,
                first,
                count,
                t0,
                t1,
            });
        }
        let before = self.out.len();
        ChunkHeader::new(kind, self.seq, first, count, t0).write_to(payload, &mut self.out);
        self.offset += (self.out.len() - before) as u64;
        self.seq = self.seq.wrapping_add(1);
    }
}

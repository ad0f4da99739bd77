//! Classic BSOR to the stream format and back, whole or while the bytes are arriving.

use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::bsor::{
    self, Event, Frame, Height, NoteEvent, ParseError, Pause, PushParser, Replay, Wall,
};
use crate::stream::{
    split_stream, ChunkSpan, ChunkType, DecodeStats, EventBatch, IndexEntry, Records, Settings,
    StreamDecoder, StreamEncoder, StreamError, StreamHeader, StreamItem, Trailer,
};

/// Pushes the events of `r` whose time has come (not after `t`), each section in its own
/// order: an event waits behind the one before it in its section.
struct EventCursor<'a> {
    r: &'a Replay,
    next: [usize; 4],
}

impl<'a> EventCursor<'a> {
    fn push_until(&mut self, enc: &mut StreamEncoder, t: Option<f32>) {
        let due = |time: f32| t.is_none_or(|t| time <= t);
        let r = self.r;
        while let Some(n) = r.notes.get(self.next[0]).filter(|n| due(n.event_time)) {
            enc.push_note(*n);
            self.next[0] += 1;
        }
        while let Some(w) = r.walls.get(self.next[1]).filter(|w| due(w.time)) {
            enc.push_wall(*w);
            self.next[1] += 1;
        }
        while let Some(h) = r.heights.get(self.next[2]).filter(|h| due(h.time)) {
            enc.push_height(*h);
            self.next[2] += 1;
        }
        while let Some(p) = r.pauses.get(self.next[3]).filter(|p| due(p.time)) {
            enc.push_pause(*p);
            self.next[3] += 1;
        }
    }
}

/// Encodes a whole replay. Events go out with the first chunk after their song time, as a
/// recorder would have sent them.
///
/// ```
/// use bsor_stream_core::stream::{Profile, Settings};
/// use bsor_stream_core::{bsor, synth, transcode};
///
/// let replay = synth::replay(synth::Settings {
///     seed: 7,
///     seconds: 3.0,
///     fps: 60,
/// });
/// let stream = transcode::encode_replay(&replay, Settings::archive(Profile::Lossless));
/// let (back, recovery) = transcode::decode_replay(&stream)?;
/// assert!(recovery.complete);
/// assert_eq!(bsor::to_vec(&back)?, bsor::to_vec(&replay)?); // the same BSOR bytes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_replay(r: &Replay, settings: Settings) -> Vec<u8> {
    let mut enc = StreamEncoder::new(r.info.clone(), settings);
    let mut events = EventCursor { r, next: [0; 4] };
    for f in &r.frames {
        events.push_until(&mut enc, Some(f.time));
        enc.push_frame(f);
    }
    events.push_until(&mut enc, None);
    enc.finish(
        r.info.clone(),
        r.controller_offsets,
        r.user_data.clone(),
        r.trailing.clone(),
    );
    enc.take_output()
}

/// Transcodes BSOR bytes to the stream format as they arrive: frame chunks go out as the
/// frames come in, with memory that does not grow with the number of frames. (BSOR stores
/// every event after every frame, so event chunks follow when their bytes arrive.)
#[derive(Debug)]
pub struct BsorToStream {
    settings: Settings,
    parser: PushParser,
    encoder: Option<StreamEncoder>,
    info: Option<bsor::Info>,
    offsets: Option<bsor::ControllerOffsets>,
    user_data: Option<Vec<u8>>,
    trailing: Vec<u8>,
    pending: Vec<u8>,
}

impl BsorToStream {
    /// A transcoder with these settings.
    pub fn new(settings: Settings) -> Self {
        BsorToStream {
            settings,
            parser: PushParser::new(),
            encoder: None,
            info: None,
            offsets: None,
            user_data: None,
            trailing: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Adds BSOR bytes.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), ParseError> {
        self.parser.push(bytes);
        self.drain()
    }

    /// Declares the end of the BSOR input and ends the stream.
    pub fn finish(&mut self) -> Result<(), ParseError> {
        self.parser.finish();
        self.drain()
    }

    /// Stream bytes produced so far and not yet taken.
    pub fn take_output(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.pending);
        if let Some(e) = &mut self.encoder {
            out.extend(e.take_output());
        }
        out
    }

    fn drain(&mut self) -> Result<(), ParseError> {
        while let Some(ev) = self.parser.next_event()? {
            match ev {
                Event::Info(info) => {
                    self.encoder = Some(StreamEncoder::new((*info).clone(), self.settings));
                    self.info = Some(*info);
                }
                Event::SectionStart { .. } => {}
                Event::Frame(f) => {
                    if let Some(e) = &mut self.encoder {
                        e.push_frame(&f);
                    }
                }
                Event::Note(n) => self.with_encoder(|e| e.push_note(n)),
                Event::Wall(w) => self.with_encoder(|e| e.push_wall(w)),
                Event::Height(h) => self.with_encoder(|e| e.push_height(h)),
                Event::Pause(p) => self.with_encoder(|e| e.push_pause(p)),
                Event::ControllerOffsets(o) => self.offsets = Some(o),
                Event::UserData(d) => self.user_data = Some(d),
                Event::Trailing(t) => self.trailing = t,
                Event::End => {
                    let (offsets, user_data) = (self.offsets.take(), self.user_data.take());
                    let trailing = std::mem::take(&mut self.trailing);
                    if let (Some(e), Some(info)) = (&mut self.encoder, self.info.clone()) {
                        e.finish(info, offsets, user_data, trailing);
                    }
                }
            }
        }
        Ok(())
    }

    fn with_encoder(&mut self, f: impl FnOnce(&mut StreamEncoder)) {
        if let Some(e) = &mut self.encoder {
            f(e);
        }
    }
}

/// How much of a stream a decode recovered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovery {
    /// The decoder's counts.
    pub stats: DecodeStats,
    /// A trailer was read, and every count it states was met with no damage: the replay is
    /// whole.
    pub complete: bool,
    /// Frames recovered.
    pub frames: u64,
    /// Events recovered.
    pub events: u64,
    /// Damage reports, in order.
    pub damage: Vec<crate::stream::Damage>,
}

/// Collects decoded stream events into a replay.
#[derive(Debug, Default)]
pub struct ReplayCollector {
    replay: Replay,
    /// Count frames without keeping them (for callers that write them elsewhere).
    count_only: bool,
    counted_frames: u64,
    header: bool,
    trailer: Option<Trailer>,
    damage: Vec<crate::stream::Damage>,
    gaps: bool,
}

fn place<T: Clone>(section: &mut Vec<T>, first: u32, items: &[T], gaps: &mut bool) {
    let first = first as usize;
    if first > section.len() {
        *gaps = true;
    }
    let skip = section.len().saturating_sub(first);
    section.extend(items.iter().skip(skip).cloned());
}

/// Event sections gathered from batches in stream order: each batch's records past what a
/// section holds are added (a record sent twice is kept once); a batch that starts past
/// a section's end sets `gaps`.
pub struct EventSections<'a> {
    /// The note events so far.
    pub notes: &'a mut Vec<NoteEvent>,
    /// The wall events so far.
    pub walls: &'a mut Vec<Wall>,
    /// The height changes so far.
    pub heights: &'a mut Vec<Height>,
    /// The pauses so far.
    pub pauses: &'a mut Vec<Pause>,
}

impl EventSections<'_> {
    /// Adds batch `b`.
    pub fn place(&mut self, b: &EventBatch, gaps: &mut bool) {
        place(self.notes, b.notes.first, &b.notes.records, gaps);
        place(self.walls, b.walls.first, &b.walls.records, gaps);
        place(self.heights, b.heights.first, &b.heights.records, gaps);
        place(self.pauses, b.pauses.first, &b.pauses.records, gaps);
    }
}

impl ReplayCollector {
    /// A collector that counts frames instead of keeping them, for a decode whose frames
    /// go straight to a sink: its memory does not grow with the frames.
    pub fn counting() -> Self {
        ReplayCollector {
            count_only: true,
            ..Self::default()
        }
    }

    /// Adds one decoded event.
    pub fn apply(&mut self, item: StreamItem) {
        let r = &mut self.replay;
        match item {
            StreamItem::Header(h) => {
                r.info = h.info;
                self.header = true;
            }
            StreamItem::Frame { index, frame } => {
                if u64::from(index) != self.counted_frames {
                    self.gaps = true;
                }
                self.counted_frames += 1;
                if !self.count_only {
                    r.frames.push(frame);
                }
            }
            StreamItem::FrameRecords { first, records } => {
                if u64::from(first) != self.counted_frames {
                    self.gaps = true;
                }
                for record in records.chunks_exact(bsor::FRAME_SIZE) {
                    self.counted_frames += 1;
                    if let (false, Ok(record)) = (self.count_only, record.try_into()) {
                        r.frames.push(bsor::decode_frame(record));
                    }
                }
            }
            StreamItem::Events(b) => self.add_events(b),
            StreamItem::Trailer(t) => {
                r.info = t.info.clone();
                r.controller_offsets = t.controller_offsets;
                r.user_data = t.user_data.clone();
                r.trailing = t.trailing.clone();
                self.trailer = Some(*t);
            }
            StreamItem::Damage(d) => self.damage.push(d),
            StreamItem::Index(_) | StreamItem::Skipped { .. } | StreamItem::End => {}
        }
    }

    fn add_events(&mut self, b: EventBatch) {
        let r = &mut self.replay;
        EventSections {
            notes: &mut r.notes,
            walls: &mut r.walls,
            heights: &mut r.heights,
            pauses: &mut r.pauses,
        }
        .place(&b, &mut self.gaps);
    }

    /// The replay and how much of it there is.
    pub fn finish(self, stats: DecodeStats) -> (Replay, Recovery) {
        let r = self.replay;
        let complete = !self.gaps
            && self.damage.is_empty()
            && self.trailer.as_ref().is_some_and(|t| {
                let c = t.counts;
                c.frames == self.counted_frames
                    && c.notes == r.notes.len() as u64
                    && c.walls == r.walls.len() as u64
                    && c.heights == r.heights.len() as u64
                    && c.pauses == r.pauses.len() as u64
            });
        let recovery = Recovery {
            stats,
            complete,
            frames: self.counted_frames,
            events: (r.notes.len() + r.walls.len() + r.heights.len() + r.pauses.len()) as u64,
            damage: self.damage,
        };
        (r, recovery)
    }
}

/// Decodes a whole stream into a replay, stepping over damage: what was lost is in the
/// [`Recovery`]. An error only where nothing can be read (a bad stream header) or the
/// reader must stop (a critical unknown chunk).
///
/// ```
/// use bsor_stream_core::stream::{Profile, Settings};
/// use bsor_stream_core::{synth, transcode};
///
/// let replay = synth::replay(synth::Settings {
///     seed: 7,
///     seconds: 3.0,
///     fps: 60,
/// });
/// let mut stream = transcode::encode_replay(&replay, Settings::live(Profile::Fine));
/// let middle = stream.len() / 2;
/// stream[middle] ^= 0xff; // damage one chunk
/// let (back, recovery) = transcode::decode_replay(&stream)?;
/// assert!(!recovery.complete && !recovery.damage.is_empty());
/// assert!(back.frames.len() > replay.frames.len() / 2);
/// # Ok::<(), bsor_stream_core::stream::StreamError>(())
/// ```
pub fn decode_replay(bytes: &[u8]) -> Result<(Replay, Recovery), StreamError> {
    let mut d = StreamDecoder::new();
    d.push(bytes);
    d.finish();
    let mut c = ReplayCollector::default();
    while let Some(item) = d.next_item()? {
        c.apply(item);
    }
    Ok(c.finish(d.stats()))
}

/// The stream header and index of a finished file, read from its start and its footer.
pub fn read_index<R: Read + Seek>(
    r: &mut R,
) -> io::Result<Option<(StreamHeader, Vec<IndexEntry>)>> {
    let len = r.seek(SeekFrom::End(0))?;
    let footer = crate::stream::FOOTER_SIZE as u64;
    if len < footer {
        return Ok(None);
    }
    r.seek(SeekFrom::Start(len - footer))?;
    let mut tail = vec![0u8; footer as usize];
    r.read_exact(&mut tail)?;
    let Some(index_at) = crate::stream::parse_footer(&tail) else {
        return Ok(None);
    };
    if index_at >= len - footer {
        return Ok(None);
    }
    let header = read_header(r)?;
    r.seek(SeekFrom::Start(index_at))?;
    let mut chunk = vec![0u8; (len - footer - index_at) as usize];
    r.read_exact(&mut chunk)?;
    let mut d = StreamDecoder::with_header(header.clone());
    d.push(&chunk);
    d.finish();
    while let Some(item) = d.next_item().map_err(io::Error::other)? {
        if let StreamItem::Index(entries) = item {
            return Ok(Some((header, entries)));
        }
    }
    Ok(None)
}

/// Reads exactly the stream header (byte by byte: it is small, and a reader of events must
/// not touch the chunk after it).
fn read_header<R: Read + Seek>(r: &mut R) -> io::Result<StreamHeader> {
    r.seek(SeekFrom::Start(0))?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        r.read_exact(&mut byte)?;
        buf.push(byte[0]);
        match StreamHeader::parse_prefix(&buf) {
            Ok(Some(h)) => return Ok(h),
            Ok(None) if buf.len() < 64 << 20 => continue,
            Ok(None) => return Err(io::Error::new(io::ErrorKind::InvalidData, "stream header")),
            Err(m) => return Err(io::Error::new(io::ErrorKind::InvalidData, m)),
        }
    }
}

/// Reads exactly one chunk (header and payload) at the reader's position.
fn read_chunk<R: Read>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut chunk = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    let (h, hlen) = loop {
        r.read_exact(&mut byte)?;
        chunk.push(byte[0]);
        if let Some(x) = crate::stream::ChunkHeader::parse_at(&chunk) {
            break x;
        }
        if chunk.len() > 64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "chunk header"));
        }
    };
    chunk.resize(hlen + h.len as usize, 0);
    r.read_exact(&mut chunk[hlen..])?;
    Ok(chunk)
}

/// Reads every event of a finished stream through its index, touching only the event
/// chunks (and the header and index): no pose data is read, let alone decompressed.
pub fn read_events<R: Read + Seek>(r: &mut R) -> io::Result<Option<(StreamHeader, EventBatch)>> {
    let Some((header, index)) = read_index(r)? else {
        return Ok(None);
    };
    let mut d = StreamDecoder::with_header(header.clone());
    let mut all = EventBatch::default();
    for e in index
        .iter()
        .filter(|e| matches!(e.kind, ChunkType::Events | ChunkType::Keyframes))
    {
        if e.kind == ChunkType::Keyframes {
            d.new_group();
            continue;
        }
        r.seek(SeekFrom::Start(e.offset))?;
        let chunk = read_chunk(r)?;
        let batch = d
            .decode_events_chunk(&chunk)
            .map_err(|m| io::Error::new(io::ErrorKind::InvalidData, m))?;
        all.notes.records.extend(batch.notes.records);
        all.walls.records.extend(batch.walls.records);
        all.heights.records.extend(batch.heights.records);
        all.pauses.records.extend(batch.pauses.records);
    }
    Ok(Some((header, all)))
}

/// Writes the BSOR rebuilt from a stream into a `Write + Seek` sink while the stream
/// arrives: frames go out as they come, the frame count is patched at the end, and only
/// the events are held in memory (BSOR puts them after the frames).
#[derive(Debug)]
pub struct BsorSink<W: Write + Seek> {
    w: W,
    info_at: u64,
    info_len: usize,
    count_at: u64,
    frames: u32,
    notes: Vec<NoteEvent>,
    walls: Vec<Wall>,
    heights: Vec<Height>,
    pauses: Vec<Pause>,
    trailer: Option<Trailer>,
}

impl<W: Write + Seek> BsorSink<W> {
    /// Starts the BSOR file with the info block of the stream header.
    pub fn new(mut w: W, header: &StreamHeader) -> io::Result<Self> {
        let mut head = Vec::new();
        bsor::write_head(&header.info, 0, &mut head).map_err(io::Error::from)?;
        w.write_all(&head)?;
        let info_at = 6;
        let count_at = head.len() as u64 - 4;
        let info_len = head.len() - 6 - 5;
        Ok(BsorSink {
            w,
            info_at,
            info_len,
            count_at,
            frames: 0,
            notes: Vec::new(),
            walls: Vec::new(),
            heights: Vec::new(),
            pauses: Vec::new(),
            trailer: None,
        })
    }

    /// Adds a decoded stream event.
    pub fn apply(&mut self, item: StreamItem) -> io::Result<()> {
        match item {
            StreamItem::Frame { frame, .. } => self.frame(&frame)?,
            StreamItem::Events(b) => {
                let mut gaps = false;
                place(&mut self.notes, b.notes.first, &b.notes.records, &mut gaps);
                place(&mut self.walls, b.walls.first, &b.walls.records, &mut gaps);
                place(
                    &mut self.heights,
                    b.heights.first,
                    &b.heights.records,
                    &mut gaps,
                );
                place(
                    &mut self.pauses,
                    b.pauses.first,
                    &b.pauses.records,
                    &mut gaps,
                );
            }
            StreamItem::Trailer(t) => self.trailer = Some(*t),
            _ => {}
        }
        Ok(())
    }

    fn frame(&mut self, f: &Frame) -> io::Result<()> {
        self.w.write_all(&bsor::encode_frame(f))?;
        self.frames += 1;
        Ok(())
    }

    /// Writes the events and the optional tail, patches the frame count and the info block
    /// (from the trailer), and returns the sink. A final info block whose length differs from
    /// the header's cannot be patched in place: the sink then holds the BSOR with the
    /// header's info, and [`SinkEnd::Relocate`] says what replaces its head.
    pub fn finish(mut self) -> io::Result<SinkEnd<W>> {
        let tail = Replay {
            notes: std::mem::take(&mut self.notes),
            walls: std::mem::take(&mut self.walls),
            heights: std::mem::take(&mut self.heights),
            pauses: std::mem::take(&mut self.pauses),
            controller_offsets: self.trailer.as_ref().and_then(|t| t.controller_offsets),
            user_data: self.trailer.as_ref().and_then(|t| t.user_data.clone()),
            trailing: self
                .trailer
                .as_ref()
                .map(|t| t.trailing.clone())
                .unwrap_or_default(),
            ..Replay::default()
        };
        let mut bytes = Vec::new();
        bsor::write_tail(&tail, &mut bytes).map_err(io::Error::from)?;
        self.w.write_all(&bytes)?;
        let end = self.w.stream_position()?;
        self.w.seek(SeekFrom::Start(self.count_at))?;
        self.w.write_all(&(self.frames as i32).to_le_bytes())?;
        let mut relocate = None;
        if let Some(t) = &self.trailer {
            let mut info = Vec::new();
            bsor::encode_info(&t.info, &mut info);
            if info.len() == self.info_len {
                self.w.seek(SeekFrom::Start(self.info_at))?;
                self.w.write_all(&info)?;
            } else {
                let mut head = Vec::new();
                bsor::write_head(&t.info, self.frames as usize, &mut head)
                    .map_err(io::Error::from)?;
                relocate = Some((head, self.count_at + 4));
            }
        }
        self.w.seek(SeekFrom::Start(end))?;
        self.w.flush()?;
        Ok(match relocate {
            None => SinkEnd::Complete(self.w),
            Some((head, skip)) => SinkEnd::Relocate {
                w: self.w,
                head,
                skip,
            },
        })
    }
}

/// How a [`BsorSink`] ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum SinkEnd<W> {
    /// The sink holds the whole BSOR.
    Complete(W),
    /// The final info block differs in length from the header's (a modifier added during
    /// the song, say), so it could not be patched in place. The BSOR is `head` followed by
    /// the sink's bytes from offset `skip` on (everything after the old head).
    Relocate {
        /// The sink, holding the BSOR with the header's info block.
        w: W,
        /// The BSOR's head: magic, version, the final info block and the frames section's
        /// header.
        head: Vec<u8>,
        /// Where the sink's bytes after its own head start.
        skip: u64,
    },
}

/// Decodes the part of a finished stream between song times `from` and `to` (inclusive):
/// the frames in that span, and the events whose time falls in it. With an index (a
/// finished file), only the keyframe groups that overlap the span are decoded, starting at
/// the last keyframe at or before `from`, and the events are read from the event chunks
/// alone; without one, the whole stream is decoded.
///
/// ```
/// use bsor_stream_core::stream::{Profile, Settings};
/// use bsor_stream_core::{synth, transcode};
///
/// let replay = synth::replay(synth::Settings {
///     seed: 7,
///     seconds: 3.0,
///     fps: 60,
/// });
/// let stream = transcode::encode_replay(&replay, Settings::archive(Profile::Compact));
/// let (part, _) = transcode::decode_span(&stream, 1.0, 2.0)?;
/// assert!(!part.frames.is_empty());
/// assert!(part.frames.iter().all(|f| (1.0..=2.0).contains(&f.time)));
/// # Ok::<(), bsor_stream_core::stream::StreamError>(())
/// ```
pub fn decode_span(bytes: &[u8], from: f32, to: f32) -> Result<(Replay, Recovery), StreamError> {
    let in_span = |t: f32| t >= from && t <= to;
    let mut cursor = io::Cursor::new(bytes);
    let (mut r, mut rec, events) = match read_index(&mut cursor).ok().flatten() {
        Some((header, index)) => span_through_index(&mut cursor, header, &index, from, to)?,
        None => {
            let (mut r, rec) = decode_replay(bytes)?;
            r.frames.retain(|f| in_span(f.time));
            let events = EventBatch {
                notes: Records::new(0, std::mem::take(&mut r.notes)),
                walls: Records::new(0, std::mem::take(&mut r.walls)),
                heights: Records::new(0, std::mem::take(&mut r.heights)),
                pauses: Records::new(0, std::mem::take(&mut r.pauses)),
            };
            (r, rec, events)
        }
    };
    fn keep<T>(items: Vec<T>, time: fn(&T) -> f32, from: f32, to: f32) -> Vec<T> {
        items
            .into_iter()
            .filter(|x| (from..=to).contains(&time(x)))
            .collect()
    }
    r.notes = keep(events.notes.records, |n| n.event_time, from, to);
    r.walls = keep(events.walls.records, |w| w.time, from, to);
    r.heights = keep(events.heights.records, |h| h.time, from, to);
    r.pauses = keep(events.pauses.records, |p| p.time, from, to);
    rec.frames = r.frames.len() as u64;
    rec.events = (r.notes.len() + r.walls.len() + r.heights.len() + r.pauses.len()) as u64;
    // A span is whole when nothing was lost on the way to it.
    rec.complete = rec.damage.is_empty();
    Ok((r, rec))
}

/// [`decode_span`] of a finished stream with an `index`: decodes the keyframe groups that
/// overlap the span (from the last keyframe at or before `from`), keeping the frames in the
/// span, and reads every event through the index. The events are not cut to the span yet.
fn span_through_index(
    cursor: &mut io::Cursor<&[u8]>,
    header: StreamHeader,
    index: &[IndexEntry],
    from: f32,
    to: f32,
) -> Result<(Replay, Recovery, EventBatch), StreamError> {
    let bytes: &[u8] = cursor.get_ref();
    let in_span = |t: f32| t >= from && t <= to;
    let keys: Vec<&IndexEntry> = index
        .iter()
        .filter(|e| e.kind == ChunkType::Keyframes)
        .collect();
    let start = keys.iter().rposition(|e| e.t0 <= from).unwrap_or(0);
    let end = keys
        .iter()
        .skip(start + 1)
        .find(|e| e.t0 > to)
        .map(|e| e.offset as usize)
        .or_else(|| {
            index
                .iter()
                .find(|e| e.kind == ChunkType::Trailer)
                .map(|e| e.offset as usize)
        })
        .unwrap_or(bytes.len());
    let begin = keys.get(start).map_or(end, |e| e.offset as usize);
    let mut d = StreamDecoder::with_header(header.clone());
    d.push(bytes.get(begin..end.max(begin)).unwrap_or_default());
    d.finish();
    let mut c = ReplayCollector::default();
    c.apply(StreamItem::Header(Box::new(header)));
    while let Some(item) = d.next_item()? {
        match item {
            StreamItem::Frame { frame, .. } if !in_span(frame.time) => {}
            StreamItem::Frame { frame, .. } => c.replay.frames.push(frame),
            StreamItem::Events(_) => {} // read below, through the index
            other => c.apply(other),
        }
    }
    let stats = d.stats();
    let events = read_events(cursor)
        .ok()
        .flatten()
        .map(|(_, e)| e)
        .unwrap_or_default();
    let (r, rec) = c.finish(stats);
    Ok((r, rec, events))
}

/// A chunk of a stream and the song times of the frames it carries.
pub type TimedChunk = (ChunkSpan, Vec<f32>);

/// The stream header's length and the whole chunks after it, each with the song times of
/// the frames it carries (none for event, trailer and index chunks), decoded as a viewer
/// would: what a publisher needs to send each chunk when a recorder would have had it (once
/// its last frame was captured). `None` without a stream header.
pub fn chunk_frame_times(stream: &[u8]) -> Option<(usize, Vec<TimedChunk>)> {
    let (_, header_len, spans) = split_stream(stream)?;
    let mut d = StreamDecoder::new();
    d.push(&stream[..header_len]);
    while let Ok(Some(_)) = d.next_item() {}
    let mut out = Vec::with_capacity(spans.len());
    for span in spans {
        d.push(span.bytes(stream));
        let mut times = Vec::new();
        while let Ok(Some(item)) = d.next_item() {
            if let StreamItem::Frame { frame, .. } = item {
                times.push(frame.time);
            }
        }
        out.push((span, times));
    }
    Some((header_len, out))
}

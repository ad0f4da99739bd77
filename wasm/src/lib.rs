//! The classic BSOR codec and the stream decoder as a WebAssembly module for
//! `wasm32-unknown-unknown`, with plain `extern "C"` exports and no JavaScript glue:
//!
//! 1. `input_reserve(len)` returns where to write `len` input bytes in the module's memory;
//! 2. `stream_to_bsor()` decodes the input as a `.bsors` stream into a classic BSOR, or
//!    `bsor_check()` parses the input as a classic BSOR and writes it back; each returns 0
//!    on success, 1 when damage was stepped over (the output holds what was recovered), and
//!    -1 on an error;
//! 3. `output_ptr()` and `output_len()` locate the result (the BSOR bytes, or after -1 the
//!    error's text in UTF-8).
//!
//! For the browser player (`web/`), two more entry points fill three result buffers:
//!
//! - `stream_begin()` starts a push decoder for a `.bsors` stream; `stream_push()` feeds it
//!   the input (bytes as they arrive, in pieces of any size), `stream_finish()` declares the
//!   end. `bsor_load()` parses the input as a whole classic BSOR.
//! - After each, `frames_ptr()`/`frames_len()` locate the frames decoded by that call as
//!   `f32` records of [`FRAME_FLOATS`]: time, then head, left hand and right hand, each
//!   position (x, y, z) and rotation (x, y, z, w);
//!   `events_ptr()`/`events_len()` the events as `f32` records of [`EVENT_FLOATS`] (see
//!   [`EventRecord`]); and `output_ptr()`/`output_len()` a JSON array of messages in UTF-8
//!   (the header's info and settings, the trailer's info and counts, damage stepped over,
//!   the end, or a fatal error), each an object with a `type` field.
//! - Each returns 0, or -1 after a fatal error (the last message says which).
//! - `frame_floats()` and `event_floats()` give the records' layout to the page.
//!
//! A live session is watched through the core's protocol client (the `live` module's
//! `live_*` exports): the worker only carries bytes between its WebSocket and the module.
//!
//! The buffers live in the module and are reused by the next call. No `unsafe` block: the
//! exports only hand out addresses, and JavaScript writes and reads the module's memory
//! itself. The one thing the compiler counts as unsafe is `no_mangle` (an exported
//! symbol could collide with another library's); each is allowed where it stands, and the
//! names are this module's own, in a module that links nothing else that exports symbols.

#![deny(unsafe_code)]

mod live;

use std::cell::RefCell;

use bsor_stream_core::bsor::{self, Frame, Info, NoteEvent, NoteOutcome, Pose, ScoringType};
use bsor_stream_core::stream::{
    parse_footer, ChunkHeader, EventBatch, Profile, Records, StreamDecoder, StreamHeader,
    StreamItem,
};
use bsor_stream_core::transcode;
use serde_json::{json, Value};

/// Floats in one frame record: time, then 3 poses of position (3) and rotation (4).
pub const FRAME_FLOATS: usize = 22;
/// Floats in one event record (see [`EventRecord`]).
pub const EVENT_FLOATS: usize = 18;

/// The event records' layout, by kind (the first float):
///
/// - `0` note: time, spawn time, line, layer, colour (-1 bomb, 0 red, 1 blue), cut
///   direction (0-8, 9 none), scoring type as stored, outcome (1 good, 2 bad, 3 miss, 4
///   bomb, 0 an event type this decoder does not know), the cut's points with its scoring type's fixed parts
///   (0 unless a good cut), the most points the note could give (0 for bombs and notes
///   that give none), the saber that cut it (0 left, 1 right; -1 without a cut), then
///   the cut point (x, y, z) and the cut plane's normal (x, y, z), as the game recorded
///   them (0 without a cut).
/// - `1` wall: time, spawn time, line, type (0 full, 1 crouch), width, energy.
/// - `2` height: time, height.
/// - `3` pause: time, duration in seconds.
///
/// Unused fields are 0.
pub enum EventRecord {}

/// Floats in one frame record ([`FRAME_FLOATS`]): the page reads the layout here.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn frame_floats() -> usize {
    FRAME_FLOATS
}

/// Floats in one event record ([`EVENT_FLOATS`]).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn event_floats() -> usize {
    EVENT_FLOATS
}

/// Kinds of event records.
const NOTE: f32 = 0.0;
const WALL: f32 = 1.0;
const HEIGHT: f32 = 2.0;
const PAUSE: f32 = 3.0;

thread_local! {
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static FRAMES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static EVENTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static DECODER: RefCell<Option<StreamDecoder>> = const { RefCell::new(None) };
    /// The stored stream being read by ranges: its header and the event chunks' context.
    static SEEK: RefCell<Option<(StreamHeader, StreamDecoder)>> = const { RefCell::new(None) };
}

/// Makes room for `len` input bytes and returns where they go (valid until the next call).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn input_reserve(len: usize) -> *mut u8 {
    INPUT.with_borrow_mut(|input| {
        input.clear();
        input.resize(len, 0);
        input.as_mut_ptr()
    })
}

/// Where the last result starts.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn output_ptr() -> *const u8 {
    OUTPUT.with_borrow(|out| out.as_ptr())
}

/// The last result's length in bytes.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn output_len() -> usize {
    OUTPUT.with_borrow(|out| out.len())
}

/// Where the last call's frame records start.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn frames_ptr() -> *const f32 {
    FRAMES.with_borrow(|v| v.as_ptr())
}

/// How many floats the last call's frame records hold.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn frames_len() -> usize {
    FRAMES.with_borrow(|v| v.len())
}

/// Where the last call's event records start.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn events_ptr() -> *const f32 {
    EVENTS.with_borrow(|v| v.as_ptr())
}

/// How many floats the last call's event records hold.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn events_len() -> usize {
    EVENTS.with_borrow(|v| v.len())
}

/// Runs `f` on the input and keeps its result (or its error's text) as the output.
fn run(f: impl FnOnce(&[u8]) -> Result<(Vec<u8>, bool), String>) -> i32 {
    let result = INPUT.with_borrow(|input| f(input));
    let (bytes, code) = match result {
        Ok((bytes, damaged)) => (bytes, i32::from(damaged)),
        Err(e) => (e.into_bytes(), -1),
    };
    OUTPUT.with_borrow_mut(|out| *out = bytes);
    code
}

/// Decodes the input stream into a classic BSOR (see the crate docs for the codes).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn stream_to_bsor() -> i32 {
    run(|input| {
        let (replay, recovery) = transcode::decode_replay(input).map_err(|e| e.to_string())?;
        let bytes = bsor::to_vec(&replay).map_err(|e| e.to_string())?;
        Ok((bytes, !recovery.damage.is_empty()))
    })
}

/// Parses the input as a classic BSOR and writes it back byte for byte.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn bsor_check() -> i32 {
    run(|input| {
        let replay = bsor::parse(input).map_err(|e| e.to_string())?;
        let bytes = bsor::to_vec(&replay).map_err(|e| e.to_string())?;
        Ok((bytes, false))
    })
}

/// What one call of the player's entry points produced.
#[derive(Default)]
struct Out {
    frames: Vec<f32>,
    events: Vec<f32>,
    messages: Vec<Value>,
    failed: bool,
}

impl Out {
    fn frame(&mut self, f: &Frame) {
        self.frames.push(f.time);
        for p in [&f.head, &f.left_hand, &f.right_hand] {
            pose(&mut self.frames, p);
        }
    }

    fn record(&mut self, fields: &[f32]) {
        let mut r = [0.0; EVENT_FLOATS];
        for (slot, v) in r.iter_mut().zip(fields) {
            *slot = *v;
        }
        self.events.extend_from_slice(&r);
    }

    fn note(&mut self, n: &NoteEvent) {
        let id = n.id();
        let outcome = match n.outcome {
            NoteOutcome::Good(_) => 1,
            NoteOutcome::Bad(_) => 2,
            NoteOutcome::Miss => 3,
            NoteOutcome::Bomb => 4,
            NoteOutcome::Unknown(_) => 0,
        };
        let points = n.score().map_or(0, |s| s.total());
        let most = if id.color_type < 0 {
            0
        } else {
            match id.scoring() {
                ScoringType::Ignore | ScoringType::NoScore => 0,
                ScoringType::BurstSliderHead => 85,
                ScoringType::BurstSliderElement => 20,
                _ => 115,
            }
        };
        self.record(&[
            NOTE,
            n.event_time,
            n.spawn_time,
            id.line_index as f32,
            id.note_line_layer as f32,
            id.color_type as f32,
            id.cut_direction as f32,
            id.scoring_type as f32,
            outcome as f32,
            points as f32,
            most as f32,
            n.outcome.cut().map_or(-1, |c| c.saber_type) as f32,
        ]);
        if let Some(c) = n.outcome.cut() {
            let at = self.events.len() - EVENT_FLOATS + 12;
            self.events[at..at + 6].copy_from_slice(&[
                c.cut_point.x,
                c.cut_point.y,
                c.cut_point.z,
                c.cut_normal.x,
                c.cut_normal.y,
                c.cut_normal.z,
            ]);
        }
    }

    fn batch(&mut self, b: &EventBatch) {
        for n in &b.notes.records {
            self.note(n);
        }
        for w in &b.walls.records {
            let id = w.id();
            self.record(&[
                WALL,
                w.time,
                w.spawn_time,
                id.line_index as f32,
                id.obstacle_type as f32,
                id.width as f32,
                w.energy,
            ]);
        }
        for h in &b.heights.records {
            self.record(&[HEIGHT, h.time, h.height]);
        }
        for p in &b.pauses.records {
            self.record(&[PAUSE, p.time, p.duration as f32]);
        }
    }

    /// Publishes this call's results and returns its code.
    fn publish(self) -> i32 {
        FRAMES.with_borrow_mut(|v| *v = self.frames);
        EVENTS.with_borrow_mut(|v| *v = self.events);
        let text = Value::Array(self.messages).to_string();
        OUTPUT.with_borrow_mut(|out| *out = text.into_bytes());
        if self.failed {
            -1
        } else {
            0
        }
    }
}

fn pose(out: &mut Vec<f32>, p: &Pose) {
    let (v, q) = (p.position, p.rotation);
    out.extend_from_slice(&[v.x, v.y, v.z, q.x, q.y, q.z, q.w]);
}

fn info_json(info: &Info) -> Value {
    serde_json::to_value(info).unwrap_or(Value::Null)
}

/// `lossless`, `fine`, `compact`, or `custom` with its steps (the library's `Display`).
fn profile_name(p: Profile) -> String {
    p.to_string()
}

/// Starts decoding a new stream (drops any earlier one).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn stream_begin() {
    DECODER.with_borrow_mut(|d| *d = Some(StreamDecoder::new()));
    Out::default().publish();
}

/// Feeds the input to the stream decoder and outputs what it could decode.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn stream_push() -> i32 {
    stream_step(false)
}

/// Declares the end of the stream and outputs the rest.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn stream_finish() -> i32 {
    stream_step(true)
}

fn stream_step(end: bool) -> i32 {
    let mut out = Out::default();
    DECODER.with_borrow_mut(|slot| {
        let d = slot.get_or_insert_with(StreamDecoder::new);
        if end {
            d.finish();
        } else {
            INPUT.with_borrow(|input| d.push(input));
        }
        drain(d, &mut out);
    });
    out.publish()
}

fn drain(d: &mut StreamDecoder, out: &mut Out) {
    loop {
        match d.next_item() {
            Ok(None) => return,
            Ok(Some(item)) => match item {
                StreamItem::Header(h) => out.messages.push(json!({
                    "type": "header",
                    "info": info_json(&h.info),
                    "profile": profile_name(h.settings.profile),
                    "keyframeSeconds": h.settings.keyframe_seconds,
                    "flushSeconds": h.settings.flush_seconds,
                })),
                StreamItem::Frame { frame, .. } => out.frame(&frame),
                // Not asked for (no `bsor_records`), handled alike all the same.
                StreamItem::FrameRecords { records, .. } => {
                    for record in records.chunks_exact(bsor::FRAME_SIZE) {
                        if let Ok(record) = record.try_into() {
                            out.frame(&bsor::decode_frame(record));
                        }
                    }
                }
                StreamItem::Events(b) => out.batch(&b),
                StreamItem::Trailer(t) => out.messages.push(json!({
                    "type": "trailer",
                    "info": info_json(&t.info),
                    "frames": t.counts.frames,
                    "notes": t.counts.notes,
                    "walls": t.counts.walls,
                })),
                StreamItem::Index(entries) => out.messages.push(json!({
                    "type": "index",
                    "entries": entries.len(),
                })),
                StreamItem::Skipped { offset, kind } => out.messages.push(json!({
                    "type": "skipped", "offset": offset, "kind": kind,
                })),
                StreamItem::Damage(damage) => out.messages.push(json!({
                    "type": "damage", "message": damage.to_string(),
                })),
                StreamItem::End => {
                    out.messages.push(json!({"type": "end"}));
                    return;
                }
            },
            Err(e) => {
                out.messages
                    .push(json!({"type": "error", "message": e.to_string()}));
                out.failed = true;
                return;
            }
        }
    }
}

/// Reading a stored stream by ranges (format.md 13, 14, 17), step 1: parses the input (the
/// file's first bytes) as a stream header. Returns the header's length and outputs its
/// message; 0 when more bytes are needed; -1 on an error.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn seek_header() -> i32 {
    let mut out = Out::default();
    let parsed = INPUT.with_borrow(|input| StreamHeader::parse_prefix_len(input));
    let code = match parsed {
        Ok(None) => 0,
        Ok(Some((h, len))) => {
            out.messages.push(json!({
                "type": "header",
                "info": info_json(&h.info),
                "profile": profile_name(h.settings.profile),
                "keyframeSeconds": h.settings.keyframe_seconds,
                "flushSeconds": h.settings.flush_seconds,
            }));
            let events = StreamDecoder::with_header(h.clone());
            SEEK.with_borrow_mut(|s| *s = Some((h, events)));
            i32::try_from(len).unwrap_or(-1)
        }
        Err(e) => {
            out.messages
                .push(json!({"type": "error", "message": e.to_string()}));
            -1
        }
    };
    let failed = out.publish() < 0;
    if failed {
        -1
    } else {
        code
    }
}

/// Step 2: the input is the file's last 16 bytes; outputs `{"type":"footer","indexOffset"}`,
/// or returns -1 when they are not a footer (an unfinished stream).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn seek_footer() -> i32 {
    let mut out = Out::default();
    match INPUT.with_borrow(|input| parse_footer(input)) {
        Some(offset) => out
            .messages
            .push(json!({"type": "footer", "indexOffset": offset})),
        None => {
            out.messages
                .push(json!({"type": "error", "message": "no footer: the stream is not finished"}));
            out.failed = true;
        }
    }
    out.publish()
}

/// Step 3: the input is the index chunk; outputs `{"type":"index","entries":[[type byte,
/// offset, first, count, t0, t1], ...]}`.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn seek_index() -> i32 {
    let mut out = Out::default();
    let Some(header) = SEEK.with_borrow(|s| s.as_ref().map(|(h, _)| h.clone())) else {
        out.messages
            .push(json!({"type": "error", "message": "the index before the header"}));
        out.failed = true;
        return out.publish();
    };
    let mut d = StreamDecoder::with_header(header);
    INPUT.with_borrow(|input| d.push(input));
    d.finish();
    loop {
        match d.next_item() {
            Ok(Some(StreamItem::Index(entries))) => {
                let rows: Vec<Value> = entries
                    .iter()
                    .map(|e| json!([e.kind.byte(), e.offset, e.first, e.count, e.t0, e.t1]))
                    .collect();
                out.messages.push(json!({"type": "index", "entries": rows}));
            }
            Ok(Some(StreamItem::Damage(damage))) => out.messages.push(json!({
                "type": "damage", "message": damage.to_string(),
            })),
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                out.messages
                    .push(json!({"type": "error", "message": e.to_string()}));
                out.failed = true;
                break;
            }
        }
    }
    if !out.failed && !out.messages.iter().any(|m| m["type"] == "index") {
        out.messages
            .push(json!({"type": "error", "message": "no index chunk at the footer's offset"}));
        out.failed = true;
    }
    out.publish()
}

/// The whole length (header and payload) of the chunk whose first bytes are the input; 0
/// when more bytes are needed to tell, -1 when they are not a chunk header (for tools and
/// tests that lay a stream out; the worker lets `seek_events` find the chunk's end).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn chunk_length() -> f64 {
    INPUT.with_borrow(|input| match ChunkHeader::parse_at(input) {
        Some((h, len)) => len as f64 + f64::from(h.len),
        None if input.len() < MAX_CHUNK_HEADER => 0.0,
        None => -1.0,
    })
}

/// The longest chunk header (format.md 4.1): sync, type, 4 varint32s, t0 and 2 CRCs.
const MAX_CHUNK_HEADER: usize = 2 + 4 * 5 + 4 + 4 + 4;

/// Step 4: the input starts with one whole event chunk (what follows it is ignored: the
/// worker hands in the stretch from its index entry to the next), in stream order;
/// `new_group` is 1 when a keyframe chunk comes between it and the event chunk before it.
/// Outputs its events.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn seek_events(new_group: i32) -> i32 {
    let mut out = Out::default();
    SEEK.with_borrow_mut(|s| match s {
        Some((_, d)) => {
            if new_group != 0 {
                d.new_group();
            }
            // The chunk's header says where it ends: what follows is not read.
            match INPUT.with_borrow(|input| d.decode_events_chunk(input)) {
                Ok(batch) => out.batch(&batch),
                Err(e) => out.messages.push(json!({
                    "type": "damage", "message": format!("an event chunk: {e}"),
                })),
            }
        }
        None => {
            out.messages
                .push(json!({"type": "error", "message": "events before the header"}));
            out.failed = true;
        }
    });
    out.publish()
}

/// Step 5: starts decoding one keyframe group (its bytes then go to `stream_push` and
/// `stream_finish`, from its keyframe chunk on).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn group_begin() -> i32 {
    let header = SEEK.with_borrow(|s| s.as_ref().map(|(h, _)| h.clone()));
    let code = i32::from(header.is_some()) - 1;
    DECODER.with_borrow_mut(|d| *d = header.map(StreamDecoder::with_header));
    Out::default().publish();
    code
}

/// Parses the input as a whole classic BSOR and outputs its info, frames and events.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn bsor_load() -> i32 {
    let mut out = Out::default();
    match INPUT.with_borrow(|input| bsor::parse(input)) {
        Ok(r) => {
            out.messages.push(json!({
                "type": "header", "info": info_json(&r.info), "profile": "bsor",
            }));
            for f in &r.frames {
                out.frame(f);
            }
            out.batch(&EventBatch {
                notes: Records::new(0, r.notes),
                walls: Records::new(0, r.walls),
                heights: Records::new(0, r.heights),
                pauses: Records::new(0, r.pauses),
            });
            out.messages.push(json!({"type": "end"}));
        }
        Err(e) => {
            out.messages
                .push(json!({"type": "error", "message": e.to_string()}));
            out.failed = true;
        }
    }
    out.publish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(name: &str) -> Vec<u8> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto-spec/vectors/");
        std::fs::read(format!("{dir}{name}")).unwrap()
    }

    fn call(input: &[u8], f: extern "C" fn() -> i32) -> (i32, Vec<u8>) {
        INPUT.with_borrow_mut(|i| *i = input.to_vec());
        let code = f();
        (code, OUTPUT.with_borrow(|o| o.clone()))
    }

    #[test]
    fn the_exports_decode_a_vector_and_report_errors_as_text() {
        let (code, out) = call(&vector("synthetic.lossless.bsors"), stream_to_bsor);
        assert_eq!((code, out), (0, vector("synthetic.bsor")));
        let (code, out) = call(&vector("synthetic.bsor"), bsor_check);
        assert_eq!((code, out), (0, vector("synthetic.bsor")));
        let (code, out) = call(b"not a replay", bsor_check);
        assert_eq!(code, -1);
        assert!(!out.is_empty() && std::str::from_utf8(&out).is_ok());
        assert_eq!(input_reserve(3), INPUT.with_borrow_mut(|i| i.as_mut_ptr()));
        assert_eq!(output_len(), out.len());
    }

    /// Everything one decode gave: frame floats, event floats, messages.
    fn collect(code: i32, all: &mut (Vec<f32>, Vec<f32>, Vec<Value>)) -> i32 {
        all.0.extend(FRAMES.with_borrow(|v| v.clone()));
        all.1.extend(EVENTS.with_borrow(|v| v.clone()));
        let text = OUTPUT.with_borrow(|o| o.clone());
        let msgs: Value = serde_json::from_slice(&text).unwrap();
        all.2.extend(msgs.as_array().unwrap().iter().cloned());
        code
    }

    #[test]
    fn the_push_decoder_gives_the_replays_frames_and_events_in_any_pieces() {
        let replay = bsor::parse(&vector("synthetic.bsor")).unwrap();
        let stream = vector("synthetic.lossless.bsors");
        let mut all = Default::default();
        stream_begin();
        for piece in stream.chunks(37) {
            INPUT.with_borrow_mut(|i| *i = piece.to_vec());
            assert_eq!(collect(stream_push(), &mut all), 0);
        }
        assert_eq!(collect(stream_finish(), &mut all), 0);
        let (frames, events, msgs) = all;

        assert_eq!(frames.len(), replay.frames.len() * FRAME_FLOATS);
        for (f, r) in replay.frames.iter().zip(frames.chunks(FRAME_FLOATS)) {
            assert_eq!(r[0].to_bits(), f.time.to_bits());
            assert_eq!(r[1].to_bits(), f.head.position.x.to_bits());
            assert_eq!(r[21].to_bits(), f.right_hand.rotation.w.to_bits());
        }
        let records: Vec<&[f32]> = events.chunks(EVENT_FLOATS).collect();
        let notes: Vec<&&[f32]> = records.iter().filter(|r| r[0] == NOTE).collect();
        assert_eq!(notes.len(), replay.notes.len());
        let walls = records.iter().filter(|r| r[0] == WALL).count();
        assert_eq!(walls, replay.walls.len());
        // The points the records carry, with the multiplier, give the replay's score.
        let points: i64 = notes.iter().map(|r| r[9] as i64).sum();
        let expected: i64 = replay
            .notes
            .iter()
            .filter_map(|n| n.score())
            .map(|s| i64::from(s.total()))
            .sum();
        assert_eq!(points, expected);

        let kinds: Vec<&str> = msgs.iter().map(|m| m["type"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"header"));
        assert_eq!(kinds.last(), Some(&"end"));
        assert!(kinds.contains(&"trailer"));
        let name = replay.info.player_name.to_string_lossy();
        assert_eq!(msgs[0]["info"]["playerName"], Value::String(name));
    }

    fn set(bytes: &[u8]) {
        INPUT.with_borrow_mut(|i| *i = bytes.to_vec());
    }

    #[test]
    fn a_stored_stream_read_by_ranges_gives_its_events_and_a_groups_frames() {
        let replay = bsor::parse(&vector("synthetic.bsor")).unwrap();
        let file = vector("synthetic.compact.bsors");
        let mut all = Default::default();
        set(&file[..10]);
        assert_eq!(seek_header(), 0, "more bytes needed");
        set(&file[..4096.min(file.len())]);
        let hlen = seek_header();
        assert!(hlen > 0);
        set(&file[file.len() - 16..]);
        assert_eq!(collect(seek_footer(), &mut all), 0);
        let index_at = all.2[0]["indexOffset"].as_u64().unwrap() as usize;
        set(&file[index_at..file.len() - 16]);
        let mut all = Default::default();
        assert_eq!(collect(seek_index(), &mut all), 0);
        let entries: Vec<Vec<f64>> = all.2[0]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect()
            })
            .collect();
        let mut all = Default::default();
        let mut new_group = 0;
        for e in &entries {
            match e[0] as u8 {
                1 => new_group = 1,
                3 => {
                    // From the entry to the next, as the worker reads it.
                    let at = e[1] as usize;
                    let next = entries
                        .iter()
                        .map(|x| x[1] as usize)
                        .find(|&o| o > at)
                        .unwrap_or(index_at);
                    set(&file[at..next]);
                    assert_eq!(collect(seek_events(new_group), &mut all), 0);
                    new_group = 0;
                }
                _ => {}
            }
        }
        let notes = all.1.chunks(EVENT_FLOATS).filter(|r| r[0] == NOTE).count();
        assert_eq!(
            notes,
            replay.notes.len(),
            "every note from the event chunks alone"
        );

        // The second keyframe group alone decodes to its frames.
        let keyframes: Vec<&Vec<f64>> = entries.iter().filter(|e| e[0] == 1.0).collect();
        assert!(keyframes.len() >= 2, "the vector has several groups");
        let (from, first) = (keyframes[1][1] as usize, keyframes[1][2] as usize);
        let to = keyframes.get(2).map_or(index_at, |e| e[1] as usize);
        assert_eq!(group_begin(), 0);
        let mut all = Default::default();
        set(&file[from..to]);
        assert_eq!(collect(stream_push(), &mut all), 0);
        assert_eq!(collect(stream_finish(), &mut all), 0);
        let frames: Vec<&[f32]> = all.0.chunks(FRAME_FLOATS).collect();
        assert!(!frames.is_empty());
        let time = replay.frames[first].time;
        assert!(
            (frames[0][0] - time).abs() < 1e-3,
            "{} vs {time}",
            frames[0][0]
        );
    }

    #[test]
    fn the_classic_loader_matches_the_stream_and_a_damaged_stream_says_why() {
        let replay = bsor::parse(&vector("synthetic.bsor")).unwrap();
        let mut all = Default::default();
        INPUT.with_borrow_mut(|i| *i = vector("synthetic.bsor"));
        assert_eq!(collect(bsor_load(), &mut all), 0);
        assert_eq!(all.0.len(), replay.frames.len() * FRAME_FLOATS);
        assert_eq!(
            all.1.len() / EVENT_FLOATS,
            replay.notes.len() + replay.walls.len() + replay.heights.len() + replay.pauses.len()
        );

        let mut bad = vector("synthetic.lossless.bsors");
        bad[0] = b'X';
        let mut all = Default::default();
        stream_begin();
        INPUT.with_borrow_mut(|i| *i = bad);
        assert_eq!(collect(stream_push(), &mut all), -1);
        let last = all.2.last().unwrap();
        assert_eq!(last["type"], "error");
        assert!(!last["message"].as_str().unwrap().is_empty());

        let mut all = Default::default();
        INPUT.with_borrow_mut(|i| *i = b"BSRS but not a replay".to_vec());
        assert_eq!(collect(bsor_load(), &mut all), -1);
    }
}

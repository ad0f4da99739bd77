//! The one BSOR state machine that both parsers drive.
//!
//! [`Decoder::step`] looks at the unconsumed input (a plain byte slice) and either yields the
//! next complete item with the number of bytes it used, or says how many bytes it needs
//! before it can go on. It keeps no input of its own: the whole-buffer parser hands it the
//! rest of the file, the push parser its buffer. Each step is atomic: on "need more" nothing
//! was consumed and the state is unchanged, so a retry with more bytes picks up cleanly.

use std::str;

use super::error::{ErrorKind, ParseError, Section};
use super::model::{
    BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, NoteOutcome, Pause,
    Pose, Quat, RawBool, UnknownEventType, Vec3, Wall,
};

/// The magic number that starts every BSOR file (little endian on disk).
pub const MAGIC: u32 = 0x442d_3d69;

/// Bytes of one frame record.
pub const FRAME_SIZE: usize = 92;
/// Bytes of a note event before its cut info.
pub const NOTE_HEAD_SIZE: usize = 16;
/// Bytes of a note event's cut info.
pub const CUT_SIZE: usize = 72;
/// Bytes of a wall event.
pub const WALL_SIZE: usize = 16;
/// Bytes of a height event.
pub const HEIGHT_SIZE: usize = 8;
/// Bytes of a pause.
pub const PAUSE_SIZE: usize = 12;
/// Bytes of the controller offsets section after its marker.
pub const OFFSETS_SIZE: usize = 56;

/// The longest declared length for which a legacy (UTF-16 count) string is looked for, and
/// the longest next string accepted as evidence. BeatLeader's own decoder treats string
/// lengths over 1000 as garbage, so real files stay far below.
const LEGACY_MAX: usize = 1000;

/// Bounds on what the parsers will buffer or allocate for lengths declared in the input.
///
/// Counts of records need no limit: records are yielded one at a time, and when the end of
/// the input is known a count is checked against the bytes that remain before anything is
/// allocated for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest string field accepted (default 1 MiB).
    pub max_string_bytes: u32,
    /// Longest user-data section accepted (default 64 MiB).
    pub max_user_data_bytes: u32,
    /// Most bytes accepted after the last known section (default 64 MiB).
    pub max_trailing_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_string_bytes: 1 << 20,
            max_user_data_bytes: 64 << 20,
            max_trailing_bytes: 64 << 20,
        }
    }
}

/// One item of a BSOR file, in file order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The info block (magic and version checked).
    Info(Box<Info>),
    /// A per-record section starts, with the count its header declares. When the end of the
    /// input is known the count has been checked against the bytes left; a push parser fed
    /// without a known end cannot check it yet, so do not preallocate from it blindly.
    SectionStart {
        /// Which section.
        section: Section,
        /// The declared count.
        count: u32,
    },
    /// A frame.
    Frame(Frame),
    /// A note event.
    Note(NoteEvent),
    /// A wall event.
    Wall(Wall),
    /// A height change.
    Height(Height),
    /// A pause.
    Pause(Pause),
    /// The optional controller-offsets section.
    ControllerOffsets(ControllerOffsets),
    /// The optional user-data section (possibly empty).
    UserData(Vec<u8>),
    /// Bytes after the last known section.
    Trailing(Vec<u8>),
    /// The input ended cleanly; nothing follows.
    End,
}

/// What [`Decoder::step`] found.
#[derive(Debug)]
pub(crate) enum Step {
    /// An item, and how many input bytes it used.
    Item(Event, usize),
    /// Nothing can be decided before the input holds at least this many bytes.
    NeedMore(usize),
    /// [`Event::End`] was already yielded.
    Finished,
}

/// Why a read stopped.
pub(crate) enum Stop {
    /// The input must hold at least this many bytes (from the start of the slice).
    More(usize),
    /// The input is malformed.
    Fail(ParseError),
}

impl From<ParseError> for Stop {
    fn from(e: ParseError) -> Self {
        Stop::Fail(e)
    }
}

type R<T> = Result<T, Stop>;

/// The field of a fixed-size record that holds byte `at`, and the offset where it starts.
type FieldAt = fn(usize) -> (&'static str, usize);

/// For records made only of 4-byte fields.
fn field4(names: &'static [&'static str], at: usize) -> (&'static str, usize) {
    let i = (at / 4).min(names.len().saturating_sub(1));
    (names.get(i).copied().unwrap_or(""), i * 4)
}

#[derive(Clone, Copy, Debug)]
enum State {
    Header,
    Marker(Section),
    Records {
        section: Section,
        index: u32,
        count: u32,
    },
    /// After the pauses: optional sections whose marker is at least `min`, then trailing
    /// bytes, then the end.
    Optional {
        min: u8,
    },
    End,
    Done,
}

/// The BSOR state machine. See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct Decoder {
    state: State,
    /// Absolute offset of the first byte of the next `step`'s input.
    offset: u64,
    limits: Limits,
    /// A count read before the end of the input was known, still to be checked against
    /// the bytes that remain once it is (so that a push parser reports what the
    /// whole-buffer parser reports).
    unchecked: Option<UncheckedCount>,
}

#[derive(Clone, Copy, Debug)]
struct UncheckedCount {
    section: Section,
    count: u32,
    /// Absolute offset of the count field.
    at: u64,
}

/// A bounds-checked view of the step's input with an error context.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
    eof: bool,
    section: Section,
    record: Option<u32>,
}

impl<'a> Cursor<'a> {
    fn error(&self, kind: ErrorKind, field: &'static str, at: usize) -> Stop {
        Stop::Fail(ParseError {
            kind,
            section: self.section,
            record: self.record,
            field,
            offset: self.base + at as u64,
        })
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// `n` bytes at the cursor, or "need more" / truncated at `field`.
    fn take(&mut self, n: usize, field: &'static str) -> R<&'a [u8]> {
        match self.buf.get(self.pos..).and_then(|rest| rest.get(..n)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.short(n, field, self.pos)),
        }
    }

    fn short(&self, n: usize, field: &'static str, at: usize) -> Stop {
        let need_total = self.pos.saturating_add(n);
        if self.eof {
            let needed = (need_total - self.buf.len()) as u64;
            self.error(ErrorKind::Truncated { needed }, field, at)
        } else {
            Stop::More(need_total)
        }
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> R<&'a [u8; N]> {
        let s = self.take(N, field)?;
        // `take` returned exactly N bytes.
        s.try_into()
            .map_err(|_| self.error(ErrorKind::Truncated { needed: N as u64 }, field, self.pos))
    }

    fn i32(&mut self, field: &'static str) -> R<i32> {
        Ok(i32::from_le_bytes(*self.array::<4>(field)?))
    }

    fn f32(&mut self, field: &'static str) -> R<f32> {
        Ok(f32::from_le_bytes(*self.array::<4>(field)?))
    }

    fn u8(&mut self, field: &'static str) -> R<u8> {
        Ok(self.array::<1>(field)?[0])
    }

    /// A fixed-size record; when the input ends inside it, the error names the field cut
    /// and gives that field's offset.
    fn record<const N: usize>(&mut self, field_at: FieldAt) -> R<&'a [u8; N]> {
        let have = self.remaining().min(N);
        if have < N {
            let (name, start) = field_at(have);
            return Err(self.short(N, name, self.pos + start));
        }
        self.array::<N>("")
    }

    /// A length field: not negative, within `limit`, and (when the end is known) within
    /// the rest of the input.
    fn length(&mut self, field: &'static str, limit: u32) -> R<usize> {
        let at = self.pos;
        let v = self.i32(field)?;
        let n = u32::try_from(v)
            .map_err(|_| self.error(ErrorKind::Negative { value: v }, field, at))?;
        if n > limit {
            let kind = ErrorKind::OverLimit {
                value: u64::from(n),
                limit: u64::from(limit),
            };
            return Err(self.error(kind, field, at));
        }
        if self.eof && n as usize > self.remaining() {
            let kind = ErrorKind::ExceedsInput {
                value: n,
                min_bytes: u64::from(n),
                remaining: self.remaining() as u64,
            };
            return Err(self.error(kind, field, at));
        }
        Ok(n as usize)
    }

    /// A count or length field: not negative, and (when the end is known) not more than the
    /// rest of the input can hold at `min_size` bytes each.
    fn count(&mut self, field: &'static str, min_size: usize) -> R<u32> {
        let at = self.pos;
        let v = self.i32(field)?;
        let n = u32::try_from(v)
            .map_err(|_| self.error(ErrorKind::Negative { value: v }, field, at))?;
        if self.eof {
            let min_bytes = u64::from(n) * min_size as u64;
            let remaining = self.remaining() as u64;
            if min_bytes > remaining {
                return Err(self.error(
                    ErrorKind::ExceedsInput {
                        value: n,
                        min_bytes,
                        remaining,
                    },
                    field,
                    at,
                ));
            }
        }
        Ok(n)
    }
}

fn rd_f32(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn rd_i32(b: &[u8], i: usize) -> i32 {
    i32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn rd_vec3(b: &[u8], i: usize) -> Vec3 {
    Vec3 {
        x: rd_f32(b, i),
        y: rd_f32(b, i + 4),
        z: rd_f32(b, i + 8),
    }
}

fn rd_pose(b: &[u8], i: usize) -> Pose {
    Pose {
        position: rd_vec3(b, i),
        rotation: Quat {
            x: rd_f32(b, i + 12),
            y: rd_f32(b, i + 16),
            z: rd_f32(b, i + 20),
            w: rd_f32(b, i + 24),
        },
    }
}

/// Decodes one frame record.
fn frame_from(b: &[u8; FRAME_SIZE]) -> Frame {
    Frame {
        time: rd_f32(b, 0),
        fps: rd_i32(b, 4),
        head: rd_pose(b, 8),
        left_hand: rd_pose(b, 36),
        right_hand: rd_pose(b, 64),
    }
}

fn cut_from(b: &[u8; CUT_SIZE]) -> CutInfo {
    CutInfo {
        speed_ok: RawBool(b[0]),
        direction_ok: RawBool(b[1]),
        saber_type_ok: RawBool(b[2]),
        was_cut_too_soon: RawBool(b[3]),
        saber_speed: rd_f32(b, 4),
        saber_dir: rd_vec3(b, 8),
        saber_type: rd_i32(b, 20),
        time_deviation: rd_f32(b, 24),
        cut_dir_deviation: rd_f32(b, 28),
        cut_point: rd_vec3(b, 32),
        cut_normal: rd_vec3(b, 44),
        cut_distance_to_center: rd_f32(b, 56),
        cut_angle: rd_f32(b, 60),
        before_cut_rating: rd_f32(b, 64),
        after_cut_rating: rd_f32(b, 68),
    }
}

fn wall_from(b: &[u8; WALL_SIZE]) -> Wall {
    Wall {
        wall_id: rd_i32(b, 0),
        energy: rd_f32(b, 4),
        time: rd_f32(b, 8),
        spawn_time: rd_f32(b, 12),
    }
}

fn height_from(b: &[u8; HEIGHT_SIZE]) -> Height {
    Height {
        height: rd_f32(b, 0),
        time: rd_f32(b, 4),
    }
}

fn pause_from(b: &[u8; PAUSE_SIZE]) -> Pause {
    Pause {
        duration: i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        time: rd_f32(b, 8),
    }
}

fn offsets_from(b: &[u8; OFFSETS_SIZE]) -> ControllerOffsets {
    ControllerOffsets {
        left: rd_pose(b, 0),
        right: rd_pose(b, 28),
    }
}

// Field names by byte position, for errors that say which field the input ended in.
const FRAME_FIELDS: [&str; 23] = [
    "time",
    "fps",
    "head.position.x",
    "head.position.y",
    "head.position.z",
    "head.rotation.x",
    "head.rotation.y",
    "head.rotation.z",
    "head.rotation.w",
    "leftHand.position.x",
    "leftHand.position.y",
    "leftHand.position.z",
    "leftHand.rotation.x",
    "leftHand.rotation.y",
    "leftHand.rotation.z",
    "leftHand.rotation.w",
    "rightHand.position.x",
    "rightHand.position.y",
    "rightHand.position.z",
    "rightHand.rotation.x",
    "rightHand.rotation.y",
    "rightHand.rotation.z",
    "rightHand.rotation.w",
];

const NOTE_FIELDS: [&str; 4] = ["noteID", "eventTime", "spawnTime", "eventType"];

const CUT_BOOLS: [&str; 4] = ["speedOK", "directionOK", "saberTypeOK", "wasCutTooSoon"];

const CUT_FIELDS: [&str; 17] = [
    "saberSpeed",
    "saberDir.x",
    "saberDir.y",
    "saberDir.z",
    "saberType",
    "timeDeviation",
    "cutDirDeviation",
    "cutPoint.x",
    "cutPoint.y",
    "cutPoint.z",
    "cutNormal.x",
    "cutNormal.y",
    "cutNormal.z",
    "cutDistanceToCenter",
    "cutAngle",
    "beforeCutRating",
    "afterCutRating",
];

const WALL_FIELDS: [&str; 4] = ["wallID", "energy", "time", "spawnTime"];

const HEIGHT_FIELDS: [&str; 2] = ["height", "time"];

const OFFSETS_FIELDS: [&str; 14] = [
    "left.position.x",
    "left.position.y",
    "left.position.z",
    "left.rotation.x",
    "left.rotation.y",
    "left.rotation.z",
    "left.rotation.w",
    "right.position.x",
    "right.position.y",
    "right.position.z",
    "right.rotation.x",
    "right.rotation.y",
    "right.rotation.z",
    "right.rotation.w",
];

fn frame_field(at: usize) -> (&'static str, usize) {
    field4(&FRAME_FIELDS, at)
}

fn note_field(at: usize) -> (&'static str, usize) {
    field4(&NOTE_FIELDS, at)
}

fn cut_field(at: usize) -> (&'static str, usize) {
    match CUT_BOOLS.get(at) {
        Some(name) => (name, at),
        None => {
            let (name, start) = field4(&CUT_FIELDS, at - 4);
            (name, start + 4)
        }
    }
}

fn wall_field(at: usize) -> (&'static str, usize) {
    field4(&WALL_FIELDS, at)
}

fn height_field(at: usize) -> (&'static str, usize) {
    field4(&HEIGHT_FIELDS, at)
}

fn pause_field(at: usize) -> (&'static str, usize) {
    if at < 8 {
        ("duration", 0)
    } else {
        ("time", 8)
    }
}

fn offsets_field(at: usize) -> (&'static str, usize) {
    field4(&OFFSETS_FIELDS, at)
}

/// The next section marker after `s`, or `None` after the pauses.
fn next_section(s: Section) -> Option<Section> {
    Some(match s {
        Section::Info => Section::Frames,
        Section::Frames => Section::Notes,
        Section::Notes => Section::Walls,
        Section::Walls => Section::Heights,
        Section::Heights => Section::Pauses,
        _ => return None,
    })
}

/// The fewest bytes one record of a per-record section takes.
fn min_record_size(s: Section) -> usize {
    match s {
        Section::Frames => FRAME_SIZE,
        Section::Notes => NOTE_HEAD_SIZE,
        Section::Walls => WALL_SIZE,
        Section::Heights => HEIGHT_SIZE,
        Section::Pauses => PAUSE_SIZE,
        _ => 1,
    }
}

/// How a string field is read: whether a legacy length may be recovered by looking at the
/// field after it, which must then be another string.
#[derive(Clone, Copy, PartialEq)]
enum NextField {
    String,
    Other,
}

/// True when `b` is UTF-8, or UTF-8 cut short inside its last character: what the declared
/// bytes of a string with a legacy (too small) length field look like.
fn is_utf8_prefix(b: &[u8]) -> bool {
    match str::from_utf8(b) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

impl<'a> Cursor<'a> {
    fn string(&mut self, field: &'static str, next: NextField, limits: &Limits) -> R<BsorString> {
        let at = self.pos;
        let declared = self.length(field, limits.max_string_bytes)?;
        let length_field = i32::from_le_bytes([
            self.buf[at],
            self.buf[at + 1],
            self.buf[at + 2],
            self.buf[at + 3],
        ]);
        let len = if next == NextField::String && (1..=LEGACY_MAX).contains(&declared) {
            self.legacy_extent(declared, limits)?
        } else {
            declared
        };
        let bytes = self.take(len, field)?.to_vec();
        Ok(BsorString {
            bytes,
            length_field,
        })
    }

    /// The real byte length of a string whose length field says `declared` and which is
    /// followed by another string field.
    ///
    /// Older mods wrote the UTF-16 code-unit count, which is smaller than the UTF-8 byte
    /// count for non-ASCII text (at most three times smaller). The string really ends at
    /// `declared + k` for the smallest `k` in `0..=2*declared` (and within the string
    /// limit) where the bytes so far are whole UTF-8 and what follows reads as a plausible
    /// string: a non-negative length, at most the string limit for `k = 0` and at most 1000
    /// otherwise, with that many bytes after it that are UTF-8 or UTF-8 cut inside its last
    /// character (the next string may have a legacy length too). If no `k` fits, the
    /// length field is taken as it is. Files whose strings are UTF-8 with byte-count
    /// lengths always stop at `k = 0`. Whatever is chosen, the length field and the bytes
    /// are kept, so the file is rewritten exactly.
    fn legacy_extent(&self, declared: usize, limits: &Limits) -> R<usize> {
        let start = self.pos;
        let max_string = limits.max_string_bytes as usize;
        let rest = &self.buf[start..];
        let window = &rest[..rest.len().min(3 * declared)];
        let valid = match str::from_utf8(window) {
            Ok(s) => s,
            // `valid_up_to` is a char boundary, so this cannot fail; fall back to "".
            Err(e) => str::from_utf8(&window[..e.valid_up_to()]).unwrap_or(""),
        };
        for end in declared..=(3 * declared).min(max_string) {
            if end > rest.len() {
                if self.eof {
                    break; // no longer candidate fits in the input either
                }
                return Err(Stop::More(start + end + 4));
            }
            if end > valid.len() || !valid.is_char_boundary(end) {
                continue;
            }
            let next = &rest[end..];
            let Some(len) = next.get(..4) else {
                if self.eof {
                    continue;
                }
                return Err(Stop::More(start + end + 4));
            };
            let len = i32::from_le_bytes([len[0], len[1], len[2], len[3]]);
            let Ok(len) = usize::try_from(len) else {
                continue;
            };
            // The declared extent (k = 0) is trusted with any next string up to the limit;
            // a recovered one needs a short next string as evidence.
            if len
                > if end == declared {
                    max_string
                } else {
                    LEGACY_MAX
                }
            {
                continue;
            }
            match next.get(4..4 + len) {
                Some(s) if is_utf8_prefix(s) => return Ok(end),
                Some(_) => continue,
                None if self.eof => continue,
                None => return Err(Stop::More(start + end + 4 + len)),
            }
        }
        Ok(declared)
    }

    fn info(&mut self, limits: &Limits) -> R<Info> {
        use NextField::{Other, String as Str};
        Ok(Info {
            version: self.string("version", Str, limits)?,
            game_version: self.string("gameVersion", Str, limits)?,
            timestamp: self.string("timestamp", Str, limits)?,
            player_id: self.string("playerID", Str, limits)?,
            player_name: self.string("playerName", Str, limits)?,
            platform: self.string("platform", Str, limits)?,
            tracking_system: self.string("trackingSystem", Str, limits)?,
            hmd: self.string("hmd", Str, limits)?,
            controller: self.string("controller", Str, limits)?,
            hash: self.string("hash", Str, limits)?,
            song_name: self.string("songName", Str, limits)?,
            mapper: self.string("mapper", Str, limits)?,
            difficulty: self.string("difficulty", Other, limits)?,
            score: self.i32("score")?,
            mode: self.string("mode", Str, limits)?,
            environment: self.string("environment", Str, limits)?,
            modifiers: self.string("modifiers", Other, limits)?,
            jump_distance: self.f32("jumpDistance")?,
            left_handed: RawBool(self.u8("leftHanded")?),
            height: self.f32("height")?,
            start_time: self.f32("startTime")?,
            fail_time: self.f32("failTime")?,
            speed: self.f32("speed")?,
        })
    }

    fn note(&mut self) -> R<NoteEvent> {
        let head = *self.record::<NOTE_HEAD_SIZE>(note_field)?;
        let event_type = rd_i32(&head, 12);
        let outcome = match UnknownEventType::new(event_type) {
            Some(unknown) => NoteOutcome::Unknown(unknown),
            None if event_type == 2 => NoteOutcome::Miss,
            None if event_type == 3 => NoteOutcome::Bomb,
            None => {
                let cut = cut_from(self.record::<CUT_SIZE>(cut_field)?);
                if event_type == 0 {
                    NoteOutcome::Good(cut)
                } else {
                    NoteOutcome::Bad(cut)
                }
            }
        };
        Ok(NoteEvent {
            note_id: rd_i32(&head, 0),
            event_time: rd_f32(&head, 4),
            spawn_time: rd_f32(&head, 8),
            outcome,
        })
    }
}

/// Decodes one frame record (the inverse of [`super::encode_frame`]).
pub fn decode_frame(b: &[u8; FRAME_SIZE]) -> Frame {
    frame_from(b)
}

/// Decodes the controller offsets (section 6, without its marker).
pub fn decode_controller_offsets(b: &[u8; OFFSETS_SIZE]) -> ControllerOffsets {
    offsets_from(b)
}

/// Decodes one wall record.
pub fn decode_wall(b: &[u8; WALL_SIZE]) -> Wall {
    wall_from(b)
}

/// Decodes one height record.
pub fn decode_height(b: &[u8; HEIGHT_SIZE]) -> Height {
    height_from(b)
}

/// Decodes one pause record.
pub fn decode_pause(b: &[u8; PAUSE_SIZE]) -> Pause {
    pause_from(b)
}

/// Decodes one note record from the start of `b` (16 bytes, or 88 for good and bad cuts):
/// the note and its size, or `None` if `b` is too short.
pub fn decode_note(b: &[u8]) -> Option<(NoteEvent, usize)> {
    let mut c = Cursor {
        buf: b,
        pos: 0,
        base: 0,
        eof: true,
        section: Section::Notes,
        record: None,
    };
    c.note().ok().map(|n| (n, c.pos))
}

/// Parses a bare info block (the bytes after section marker 0, as [`super::encode_info`]
/// writes them) that fills `bytes` exactly. Offsets in errors are from the block's start.
pub fn parse_info(bytes: &[u8], limits: &Limits) -> Result<Info, ParseError> {
    let mut c = Cursor {
        buf: bytes,
        pos: 0,
        base: 0,
        eof: true,
        section: Section::Info,
        record: None,
    };
    let info = match c.info(limits) {
        Ok(info) => info,
        Err(Stop::Fail(e)) => return Err(e),
        Err(Stop::More(n)) => {
            let kind = ErrorKind::Truncated {
                needed: n.saturating_sub(bytes.len()) as u64,
            };
            return Err(ParseError {
                kind,
                section: Section::Info,
                record: None,
                field: "",
                offset: bytes.len() as u64,
            });
        }
    };
    if c.pos != bytes.len() {
        let kind = ErrorKind::Unconsumed {
            extra: (bytes.len() - c.pos) as u64,
        };
        return Err(ParseError {
            kind,
            section: Section::Info,
            record: None,
            field: "",
            offset: c.pos as u64,
        });
    }
    Ok(info)
}

impl Decoder {
    pub(crate) fn new(limits: Limits) -> Self {
        Decoder {
            state: State::Header,
            offset: 0,
            limits,
            unchecked: None,
        }
    }

    /// True once [`Event::End`] has been yielded.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Absolute offset of the next unconsumed byte.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    fn cursor<'a>(&self, buf: &'a [u8], eof: bool, section: Section) -> Cursor<'a> {
        Cursor {
            buf,
            pos: 0,
            base: self.offset,
            eof,
            section,
            record: None,
        }
    }

    /// Decodes the next item from `input`, the unconsumed bytes. `eof` says that `input`
    /// runs to the end of the file: missing bytes are then errors, not "need more".
    pub(crate) fn step(&mut self, input: &[u8], eof: bool) -> Result<Step, ParseError> {
        if eof {
            if let Some(u) = self.unchecked.take() {
                self.check_late(u, input.len())?;
            }
        }
        loop {
            match self.step_inner(input, eof) {
                Ok(Some((event, used))) => {
                    self.offset += used as u64;
                    return Ok(Step::Item(event, used));
                }
                Ok(None) if matches!(self.state, State::Done) => return Ok(Step::Finished),
                Ok(None) => {} // a change of state that consumed nothing: go on
                Err(Stop::More(n)) => return Ok(Step::NeedMore(n)),
                Err(Stop::Fail(e)) => return Err(e),
            }
        }
    }

    // Long: one match arm per parser state (a state machine reads best as one match).
    fn step_inner(&mut self, input: &[u8], eof: bool) -> R<Option<(Event, usize)>> {
        match self.state {
            State::Header => {
                // Magic, version, the info marker and the info block are one step, so that
                // every step either yields an event or consumes nothing.
                let mut c = self.cursor(input, eof, Section::Header);
                let magic = u32::from_le_bytes(*c.array::<4>("magic")?);
                if magic != MAGIC {
                    return Err(c.error(ErrorKind::BadMagic { found: magic }, "magic", 0));
                }
                let version = c.u8("version")?;
                if version != 1 {
                    return Err(c.error(
                        ErrorKind::UnsupportedVersion { found: version },
                        "version",
                        4,
                    ));
                }
                c.section = Section::Info;
                let marker = c.u8("marker")?;
                if marker != 0 {
                    let kind = ErrorKind::WrongMarker {
                        expected: 0,
                        found: marker,
                    };
                    return Err(c.error(kind, "marker", 5));
                }
                let info = c.info(&self.limits)?;
                self.state = State::Marker(Section::Frames);
                Ok(Some((Event::Info(Box::new(info)), c.pos)))
            }
            State::Marker(section) => {
                let mut c = self.cursor(input, eof, section);
                let marker = c.u8("marker")?;
                let expected = section.marker().unwrap_or(0);
                if marker != expected {
                    return Err(c.error(
                        ErrorKind::WrongMarker {
                            expected,
                            found: marker,
                        },
                        "marker",
                        0,
                    ));
                }
                let count = c.count("count", min_record_size(section))?;
                self.unchecked = (!eof).then_some(UncheckedCount {
                    section,
                    count,
                    at: self.offset + 1,
                });
                self.state = State::Records {
                    section,
                    index: 0,
                    count,
                };
                Ok(Some((Event::SectionStart { section, count }, c.pos)))
            }
            State::Records {
                section,
                index,
                count,
            } => {
                if index == count {
                    self.unchecked = None;
                    self.state = match next_section(section) {
                        Some(s) => State::Marker(s),
                        None => State::Optional { min: 6 },
                    };
                    return Ok(None);
                }
                let mut c = self.cursor(input, eof, section);
                c.record = Some(index);
                let event = match section {
                    Section::Frames => Event::Frame(frame_from(c.record(frame_field)?)),
                    Section::Notes => Event::Note(c.note()?),
                    Section::Walls => Event::Wall(wall_from(c.record(wall_field)?)),
                    Section::Heights => Event::Height(height_from(c.record(height_field)?)),
                    _ => Event::Pause(pause_from(c.record(pause_field)?)),
                };
                self.state = State::Records {
                    section,
                    index: index + 1,
                    count,
                };
                Ok(Some((event, c.pos)))
            }
            State::Optional { min } => self.optional(input, eof, min),
            State::End => {
                self.state = State::Done;
                Ok(Some((Event::End, 0)))
            }
            State::Done => Ok(None),
        }
    }

    /// The error for a "need `need` bytes" answer when the input (`have` bytes) is all
    /// there is. The cursor already turns short reads at the end into precise errors; this
    /// is the fallback that keeps a caller from looping.
    pub(crate) fn truncated_at_end(&self, need: usize, have: usize) -> ParseError {
        ParseError {
            kind: ErrorKind::Truncated {
                needed: need.saturating_sub(have) as u64,
            },
            section: Section::Trailing,
            record: None,
            field: "",
            offset: self.offset + have as u64,
        }
    }

    /// The count check of [`Cursor::count`], for a count read before the end was known.
    fn check_late(&self, u: UncheckedCount, input_len: usize) -> Result<(), ParseError> {
        let total = self.offset + input_len as u64;
        let remaining = total.saturating_sub(u.at + 4);
        let min_bytes = u64::from(u.count) * min_record_size(u.section) as u64;
        if min_bytes > remaining {
            return Err(ParseError {
                kind: ErrorKind::ExceedsInput {
                    value: u.count,
                    min_bytes,
                    remaining,
                },
                section: u.section,
                record: None,
                field: "count",
                offset: u.at,
            });
        }
        Ok(())
    }

    fn optional(&mut self, input: &[u8], eof: bool, min: u8) -> R<Option<(Event, usize)>> {
        let Some(&marker) = input.first() else {
            if eof {
                self.state = State::End;
                return Ok(None);
            }
            return Err(Stop::More(1));
        };
        if marker == 6 && min <= 6 {
            let mut c = self.cursor(input, eof, Section::ControllerOffsets);
            c.pos = 1;
            let offsets = offsets_from(c.record(offsets_field)?);
            self.state = State::Optional { min: 7 };
            return Ok(Some((Event::ControllerOffsets(offsets), c.pos)));
        }
        if marker == 7 && min <= 7 {
            let mut c = self.cursor(input, eof, Section::UserData);
            c.pos = 1;
            let len = c.length("length", self.limits.max_user_data_bytes)?;
            let data = c.take(len, "data")?.to_vec();
            self.state = State::Optional { min: 8 };
            return Ok(Some((Event::UserData(data), c.pos)));
        }
        if input.len() as u64 > self.limits.max_trailing_bytes {
            let c = self.cursor(input, eof, Section::Trailing);
            return Err(c.error(
                ErrorKind::OverLimit {
                    value: input.len() as u64,
                    limit: self.limits.max_trailing_bytes,
                },
                "bytes",
                0,
            ));
        }
        if !eof {
            // Trailing bytes run to the end of the input, which is not known yet.
            return Err(Stop::More(input.len() + 1));
        }
        self.state = State::End;
        Ok(Some((Event::Trailing(input.to_vec()), input.len())))
    }

    /// Decodes as many whole frames as `input` holds into `out`, while the state is inside
    /// the frames section. Returns the bytes used (0 when not in the frames section).
    ///
    /// This is the whole-buffer parser's fast path: the same record decoder as [`step`],
    /// without an event per frame.
    ///
    /// [`step`]: Decoder::step
    /// Steps over as many whole frames as `input` holds, while the state is inside the
    /// frames section, without decoding them. Returns the bytes skipped (0 when not in the
    /// frames section).
    pub(crate) fn frames_skip(&mut self, input: &[u8]) -> usize {
        let State::Records {
            section: Section::Frames,
            index,
            count,
        } = self.state
        else {
            return 0;
        };
        let n = ((count - index) as usize).min(input.len() / FRAME_SIZE);
        self.state = State::Records {
            section: Section::Frames,
            index: index + n as u32,
            count,
        };
        let used = n * FRAME_SIZE;
        self.offset += used as u64;
        used
    }

    pub(crate) fn frames_bulk(&mut self, input: &[u8], out: &mut Vec<Frame>) -> usize {
        let State::Records {
            section: Section::Frames,
            index,
            count,
        } = self.state
        else {
            return 0;
        };
        let n = ((count - index) as usize).min(input.len() / FRAME_SIZE);
        out.extend(
            input
                .chunks_exact(FRAME_SIZE)
                .take(n)
                .filter_map(|c| c.try_into().ok())
                .map(frame_from),
        );
        self.state = State::Records {
            section: Section::Frames,
            index: index + n as u32,
            count,
        };
        let used = n * FRAME_SIZE;
        self.offset += used as u64;
        used
    }
}

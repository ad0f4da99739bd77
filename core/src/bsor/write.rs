//! Writing BSOR: the exact inverse of parsing.

use std::io;

use super::decode::{CUT_SIZE, HEIGHT_SIZE, NOTE_HEAD_SIZE, OFFSETS_SIZE, PAUSE_SIZE, WALL_SIZE};
pub use super::decode::{FRAME_SIZE, MAGIC};
use super::error::Section;
use super::model::{
    BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, Pause, Pose, Replay,
    Vec3, Wall,
};

/// A replay that BSOR cannot hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Trailing bytes whose first byte would be read back as an optional section's marker
    /// (6 before any optional section, 7 before the user data), so the file would not read
    /// back as the same replay.
    #[error(
        "trailing bytes start with {first}, which a reader takes for section {first}'s marker"
    )]
    AmbiguousTrailing {
        /// The first trailing byte.
        first: u8,
    },
    /// A section with more records (or bytes) than an `int` count can say.
    #[error("section {section} has {count} entries, more than a BSOR count can hold")]
    TooLong {
        /// Which section.
        section: Section,
        /// How many records or bytes it has.
        count: usize,
    },
}

impl From<WriteError> for io::Error {
    fn from(e: WriteError) -> Self {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

/// Fills a fixed-size record field by field.
struct Put<'a, const N: usize> {
    b: &'a mut [u8; N],
    i: usize,
}

impl<const N: usize> Put<'_, N> {
    fn bytes<const M: usize>(&mut self, v: [u8; M]) {
        self.b[self.i..self.i + M].copy_from_slice(&v);
        self.i += M;
    }
    fn f32(&mut self, v: f32) {
        self.bytes(v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.bytes(v.to_le_bytes());
    }
    fn vec3(&mut self, v: &Vec3) {
        self.f32(v.x);
        self.f32(v.y);
        self.f32(v.z);
    }
    fn pose(&mut self, p: &Pose) {
        self.vec3(&p.position);
        self.f32(p.rotation.x);
        self.f32(p.rotation.y);
        self.f32(p.rotation.z);
        self.f32(p.rotation.w);
    }
}

/// One frame record, as on disk.
pub fn encode_frame(f: &Frame) -> [u8; FRAME_SIZE] {
    let mut b = [0u8; FRAME_SIZE];
    let mut p = Put { b: &mut b, i: 0 };
    p.f32(f.time);
    p.i32(f.fps);
    p.pose(&f.head);
    p.pose(&f.left_hand);
    p.pose(&f.right_hand);
    b
}

fn encode_cut(c: &CutInfo) -> [u8; CUT_SIZE] {
    let mut b = [0u8; CUT_SIZE];
    let mut p = Put { b: &mut b, i: 0 };
    p.bytes([
        c.speed_ok.0,
        c.direction_ok.0,
        c.saber_type_ok.0,
        c.was_cut_too_soon.0,
    ]);
    p.f32(c.saber_speed);
    p.vec3(&c.saber_dir);
    p.i32(c.saber_type);
    p.f32(c.time_deviation);
    p.f32(c.cut_dir_deviation);
    p.vec3(&c.cut_point);
    p.vec3(&c.cut_normal);
    p.f32(c.cut_distance_to_center);
    p.f32(c.cut_angle);
    p.f32(c.before_cut_rating);
    p.f32(c.after_cut_rating);
    b
}

/// One note event, as on disk (16 bytes, or 88 with cut info).
pub fn encode_note(n: &NoteEvent, out: &mut Vec<u8>) {
    let mut b = [0u8; NOTE_HEAD_SIZE];
    let mut p = Put { b: &mut b, i: 0 };
    p.i32(n.note_id);
    p.f32(n.event_time);
    p.f32(n.spawn_time);
    p.i32(n.outcome.event_type());
    out.extend_from_slice(&b);
    if let Some(cut) = n.outcome.cut() {
        out.extend_from_slice(&encode_cut(cut));
    }
}

/// One wall event, as on disk.
pub fn encode_wall(w: &Wall) -> [u8; WALL_SIZE] {
    let mut b = [0u8; WALL_SIZE];
    let mut p = Put { b: &mut b, i: 0 };
    p.i32(w.wall_id);
    p.f32(w.energy);
    p.f32(w.time);
    p.f32(w.spawn_time);
    b
}

/// One height event, as on disk.
pub fn encode_height(h: &Height) -> [u8; HEIGHT_SIZE] {
    let mut b = [0u8; HEIGHT_SIZE];
    let mut p = Put { b: &mut b, i: 0 };
    p.f32(h.height);
    p.f32(h.time);
    b
}

/// One pause, as on disk.
pub fn encode_pause(x: &Pause) -> [u8; PAUSE_SIZE] {
    let mut b = [0u8; PAUSE_SIZE];
    let mut p = Put { b: &mut b, i: 0 };
    p.bytes(x.duration.to_le_bytes());
    p.f32(x.time);
    b
}

/// The controller offsets, as on disk (without the section marker).
pub fn encode_controller_offsets(o: &ControllerOffsets) -> [u8; OFFSETS_SIZE] {
    let mut b = [0u8; OFFSETS_SIZE];
    let mut p = Put { b: &mut b, i: 0 };
    p.pose(&o.left);
    p.pose(&o.right);
    b
}

fn put_string(s: &BsorString, out: &mut Vec<u8>) {
    out.extend_from_slice(&s.length_field.to_le_bytes());
    out.extend_from_slice(&s.bytes);
}

/// The info block, as on disk (without the section marker).
pub fn encode_info(i: &Info, out: &mut Vec<u8>) {
    for s in [
        &i.version,
        &i.game_version,
        &i.timestamp,
        &i.player_id,
        &i.player_name,
        &i.platform,
        &i.tracking_system,
        &i.hmd,
        &i.controller,
        &i.hash,
        &i.song_name,
        &i.mapper,
        &i.difficulty,
    ] {
        put_string(s, out);
    }
    out.extend_from_slice(&i.score.to_le_bytes());
    for s in [&i.mode, &i.environment, &i.modifiers] {
        put_string(s, out);
    }
    out.extend_from_slice(&i.jump_distance.to_le_bytes());
    out.push(i.left_handed.0);
    for f in [i.height, i.start_time, i.fail_time, i.speed] {
        out.extend_from_slice(&f.to_le_bytes());
    }
}

fn section_header(section: Section, count: usize, out: &mut Vec<u8>) -> Result<(), WriteError> {
    let n = i32::try_from(count).map_err(|_| WriteError::TooLong { section, count })?;
    out.push(section.marker().unwrap_or(0));
    out.extend_from_slice(&n.to_le_bytes());
    Ok(())
}

fn encoded_len(r: &Replay) -> usize {
    let strings: usize = [
        &r.info.version,
        &r.info.game_version,
        &r.info.timestamp,
        &r.info.player_id,
        &r.info.player_name,
        &r.info.platform,
        &r.info.tracking_system,
        &r.info.hmd,
        &r.info.controller,
        &r.info.hash,
        &r.info.song_name,
        &r.info.mapper,
        &r.info.difficulty,
        &r.info.mode,
        &r.info.environment,
        &r.info.modifiers,
    ]
    .iter()
    .map(|s| 4 + s.bytes.len())
    .sum();
    let notes: usize = r
        .notes
        .iter()
        .map(|n| {
            NOTE_HEAD_SIZE
                + if n.outcome.cut().is_some() {
                    CUT_SIZE
                } else {
                    0
                }
        })
        .sum();
    6 + strings
        + 25
        + 5 * 5
        + r.frames.len() * FRAME_SIZE
        + notes
        + r.walls.len() * WALL_SIZE
        + r.heights.len() * HEIGHT_SIZE
        + r.pauses.len() * PAUSE_SIZE
        + r.controller_offsets.map_or(0, |_| 1 + OFFSETS_SIZE)
        + r.user_data.as_ref().map_or(0, |d| 5 + d.len())
        + r.trailing.len()
}

/// Appends the replay's bytes to `out`.
pub fn write(r: &Replay, out: &mut Vec<u8>) -> Result<(), WriteError> {
    check_trailing(r)?;
    out.reserve(encoded_len(r));
    write_head(&r.info, r.frames.len(), out)?;
    for f in &r.frames {
        out.extend_from_slice(&encode_frame(f));
    }
    write_tail(r, out)
}

/// Appends what comes before the frame records: the magic, the version, the info block and
/// the frames section's header for `frames` frames. With [`encode_frame`] and
/// [`write_tail`], a writer can put out a replay whose frames it never holds all at once.
pub fn write_head(info: &Info, frames: usize, out: &mut Vec<u8>) -> Result<(), WriteError> {
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(1);
    out.push(0);
    encode_info(info, out);
    section_header(Section::Frames, frames, out)
}

/// Appends everything after the frame records: the notes, walls, heights and pauses
/// sections, the optional sections and the trailing bytes of `r` (its info and frames are
/// not looked at).
pub fn write_tail(r: &Replay, out: &mut Vec<u8>) -> Result<(), WriteError> {
    check_trailing(r)?;
    section_header(Section::Notes, r.notes.len(), out)?;
    for n in &r.notes {
        encode_note(n, out);
    }
    section_header(Section::Walls, r.walls.len(), out)?;
    for w in &r.walls {
        out.extend_from_slice(&encode_wall(w));
    }
    section_header(Section::Heights, r.heights.len(), out)?;
    for h in &r.heights {
        out.extend_from_slice(&encode_height(h));
    }
    section_header(Section::Pauses, r.pauses.len(), out)?;
    for p in &r.pauses {
        out.extend_from_slice(&encode_pause(p));
    }
    if let Some(o) = &r.controller_offsets {
        out.push(6);
        out.extend_from_slice(&encode_controller_offsets(o));
    }
    if let Some(d) = &r.user_data {
        section_header(Section::UserData, d.len(), out)?;
        out.extend_from_slice(d);
    }
    out.extend_from_slice(&r.trailing);
    Ok(())
}

/// Trailing bytes must not read back as an optional section's marker.
fn check_trailing(r: &Replay) -> Result<(), WriteError> {
    if let Some(&first) = r.trailing.first() {
        let lowest_open = match (&r.controller_offsets, &r.user_data) {
            (_, Some(_)) => 8,
            (Some(_), None) => 7,
            (None, None) => 6,
        };
        if (lowest_open..=7).contains(&first) {
            return Err(WriteError::AmbiguousTrailing { first });
        }
    }
    Ok(())
}

/// The replay's bytes.
///
/// ```
/// use bsor_stream_core::{bsor, synth};
///
/// let replay = synth::replay(synth::Settings {
///     seed: 7,
///     seconds: 3.0,
///     fps: 60,
/// });
/// let bytes = bsor::to_vec(&replay)?;
/// assert_eq!(bytes[..4], bsor::MAGIC.to_le_bytes());
/// assert_eq!(bsor::parse(&bytes)?.notes, replay.notes);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn to_vec(r: &Replay) -> Result<Vec<u8>, WriteError> {
    let mut out = Vec::new();
    write(r, &mut out)?;
    Ok(out)
}

/// Writes the replay to `w` in one call.
pub fn write_to<W: io::Write>(r: &Replay, mut w: W) -> io::Result<()> {
    w.write_all(&to_vec(r)?)
}

//! A replay as columns: what a load fills with the GIL released, then gives to NumPy.

use std::path::Path;

use bsor_stream_core::bsor::{
    self, BsorString, Frame, Height, Info, NoteEvent, NoteId, Pause, Replay, Wall, FRAME_SIZE,
};
use bsor_stream_core::stream::{StreamDecoder, StreamItem, STREAM_MAGIC};
use bsor_stream_core::transcode::ReplayCollector;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::array;

/// Floats per frame in `poses`: head, left hand, right hand × x, y, z, qx, qy, qz, qw.
pub(crate) const POSE_FLOATS: usize = 21;

/// Why a load failed: what, and where (section and byte offset when known).
#[derive(Debug)]
pub(crate) struct LoadError {
    pub message: String,
    pub section: Option<String>,
    pub offset: Option<u64>,
    pub path: Option<String>,
}

impl LoadError {
    fn new(message: String, section: Option<&str>, offset: Option<u64>) -> Self {
        LoadError {
            message,
            section: section.map(str::to_owned),
            offset,
            path: None,
        }
    }

    pub fn io(p: &Path, e: &std::io::Error) -> Self {
        LoadError {
            message: format!("cannot read {}: {e}", p.display()),
            section: None,
            offset: None,
            path: Some(p.display().to_string()),
        }
    }

    pub fn internal(p: &Path) -> Self {
        LoadError {
            message: format!(
                "{}: the reader failed (a bug: please report it)",
                p.display()
            ),
            section: None,
            offset: None,
            path: Some(p.display().to_string()),
        }
    }

    pub fn in_file(mut self, p: &Path) -> Self {
        self.message = format!("{}: {}", p.display(), self.message);
        self.path = Some(p.display().to_string());
        self
    }
}

impl From<bsor::ParseError> for LoadError {
    fn from(e: bsor::ParseError) -> Self {
        LoadError::new(format!("BSOR: {e}"), Some(e.section.name()), Some(e.offset))
    }
}

#[derive(Default)]
pub(crate) struct FrameCols {
    pub time: Vec<f32>,
    pub fps: Vec<i32>,
    pub poses: Vec<f32>,
}

/// The note columns, each named once: the struct, its allocation and its Python dict.
macro_rules! note_columns {
    ($($f:ident: $t:ty),* $(,)?) => {
        #[derive(Default)]
        pub(crate) struct NoteCols {
            $(pub $f: Vec<$t>,)*
        }

        impl NoteCols {
            /// Empty columns with room for `n` notes each.
            fn with_capacity(n: usize) -> Self {
                NoteCols {
                    $($f: Vec::with_capacity(n),)*
                }
            }

            /// The columns as NumPy arrays in a dict, by their names.
            fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                let d = PyDict::new(py);
                $(d.set_item(stringify!($f), array(py, self.$f, &[0])?)?;)*
                Ok(d)
            }
        }
    };
}

note_columns!(
    note_id: i32,
    event_time: f32,
    spawn_time: f32,
    event_type: i32,
    scoring_type: i32,
    line: i32,
    layer: i32,
    color: i32,
    cut_direction: i32,
    speed_ok: u8,
    direction_ok: u8,
    saber_type_ok: u8,
    was_cut_too_soon: u8,
    saber_speed: f32,
    saber_dir_x: f32,
    saber_dir_y: f32,
    saber_dir_z: f32,
    saber_type: i32,
    time_deviation: f32,
    cut_dir_deviation: f32,
    cut_point_x: f32,
    cut_point_y: f32,
    cut_point_z: f32,
    cut_normal_x: f32,
    cut_normal_y: f32,
    cut_normal_z: f32,
    cut_distance_to_center: f32,
    cut_angle: f32,
    before_cut_rating: f32,
    after_cut_rating: f32,
);

impl NoteCols {
    fn from_notes(notes: &[NoteEvent]) -> Self {
        let mut c = NoteCols::with_capacity(notes.len());
        for note in notes {
            let id = NoteId::split(note.note_id);
            c.note_id.push(note.note_id);
            c.event_time.push(note.event_time);
            c.spawn_time.push(note.spawn_time);
            c.event_type.push(note.outcome.event_type());
            c.scoring_type.push(id.scoring_type);
            c.line.push(id.line_index);
            c.layer.push(id.note_line_layer);
            c.color.push(id.color_type);
            c.cut_direction.push(id.cut_direction);
            let cut = note.outcome.cut();
            let f = |g: fn(&bsor::CutInfo) -> f32| cut.map_or(f32::NAN, g);
            c.speed_ok.push(cut.map_or(0, |c| c.speed_ok.0));
            c.direction_ok.push(cut.map_or(0, |c| c.direction_ok.0));
            c.saber_type_ok.push(cut.map_or(0, |c| c.saber_type_ok.0));
            c.was_cut_too_soon
                .push(cut.map_or(0, |c| c.was_cut_too_soon.0));
            c.saber_speed.push(f(|c| c.saber_speed));
            c.saber_dir_x.push(f(|c| c.saber_dir.x));
            c.saber_dir_y.push(f(|c| c.saber_dir.y));
            c.saber_dir_z.push(f(|c| c.saber_dir.z));
            c.saber_type.push(cut.map_or(-1, |c| c.saber_type));
            c.time_deviation.push(f(|c| c.time_deviation));
            c.cut_dir_deviation.push(f(|c| c.cut_dir_deviation));
            c.cut_point_x.push(f(|c| c.cut_point.x));
            c.cut_point_y.push(f(|c| c.cut_point.y));
            c.cut_point_z.push(f(|c| c.cut_point.z));
            c.cut_normal_x.push(f(|c| c.cut_normal.x));
            c.cut_normal_y.push(f(|c| c.cut_normal.y));
            c.cut_normal_z.push(f(|c| c.cut_normal.z));
            c.cut_distance_to_center
                .push(f(|c| c.cut_distance_to_center));
            c.cut_angle.push(f(|c| c.cut_angle));
            c.before_cut_rating.push(f(|c| c.before_cut_rating));
            c.after_cut_rating.push(f(|c| c.after_cut_rating));
        }
        c
    }
}

/// A whole load's result.
pub(crate) struct Columns {
    pub format: &'static str,
    pub info: Info,
    pub frames: Option<FrameCols>,
    pub frame_count: u64,
    pub notes: NoteCols,
    pub walls: Vec<Wall>,
    pub heights: Vec<Height>,
    pub pauses: Vec<Pause>,
    pub controller_offsets: Option<[f32; 14]>,
    pub user_data: Option<Vec<u8>>,
    pub trailing: Vec<u8>,
    pub complete: bool,
    pub profile: Option<String>,
    pub damage: Vec<(u64, String)>,
}

fn pose_floats(p: &bsor::Pose) -> [f32; 7] {
    [
        p.position.x,
        p.position.y,
        p.position.z,
        p.rotation.x,
        p.rotation.y,
        p.rotation.z,
        p.rotation.w,
    ]
}

impl FrameCols {
    /// From BSOR frame records (92 bytes each): time, fps, then the 21 pose floats in the
    /// order `poses` keeps them.
    pub fn from_records(records: &[u8]) -> Self {
        let mut c = FrameCols::default();
        c.push_records(records);
        c
    }

    /// Adds BSOR frame records.
    pub fn push_records(&mut self, records: &[u8]) {
        let n = records.len() / FRAME_SIZE;
        self.time.reserve(n);
        self.fps.reserve(n);
        self.poses.reserve(n * POSE_FLOATS);
        let f = |b: &[u8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for r in records.chunks_exact(FRAME_SIZE) {
            self.time.push(f(&r[0..4]));
            self.fps.push(i32::from_le_bytes([r[4], r[5], r[6], r[7]]));
            self.poses.extend(r[8..].chunks_exact(4).map(f));
        }
    }

    pub fn from_frames(frames: &[Frame]) -> Self {
        let n = frames.len();
        let mut c = FrameCols {
            time: Vec::with_capacity(n),
            fps: Vec::with_capacity(n),
            poses: Vec::with_capacity(n * POSE_FLOATS),
        };
        for fr in frames {
            c.time.push(fr.time);
            c.fps.push(fr.fps);
            c.poses.extend(pose_floats(&fr.head));
            c.poses.extend(pose_floats(&fr.left_hand));
            c.poses.extend(pose_floats(&fr.right_hand));
        }
        c
    }
}

impl Columns {
    pub fn from_replay(
        format: &'static str,
        r: Replay,
        frames: Option<FrameCols>,
        frame_count: u64,
    ) -> Self {
        Columns {
            format,
            notes: NoteCols::from_notes(&r.notes),
            info: r.info,
            frames,
            frame_count,
            walls: r.walls,
            heights: r.heights,
            pauses: r.pauses,
            controller_offsets: r.controller_offsets.map(|o| {
                let mut a = [0f32; 14];
                a[..7].copy_from_slice(&pose_floats(&o.left));
                a[7..].copy_from_slice(&pose_floats(&o.right));
                a
            }),
            user_data: r.user_data,
            trailing: r.trailing,
            complete: true,
            profile: None,
            damage: Vec::new(),
        }
    }

    pub fn into_py_dict<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("format", self.format)?;
        let (info, lengths) = info_dict(py, &self.info)?;
        d.set_item("info", info)?;
        d.set_item("length_fields", lengths)?;
        d.set_item("frame_count", self.frame_count)?;
        if let Some(f) = self.frames {
            let fd = PyDict::new(py);
            let n = f.time.len();
            fd.set_item("time", array(py, f.time, &[n])?)?;
            fd.set_item("fps", array(py, f.fps, &[n])?)?;
            fd.set_item("poses", array(py, f.poses, &[n, 3, 7])?)?;
            d.set_item("frames", fd)?;
        } else {
            d.set_item("frames", py.None())?;
        }
        d.set_item("notes", self.notes.into_py(py)?)?;

        let walls = PyDict::new(py);
        let w = &self.walls;
        walls.set_item(
            "wall_id",
            array(py, w.iter().map(|w| w.wall_id).collect(), &[0])?,
        )?;
        let ids: Vec<bsor::WallId> = w.iter().map(|w| w.id()).collect();
        walls.set_item(
            "line",
            array(py, ids.iter().map(|i| i.line_index).collect(), &[0])?,
        )?;
        walls.set_item(
            "obstacle_type",
            array(py, ids.iter().map(|i| i.obstacle_type).collect(), &[0])?,
        )?;
        walls.set_item(
            "width",
            array(py, ids.iter().map(|i| i.width).collect(), &[0])?,
        )?;
        walls.set_item(
            "energy",
            array(py, w.iter().map(|w| w.energy).collect(), &[0])?,
        )?;
        walls.set_item("time", array(py, w.iter().map(|w| w.time).collect(), &[0])?)?;
        walls.set_item(
            "spawn_time",
            array(py, w.iter().map(|w| w.spawn_time).collect(), &[0])?,
        )?;
        d.set_item("walls", walls)?;

        let heights = PyDict::new(py);
        let h = &self.heights;
        heights.set_item(
            "height",
            array(py, h.iter().map(|h| h.height).collect(), &[0])?,
        )?;
        heights.set_item("time", array(py, h.iter().map(|h| h.time).collect(), &[0])?)?;
        d.set_item("heights", heights)?;

        let pauses = PyDict::new(py);
        let p = &self.pauses;
        pauses.set_item(
            "duration",
            array(py, p.iter().map(|p| p.duration).collect(), &[0])?,
        )?;
        pauses.set_item("time", array(py, p.iter().map(|p| p.time).collect(), &[0])?)?;
        d.set_item("pauses", pauses)?;

        match self.controller_offsets {
            Some(o) => d.set_item("controller_offsets", array(py, o.to_vec(), &[2, 7])?)?,
            None => d.set_item("controller_offsets", py.None())?,
        }
        match self.user_data {
            Some(u) => d.set_item("user_data", PyBytes::new(py, &u))?,
            None => d.set_item("user_data", py.None())?,
        }
        d.set_item("trailing", PyBytes::new(py, &self.trailing))?;
        d.set_item("complete", self.complete)?;
        d.set_item("profile", self.profile)?;
        let damage = PyList::empty(py);
        for (offset, what) in self.damage {
            damage.append((offset, what))?;
        }
        d.set_item("damage", damage)?;
        Ok(d)
    }
}

/// The info block as a dict with the BSOR names, and the length fields that disagree with
/// their strings' bytes (legacy UTF-16 counts), kept so the strings are written back as read.
fn info_dict<'py>(py: Python<'py>, i: &Info) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let d = PyDict::new(py);
    let lengths = PyDict::new(py);
    let s = |name: &str, v: &BsorString| -> PyResult<()> {
        match v.as_str() {
            Some(text) => d.set_item(name, text)?,
            None => d.set_item(name, PyBytes::new(py, &v.bytes))?,
        }
        if v.has_legacy_length() {
            lengths.set_item(name, (v.length_field, v.bytes.len()))?;
        }
        Ok(())
    };
    s("version", &i.version)?;
    s("gameVersion", &i.game_version)?;
    s("timestamp", &i.timestamp)?;
    s("playerID", &i.player_id)?;
    s("playerName", &i.player_name)?;
    s("platform", &i.platform)?;
    s("trackingSystem", &i.tracking_system)?;
    s("hmd", &i.hmd)?;
    s("controller", &i.controller)?;
    s("hash", &i.hash)?;
    s("songName", &i.song_name)?;
    s("mapper", &i.mapper)?;
    s("difficulty", &i.difficulty)?;
    d.set_item("score", i.score)?;
    s("mode", &i.mode)?;
    s("environment", &i.environment)?;
    s("modifiers", &i.modifiers)?;
    d.set_item("jumpDistance", i.jump_distance)?;
    match i.left_handed.0 {
        0 | 1 => d.set_item("leftHanded", i.left_handed.get())?,
        b => d.set_item("leftHanded", b)?,
    }
    d.set_item("height", i.height)?;
    d.set_item("startTime", i.start_time)?;
    d.set_item("failTime", i.fail_time)?;
    d.set_item("speed", i.speed)?;
    Ok((d, lengths))
}

const BSOR_MAGIC: [u8; 4] = bsor::MAGIC.to_le_bytes();

/// Reads any of the three formats, by its first bytes.
pub(crate) fn load(bytes: &[u8], events_only: bool) -> Result<Columns, LoadError> {
    if bytes.starts_with(&BSOR_MAGIC) {
        return load_bsor(bytes, events_only);
    }
    if bytes.starts_with(&STREAM_MAGIC) {
        return load_stream(bytes, events_only);
    }
    #[cfg(feature = "xror")]
    if bsor_stream_core::xror::looks_like_xror(bytes) {
        return load_xror(bytes, events_only);
    }
    let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
    Err(LoadError::new(
        format!(
            "not a BSOR, .bsors or XROR file (it starts with {})",
            if head.is_empty() {
                "nothing: it is empty".to_owned()
            } else {
                head.join(" ")
            }
        ),
        Some("header"),
        Some(0),
    ))
}

fn load_bsor(bytes: &[u8], events_only: bool) -> Result<Columns, LoadError> {
    let (r, range) = bsor::parse_skipping_frames(bytes, bsor::Limits::default())?;
    let records = &bytes[range];
    let count = (records.len() / FRAME_SIZE) as u64;
    let frames = (!events_only).then(|| FrameCols::from_records(records));
    Ok(Columns::from_replay("bsor", r, frames, count))
}

/// The read buffer of [`load_bsor_file`]: whole frame records, about 64 KiB. Small enough
/// to stay in the cache between the kernel's copy and the columns' parse, and below glibc's
/// mmap threshold (128 KiB), so that each load takes it from the heap, where the last load
/// freed it, rather than mapping and faulting in fresh pages (a 1 MiB buffer and a growing
/// carry vector did: python/bench.py's page faults per file, docs/benchmarks.md).
const READ_BUF: usize = (64 << 10) / FRAME_SIZE * FRAME_SIZE;

/// Reads a BSOR file without holding its frame section in memory: the bytes before the
/// frame records, the records [`READ_BUF`] bytes at a time into the columns (allocated
/// once at their final size, or stepped over for `events_only`), then the rest, parsed with
/// the frame count set to 0 as one buffer so that the core checks it all. `None` when the
/// file is not a BSOR or does not read this way (then the caller reads it whole, which
/// gives the exact error).
pub(crate) fn load_bsor_file(path: &Path, events_only: bool) -> Option<Columns> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let size = f.metadata().ok()?.len();
    let mut buf = vec![0u8; READ_BUF];
    // The head: up to the frame records, found by the push parser.
    let mut head = Vec::new();
    let mut parser = bsor::PushParser::new();
    let (start, count) = 'found: loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        if head.is_empty() && !buf[..n].starts_with(&BSOR_MAGIC) {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
        parser.push(&buf[..n]);
        while let Some(event) = parser.next_event().ok()? {
            if let bsor::Event::SectionStart {
                section: bsor::Section::Frames,
                count,
            } = event
            {
                break 'found (usize::try_from(parser.offset()).ok()?, count as usize);
            }
        }
        if head.len() > 64 << 20 {
            return None;
        }
    };
    let frames_len = count.checked_mul(FRAME_SIZE)?;
    let end = start.checked_add(frames_len)?;
    if (end as u64) > size || start < 4 {
        return None;
    }
    let mut frames = None;
    if !events_only {
        let mut c = FrameCols {
            time: Vec::with_capacity(count),
            fps: Vec::with_capacity(count),
            poses: Vec::with_capacity(count.checked_mul(POSE_FLOATS)?),
        };
        // The records the head already holds, then the rest of them through the buffer:
        // each read lands behind the piece of a record the last one ended with.
        let have = head.len().min(end) - start;
        let whole = have / FRAME_SIZE * FRAME_SIZE;
        c.push_records(&head[start..start + whole]);
        let mut tail = have - whole;
        buf[..tail].copy_from_slice(&head[start + whole..start + have]);
        f.seek(SeekFrom::Start((start + have) as u64)).ok()?;
        let mut left = frames_len - have;
        while left > 0 {
            let n = (buf.len() - tail).min(left);
            f.read_exact(&mut buf[tail..tail + n]).ok()?;
            left -= n;
            let filled = tail + n;
            let whole = filled / FRAME_SIZE * FRAME_SIZE;
            c.push_records(&buf[..whole]);
            buf.copy_within(whole..filled, 0);
            tail = filled - whole;
        }
        if tail != 0 || c.time.len() != count {
            return None;
        }
        frames = Some(c);
    }
    // Everything else, behind the head with its frame count set to 0.
    let mut rest = head;
    rest.truncate(start);
    rest[start - 4..start].copy_from_slice(&0i32.to_le_bytes());
    rest.reserve_exact(usize::try_from(size - end as u64).ok()?);
    f.seek(SeekFrom::Start(end as u64)).ok()?;
    f.read_to_end(&mut rest).ok()?;
    let (r, _) = bsor::parse_skipping_frames(&rest, bsor::Limits::default()).ok()?;
    Some(Columns::from_replay("bsor", r, frames, count as u64))
}

fn load_stream(bytes: &[u8], events_only: bool) -> Result<Columns, LoadError> {
    let mut d = if events_only {
        StreamDecoder::events_only()
    } else {
        StreamDecoder::new().bsor_records()
    };
    d.push(bytes);
    d.finish();
    let mut c = ReplayCollector::counting();
    let mut frames = FrameCols::default();
    let mut profile = None;
    let mut frame_count = 0u64;
    let stream_err = |e: bsor_stream_core::stream::StreamError| {
        let offset = match &e {
            bsor_stream_core::stream::StreamError::Header(_) => Some(0),
            bsor_stream_core::stream::StreamError::CriticalChunk { offset, .. } => Some(*offset),
            _ => None,
        };
        let section = if offset == Some(0) {
            "stream header"
        } else {
            "chunk"
        };
        LoadError::new(format!(".bsors: {e}"), Some(section), offset)
    };
    loop {
        let item = d.next_item().map_err(stream_err)?;
        let Some(item) = item else { break };
        match &item {
            StreamItem::Header(h) => profile = Some(h.settings.profile.to_string()),
            StreamItem::FrameRecords { records, .. } => frames.push_records(records),
            StreamItem::Trailer(t) => frame_count = t.counts.frames,
            _ => {}
        }
        c.apply(item);
    }
    let (r, recovery) = c.finish(d.stats());
    let frames = (!events_only).then_some(frames);
    if !events_only {
        frame_count = recovery.frames;
    }
    let mut cols = Columns::from_replay("bsors", r, frames, frame_count);
    cols.complete = recovery.complete || (events_only && recovery.damage.is_empty());
    cols.profile = profile;
    cols.damage = recovery
        .damage
        .iter()
        .map(|d| (d.offset, d.kind.to_string()))
        .collect();
    Ok(cols)
}

#[cfg(feature = "xror")]
fn load_xror(bytes: &[u8], events_only: bool) -> Result<Columns, LoadError> {
    let r = bsor_stream_core::xror::parse(bytes)
        .map_err(|e| LoadError::new(format!("XROR: {e}"), Some(e.section()), e.offset()))?;
    let count = r.frames.len() as u64;
    let frames = (!events_only).then(|| FrameCols::from_frames(&r.frames));
    let mut r = r;
    r.frames = Vec::new();
    Ok(Columns::from_replay("xror", r, frames, count))
}

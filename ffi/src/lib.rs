//! The C ABI of the bsor-stream recorder runtime, for game mods (C++ on Quest, C# on PC).
//!
//! Everything here is a thin layer over [`bsor_stream::recorder`]: plain C structs are
//! copied into the library's types, errors become codes plus a per-thread last-error
//! message, and every entry point catches panics so that none unwinds into the game. This
//! crate is the only place in the project with `unsafe`: each block says why it is sound.
//! The header `include/bsor_stream.h` is generated from this file by cbindgen.

#![warn(missing_docs)]

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bsor_stream::bsor::{
    BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, NoteOutcome, Pause,
    Pose, Quat, RawBool, UnknownEventType, Vec3, Wall,
};
use bsor_stream::recorder::{
    Config, LiveConfig, LogLevel, OnFull, Push, Recorder, SinkState, Status,
};
use bsor_stream::stream::{Profile, Settings};

/// Success.
pub const BSRS_OK: i32 = 0;
/// The ring was full and the record was dropped (counted in the status).
pub const BSRS_DROPPED: i32 = 1;
/// The ring was full and the record was not taken (back-pressure mode): try again later.
pub const BSRS_FULL: i32 = 2;
/// `bsrs_recorder_wait` timed out: the background thread is still working.
pub const BSRS_TIMEOUT: i32 = 3;
/// The recorder is finished and takes no more records.
pub const BSRS_CLOSED: i32 = -1;
/// A required pointer was NULL.
pub const BSRS_ERR_NULL: i32 = -2;
/// An argument is out of range; see `bsrs_last_error`.
pub const BSRS_ERR_INVALID: i32 = -3;
/// The recorder could not start; see `bsrs_last_error`.
pub const BSRS_ERR_START: i32 = -4;
/// A Rust panic was caught (a bug): the handle should not be used again but may be freed.
pub const BSRS_ERR_PANIC: i32 = -5;

/// Frame coding profile: every float bit-exact.
pub const BSRS_PROFILE_LOSSLESS: u32 = 0;
/// Frame coding profile: positions within 0.1 mm, rotations within 0.02 degrees.
pub const BSRS_PROFILE_FINE: u32 = 1;
/// Frame coding profile: positions within 1 mm, rotations within 0.2 degrees.
pub const BSRS_PROFILE_COMPACT: u32 = 2;

/// A full ring drops the record and counts it.
pub const BSRS_ON_FULL_DROP: u32 = 0;
/// A full ring refuses the record with BSRS_FULL.
pub const BSRS_ON_FULL_BACK_PRESSURE: u32 = 1;

/// Sink state: not configured.
pub const BSRS_SINK_OFF: u32 = 0;
/// Sink state: working.
pub const BSRS_SINK_RUNNING: u32 = 1;
/// Sink state: failed (see `bsrs_last_error` or the log); the other sinks go on.
pub const BSRS_SINK_FAILED: u32 = 2;
/// Sink state: finished and complete.
pub const BSRS_SINK_DONE: u32 = 3;

/// A position, in metres.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsVec3 {
    /// x
    pub x: f32,
    /// y
    pub y: f32,
    /// z
    pub z: f32,
}

/// A rotation quaternion (passed on as it is, unit or not).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsQuat {
    /// x
    pub x: f32,
    /// y
    pub y: f32,
    /// z
    pub z: f32,
    /// w
    pub w: f32,
}

/// A tracked device's pose.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsPose {
    /// Position.
    pub position: BsrsVec3,
    /// Rotation.
    pub rotation: BsrsQuat,
}

/// One frame: song time, the game's frame rate, and the three poses.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsFrame {
    /// Song time in seconds; frames come in song order.
    pub time: f32,
    /// Frames per second as the game reports it.
    pub fps: i32,
    /// Head.
    pub head: BsrsPose,
    /// Left hand.
    pub left_hand: BsrsPose,
    /// Right hand.
    pub right_hand: BsrsPose,
}

/// The cut info of a good or bad cut (BSOR's NoteCutInfo).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsCutInfo {
    /// bool as a byte (kept as given).
    pub speed_ok: u8,
    /// bool as a byte.
    pub direction_ok: u8,
    /// bool as a byte.
    pub saber_type_ok: u8,
    /// bool as a byte.
    pub was_cut_too_soon: u8,
    /// Saber speed.
    pub saber_speed: f32,
    /// Saber direction.
    pub saber_dir: BsrsVec3,
    /// 0 left, 1 right.
    pub saber_type: i32,
    /// Time deviation.
    pub time_deviation: f32,
    /// Cut direction deviation in degrees.
    pub cut_dir_deviation: f32,
    /// Cut point.
    pub cut_point: BsrsVec3,
    /// Cut plane normal.
    pub cut_normal: BsrsVec3,
    /// Distance of the cut from the note's centre.
    pub cut_distance_to_center: f32,
    /// Cut angle.
    pub cut_angle: f32,
    /// Swing rating before the cut, 0..1.
    pub before_cut_rating: f32,
    /// Swing rating after the cut, 0..1.
    pub after_cut_rating: f32,
}

/// A note event. `cut` is read only for event types 0 (good cut) and 1 (bad cut); 2 is a
/// miss, 3 a bomb; other types are recorded as they are, without cut info.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsNoteEvent {
    /// The note's id (BeatLeader's encoding of scoring type, line, layer, colour, direction).
    pub note_id: i32,
    /// Song time of the event.
    pub event_time: f32,
    /// Song time at which the note spawned.
    pub spawn_time: f32,
    /// 0 good cut, 1 bad cut, 2 miss, 3 bomb.
    pub event_type: i32,
    /// Cut info, for types 0 and 1.
    pub cut: BsrsCutInfo,
}

/// A wall event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsWall {
    /// The wall's id.
    pub wall_id: i32,
    /// Energy after the event.
    pub energy: f32,
    /// Song time of the event.
    pub time: f32,
    /// Song time at which the wall spawned.
    pub spawn_time: f32,
}

/// An automatic height change.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsHeight {
    /// The new height.
    pub height: f32,
    /// Song time.
    pub time: f32,
}

/// A pause.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsPause {
    /// Duration in seconds.
    pub duration: i64,
    /// Song time at which it started.
    pub time: f32,
}

/// Controller offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsControllerOffsets {
    /// Left controller.
    pub left: BsrsPose,
    /// Right controller.
    pub right: BsrsPose,
}

/// The info block. Strings are NUL-terminated and copied during the call; NULL is an empty
/// string. Bytes are kept as given (UTF-8 expected).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BsrsInfo {
    /// Mod version.
    pub version: *const c_char,
    /// Game version.
    pub game_version: *const c_char,
    /// Unix time of the play, as text.
    pub timestamp: *const c_char,
    /// Platform id of the player.
    pub player_id: *const c_char,
    /// Player name.
    pub player_name: *const c_char,
    /// Platform (steam, oculus...).
    pub platform: *const c_char,
    /// Tracking system.
    pub tracking_system: *const c_char,
    /// Headset.
    pub hmd: *const c_char,
    /// Controller.
    pub controller: *const c_char,
    /// Map hash.
    pub hash: *const c_char,
    /// Song name.
    pub song_name: *const c_char,
    /// Mapper.
    pub mapper: *const c_char,
    /// Difficulty name.
    pub difficulty: *const c_char,
    /// Score (0 at the start; the final score at finish).
    pub score: i32,
    /// Game mode.
    pub mode: *const c_char,
    /// Environment.
    pub environment: *const c_char,
    /// Modifiers, comma-separated.
    pub modifiers: *const c_char,
    /// Note jump distance.
    pub jump_distance: f32,
    /// Left-handed (bool as a byte).
    pub left_handed: u8,
    /// Player height.
    pub height: f32,
    /// Song start time.
    pub start_time: f32,
    /// Song time of the fail, 0 if none.
    pub fail_time: f32,
    /// Song speed.
    pub speed: f32,
}

/// Receives the recorder's log messages, on a background thread: `level` 1 error, 2
/// warning, 3 info; `message` is NUL-terminated UTF-8, valid during the call only.
pub type BsrsLogFn = Option<extern "C" fn(user: *mut c_void, level: i32, message: *const c_char)>;

/// How to record. Start from `bsrs_config_default`. Paths and strings are NUL-terminated
/// and copied by `bsrs_recorder_start`; NULL means "no such sink".
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BsrsConfig {
    /// BSRS_PROFILE_*.
    pub profile: u32,
    /// A keyframe at least every this many seconds of song time (1 by default).
    pub keyframe_seconds: f32,
    /// A chunk every this many seconds of song time (0.1 by default; 0: only at keyframes).
    pub flush_seconds: f32,
    /// Ring capacity in records (8192 by default).
    pub queue_capacity: u32,
    /// BSRS_ON_FULL_*.
    pub on_full: u32,
    /// Non-zero: fdatasync the stream file after each chunk.
    pub sync_each_chunk: u8,
    /// When no frame comes for this many seconds of wall time (a pause), the open chunk
    /// goes out anyway (0.1 by default). 0 turns this off: chunk boundaries then depend on
    /// song time alone, and the same pushes give the same bytes.
    pub idle_flush_seconds: f32,
    /// The `.bsors` file, written chunk by chunk.
    pub stream_path: *const c_char,
    /// The classic `.bsor` file, written at finish.
    pub classic_path: *const c_char,
    /// The relay's TCP address (`host:port`) for live publishing.
    pub live_addr: *const c_char,
    /// Session name for live publishing.
    pub live_session: *const c_char,
    /// Token for live publishing.
    pub live_token: *const c_char,
    /// Bytes kept for the relay while it is away (8 MiB by default).
    pub live_buffer_bytes: u64,
    /// Log callback, or NULL.
    pub log: BsrsLogFn,
    /// Passed to `log` as it is.
    pub log_user: *mut c_void,
}

/// Progress and sink states.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BsrsStatus {
    /// Records the ring took.
    pub accepted: u64,
    /// Records dropped on a full ring.
    pub dropped: u64,
    /// Records refused on a full ring (back-pressure).
    pub refused: u64,
    /// Records encoded by the background.
    pub encoded: u64,
    /// Stream bytes produced.
    pub stream_bytes: u64,
    /// Chunks the relay acknowledged.
    pub live_acked: u64,
    /// BSRS_SINK_* of the `.bsors` file.
    pub stream_file: u32,
    /// BSRS_SINK_* of the live publisher.
    pub live: u32,
    /// BSRS_SINK_* of the classic file.
    pub classic: u32,
    /// Non-zero once the background thread has ended.
    pub ended: u8,
}

/// An opaque recorder handle.
pub struct BsrsRecorder {
    inner: Recorder,
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_error(msg: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = msg);
}

/// Runs `f`, turning a panic into BSRS_ERR_PANIC (with its message as the last error).
fn guard(f: impl FnOnce() -> i32) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error(format!("internal error (panic): {msg}"));
            BSRS_ERR_PANIC
        }
    }
}

/// The bytes of a C string; NULL is empty.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn c_bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        &[]
    } else {
        // SAFETY: the caller guarantees a NUL-terminated string valid for the call.
        unsafe { CStr::from_ptr(p) }.to_bytes()
    }
}

/// # Safety
/// As [`c_bytes`].
unsafe fn c_string(p: *const c_char) -> BsorString {
    // SAFETY: forwarded from the caller.
    let bytes = unsafe { c_bytes(p) }.to_vec();
    BsorString {
        length_field: i32::try_from(bytes.len()).unwrap_or(i32::MAX),
        bytes,
    }
}

/// # Safety
/// As [`c_bytes`].
unsafe fn c_text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: forwarded from the caller.
    Some(String::from_utf8_lossy(unsafe { c_bytes(p) }).into_owned())
}

fn vec3(v: BsrsVec3) -> Vec3 {
    Vec3 {
        x: v.x,
        y: v.y,
        z: v.z,
    }
}

fn pose(p: BsrsPose) -> Pose {
    Pose {
        position: vec3(p.position),
        rotation: Quat {
            x: p.rotation.x,
            y: p.rotation.y,
            z: p.rotation.z,
            w: p.rotation.w,
        },
    }
}

fn frame(f: &BsrsFrame) -> Frame {
    Frame {
        time: f.time,
        fps: f.fps,
        head: pose(f.head),
        left_hand: pose(f.left_hand),
        right_hand: pose(f.right_hand),
    }
}

fn cut(c: &BsrsCutInfo) -> CutInfo {
    CutInfo {
        speed_ok: RawBool(c.speed_ok),
        direction_ok: RawBool(c.direction_ok),
        saber_type_ok: RawBool(c.saber_type_ok),
        was_cut_too_soon: RawBool(c.was_cut_too_soon),
        saber_speed: c.saber_speed,
        saber_dir: vec3(c.saber_dir),
        saber_type: c.saber_type,
        time_deviation: c.time_deviation,
        cut_dir_deviation: c.cut_dir_deviation,
        cut_point: vec3(c.cut_point),
        cut_normal: vec3(c.cut_normal),
        cut_distance_to_center: c.cut_distance_to_center,
        cut_angle: c.cut_angle,
        before_cut_rating: c.before_cut_rating,
        after_cut_rating: c.after_cut_rating,
    }
}

fn note(n: &BsrsNoteEvent) -> NoteEvent {
    let outcome = match n.event_type {
        0 => NoteOutcome::Good(cut(&n.cut)),
        1 => NoteOutcome::Bad(cut(&n.cut)),
        2 => NoteOutcome::Miss,
        3 => NoteOutcome::Bomb,
        t => UnknownEventType::new(t).map_or(NoteOutcome::Miss, NoteOutcome::Unknown),
    };
    NoteEvent {
        note_id: n.note_id,
        event_time: n.event_time,
        spawn_time: n.spawn_time,
        outcome,
    }
}

/// # Safety
/// Every string pointer in `i` is NULL or a NUL-terminated string valid for the call.
unsafe fn info(i: &BsrsInfo) -> Info {
    // SAFETY (each call below): the caller guarantees the strings, as documented on
    // `BsrsInfo`.
    unsafe {
        Info {
            version: c_string(i.version),
            game_version: c_string(i.game_version),
            timestamp: c_string(i.timestamp),
            player_id: c_string(i.player_id),
            player_name: c_string(i.player_name),
            platform: c_string(i.platform),
            tracking_system: c_string(i.tracking_system),
            hmd: c_string(i.hmd),
            controller: c_string(i.controller),
            hash: c_string(i.hash),
            song_name: c_string(i.song_name),
            mapper: c_string(i.mapper),
            difficulty: c_string(i.difficulty),
            score: i.score,
            mode: c_string(i.mode),
            environment: c_string(i.environment),
            modifiers: c_string(i.modifiers),
            jump_distance: i.jump_distance,
            left_handed: RawBool(i.left_handed),
            height: i.height,
            start_time: i.start_time,
            fail_time: i.fail_time,
            speed: i.speed,
        }
    }
}

fn push_code(p: Push) -> i32 {
    match p {
        Push::Queued => BSRS_OK,
        Push::Dropped => BSRS_DROPPED,
        Push::Full => BSRS_FULL,
        Push::Closed => BSRS_CLOSED,
    }
}

fn sink_code(s: SinkState) -> u32 {
    match s {
        SinkState::Off => BSRS_SINK_OFF,
        SinkState::Running => BSRS_SINK_RUNNING,
        SinkState::Failed => BSRS_SINK_FAILED,
        SinkState::Done => BSRS_SINK_DONE,
    }
}

fn status_out(s: &Status) -> BsrsStatus {
    if let Some(e) = &s.last_error {
        set_error(e.clone());
    }
    BsrsStatus {
        accepted: s.accepted,
        dropped: s.dropped,
        refused: s.refused,
        encoded: s.encoded,
        stream_bytes: s.stream_bytes,
        live_acked: s.live_acked,
        stream_file: sink_code(s.stream_file),
        live: sink_code(s.live),
        classic: sink_code(s.classic),
        ended: u8::from(s.ended),
    }
}

/// Fills `out` with the defaults: lossless, keyframes every 1 s, a chunk every 0.1 s, a
/// ring of 8192 records that drops when full, no sinks.
///
/// Thread safety: any thread.
///
/// # Safety
/// `out` is NULL or points to writable memory for a `BsrsConfig`.
#[no_mangle]
pub unsafe extern "C" fn bsrs_config_default(out: *mut BsrsConfig) -> i32 {
    guard(|| {
        if out.is_null() {
            return BSRS_ERR_NULL;
        }
        let c = BsrsConfig {
            profile: BSRS_PROFILE_LOSSLESS,
            keyframe_seconds: 1.0,
            flush_seconds: 0.1,
            queue_capacity: 8192,
            on_full: BSRS_ON_FULL_DROP,
            sync_each_chunk: 0,
            idle_flush_seconds: 0.1,
            stream_path: std::ptr::null(),
            classic_path: std::ptr::null(),
            live_addr: std::ptr::null(),
            live_session: std::ptr::null(),
            live_token: std::ptr::null(),
            live_buffer_bytes: 8 << 20,
            log: None,
            log_user: std::ptr::null_mut(),
        };
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(c) };
        BSRS_OK
    })
}

/// The log callback and its user pointer, as a Rust closure.
struct CLog {
    f: extern "C" fn(*mut c_void, i32, *const c_char),
    user: *mut c_void,
}

// SAFETY: the C caller hands over `user` for use from the recorder's background thread
// (documented on `bsrs_recorder_start`); the pointer is only passed back to its callback.
unsafe impl Send for CLog {}
// SAFETY: as for Send; the recorder calls the callback from one thread at a time.
unsafe impl Sync for CLog {}

impl CLog {
    fn call(&self, level: LogLevel, msg: &str) {
        let text = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        (self.f)(self.user, level as i32, text.as_ptr());
    }
}

/// # Safety
/// The pointers in `c` follow `BsrsConfig`'s documentation.
unsafe fn config(c: &BsrsConfig) -> Result<Config, String> {
    let profile = match c.profile {
        BSRS_PROFILE_LOSSLESS => Profile::Lossless,
        BSRS_PROFILE_FINE => Profile::Fine,
        BSRS_PROFILE_COMPACT => Profile::Compact,
        p => return Err(format!("profile {p} is not a BSRS_PROFILE_*")),
    };
    let on_full = match c.on_full {
        BSRS_ON_FULL_DROP => OnFull::Drop,
        BSRS_ON_FULL_BACK_PRESSURE => OnFull::BackPressure,
        p => return Err(format!("on_full {p} is not a BSRS_ON_FULL_*")),
    };
    let idle_flush = match c.idle_flush_seconds {
        0.0 => None,
        s if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f32(s)),
        s => {
            return Err(format!(
                "idle_flush_seconds {s} is not a positive number or 0"
            ))
        }
    };
    let mut settings = Settings::live(profile);
    settings.keyframe_seconds = c.keyframe_seconds;
    settings.flush_seconds = c.flush_seconds;
    // SAFETY (the calls below): the caller guarantees the strings, as documented on
    // `BsrsConfig`.
    let (stream, classic, addr, session, token) = unsafe {
        (
            c_text(c.stream_path),
            c_text(c.classic_path),
            c_text(c.live_addr),
            c_text(c.live_session),
            c_text(c.live_token),
        )
    };
    let live = match (addr, session) {
        (Some(addr), Some(session)) => {
            let mut l = LiveConfig::new(&addr, &session, &token.unwrap_or_default());
            l.buffer_bytes = usize::try_from(c.live_buffer_bytes).unwrap_or(usize::MAX);
            Some(l)
        }
        (None, None) => None,
        _ => return Err("live_addr and live_session go together".into()),
    };
    let log = c.log.map(|f| {
        let l = CLog {
            f,
            user: c.log_user,
        };
        Arc::new(move |level: LogLevel, msg: &str| l.call(level, msg))
            as bsor_stream::recorder::LogFn
    });
    Ok(Config {
        settings,
        queue_capacity: c.queue_capacity as usize,
        on_full,
        stream_file: stream.map(PathBuf::from),
        sync_each_chunk: c.sync_each_chunk != 0,
        idle_flush,
        classic_file: classic.map(PathBuf::from),
        live,
        log,
        ..Config::default()
    })
}

/// Starts a recorder with the info known at the start of the song, and its background
/// thread. On success `*out` holds the handle, to be freed with `bsrs_recorder_free`.
/// A sink that cannot open (a path that cannot be created) does not fail the start: it
/// shows as BSRS_SINK_FAILED in the status, and the others go on.
///
/// The log callback, if any, is called from the recorder's background threads, with
/// `log_user`, until `bsrs_recorder_free` returns.
///
/// Thread safety: any thread.
///
/// # Safety
/// `info` and `config` point to valid structs whose strings are NULL or NUL-terminated;
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bsrs_recorder_start(
    info: *const BsrsInfo,
    config: *const BsrsConfig,
    out: *mut *mut BsrsRecorder,
) -> i32 {
    guard(|| {
        if info.is_null() || config.is_null() || out.is_null() {
            set_error("bsrs_recorder_start: NULL argument".into());
            return BSRS_ERR_NULL;
        }
        // SAFETY: not NULL; the caller guarantees valid structs with valid strings.
        let (info, config) = unsafe { (self::info(&*info), self::config(&*config)) };
        let config = match config {
            Ok(c) => c,
            Err(e) => {
                set_error(e);
                return BSRS_ERR_INVALID;
            }
        };
        match Recorder::start(info, config) {
            Ok(inner) => {
                let handle = Box::into_raw(Box::new(BsrsRecorder { inner }));
                // SAFETY: `out` is not NULL and the caller guarantees it is writable.
                unsafe { out.write(handle) };
                BSRS_OK
            }
            Err(e) => {
                set_error(e.to_string());
                BSRS_ERR_START
            }
        }
    })
}

/// The recorder behind a handle, or the error code for a NULL one.
///
/// # Safety
/// `r` is NULL or a live handle from `bsrs_recorder_start` that no other thread is using.
unsafe fn with<'a>(r: *mut BsrsRecorder) -> Option<&'a mut Recorder> {
    // SAFETY: the caller guarantees a live handle used by this thread alone.
    unsafe { r.as_mut() }.map(|r| &mut r.inner)
}

/// One push: a live handle and a record, or BSRS_ERR_NULL.
///
/// # Safety
/// `r` is NULL or a live handle used by this thread alone; `x` is NULL or valid for the
/// call.
unsafe fn push<T>(
    r: *mut BsrsRecorder,
    x: *const T,
    f: impl FnOnce(&mut Recorder, &T) -> Push,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees a live handle and a valid record.
        match unsafe { (with(r), x.as_ref()) } {
            (Some(r), Some(x)) => push_code(f(r, x)),
            _ => BSRS_ERR_NULL,
        }
    })
}

/// Queues a frame (frames come in song order).
///
/// Returns BSRS_OK, BSRS_DROPPED or BSRS_FULL (ring full, see `on_full`), BSRS_CLOSED after
/// finish, or BSRS_ERR_NULL. Never blocks, allocates, locks or makes a system call: made
/// for the render thread. The same holds for the other `bsrs_push_*` functions.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `f` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_frame(r: *mut BsrsRecorder, f: *const BsrsFrame) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { push(r, f, |r, f| r.push_frame(&frame(f))) }
}

/// Queues a note event. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `n` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_note(r: *mut BsrsRecorder, n: *const BsrsNoteEvent) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { push(r, n, |r, n| r.push_note(&note(n))) }
}

/// Queues a wall event. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `w` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_wall(r: *mut BsrsRecorder, w: *const BsrsWall) -> i32 {
    let conv = |w: &BsrsWall| Wall {
        wall_id: w.wall_id,
        energy: w.energy,
        time: w.time,
        spawn_time: w.spawn_time,
    };
    // SAFETY: forwarded from the caller.
    unsafe { push(r, w, |r, w| r.push_wall(&conv(w))) }
}

/// Queues an automatic height change. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `h` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_height(r: *mut BsrsRecorder, h: *const BsrsHeight) -> i32 {
    let conv = |h: &BsrsHeight| Height {
        height: h.height,
        time: h.time,
    };
    // SAFETY: forwarded from the caller.
    unsafe { push(r, h, |r, h| r.push_height(&conv(h))) }
}

/// Queues a pause. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `p` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_pause(r: *mut BsrsRecorder, p: *const BsrsPause) -> i32 {
    let conv = |p: &BsrsPause| Pause {
        duration: p.duration,
        time: p.time,
    };
    // SAFETY: forwarded from the caller.
    unsafe { push(r, p, |r, p| r.push_pause(&conv(p))) }
}

/// Sets the controller offsets, written at the end.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `o` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_set_controller_offsets(
    r: *mut BsrsRecorder,
    o: *const BsrsControllerOffsets,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees a live handle and a valid struct.
        match unsafe { (with(r), o.as_ref()) } {
            (Some(r), Some(o)) => {
                r.set_controller_offsets(ControllerOffsets {
                    left: pose(o.left),
                    right: pose(o.right),
                });
                BSRS_OK
            }
            _ => BSRS_ERR_NULL,
        }
    })
}

/// Sets the user data (copied; it allocates: not for the per-frame path).
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `data` points to `len` readable bytes (or is NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn bsrs_set_user_data(
    r: *mut BsrsRecorder,
    data: *const u8,
    len: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees a live handle.
        let Some(r) = (unsafe { with(r) }) else {
            return BSRS_ERR_NULL;
        };
        let bytes = if len == 0 {
            &[][..]
        } else if data.is_null() {
            return BSRS_ERR_NULL;
        } else {
            // SAFETY: not NULL, and the caller guarantees `len` readable bytes.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        r.set_user_data(bytes);
        BSRS_OK
    })
}

/// Ends the song with the info known at its end (score, fail time). Returns at once; the
/// background writes the last chunks, the trailer and the classic file. Then call
/// `bsrs_recorder_wait` (or just `bsrs_recorder_free`, which waits).
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `final_info` is valid with valid strings.
#[no_mangle]
pub unsafe extern "C" fn bsrs_recorder_finish(
    r: *mut BsrsRecorder,
    final_info: *const BsrsInfo,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees a live handle and a valid struct.
        match unsafe { (with(r), final_info.as_ref()) } {
            (Some(r), Some(i)) => {
                // SAFETY: the caller guarantees the strings.
                let i = unsafe { info(i) };
                if r.finish(i) {
                    BSRS_OK
                } else {
                    BSRS_CLOSED
                }
            }
            _ => BSRS_ERR_NULL,
        }
    })
}

/// Fills `out` with the recorder's progress and sink states (a few atomic loads). When a
/// sink failed, its message becomes this thread's `bsrs_last_error`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bsrs_recorder_status(r: *mut BsrsRecorder, out: *mut BsrsStatus) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees a live handle and a writable `out`.
        match unsafe { (with(r), out.as_mut()) } {
            (Some(r), Some(out)) => {
                *out = status_out(&r.status());
                BSRS_OK
            }
            _ => BSRS_ERR_NULL,
        }
    })
}

/// Waits up to `timeout_ms` for the background thread to end after `bsrs_recorder_finish`,
/// and fills `out` (may be NULL) with the final status. BSRS_TIMEOUT if it is still working.
/// Blocks: not for the render thread.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn bsrs_recorder_wait(
    r: *mut BsrsRecorder,
    timeout_ms: u32,
    out: *mut BsrsStatus,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees a live handle.
        let Some(r) = (unsafe { with(r) }) else {
            return BSRS_ERR_NULL;
        };
        match r.wait(Duration::from_millis(u64::from(timeout_ms))) {
            Some(s) => {
                // SAFETY: the caller guarantees `out` is NULL or writable.
                if let Some(out) = unsafe { out.as_mut() } {
                    *out = status_out(&s);
                }
                BSRS_OK
            }
            None => BSRS_TIMEOUT,
        }
    })
}

/// Frees a recorder. If it was not finished, the stream ends where it is (a file without
/// trailer, which decodes as a cut-short recording) and no classic file is written. Waits
/// for the background thread. NULL is allowed.
///
/// Thread safety: the handle must not be in use by another thread, and not used again.
///
/// # Safety
/// `r` is NULL or a live handle from `bsrs_recorder_start`, freed once.
#[no_mangle]
pub unsafe extern "C" fn bsrs_recorder_free(r: *mut BsrsRecorder) {
    guard(|| {
        if !r.is_null() {
            // SAFETY: a handle made by `Box::into_raw` in `bsrs_recorder_start`, freed once.
            drop(unsafe { Box::from_raw(r) });
        }
        BSRS_OK
    });
}

/// Copies this thread's last error message (NUL-terminated, truncated to fit) into `buf`
/// of `len` bytes, and returns the message's full length in bytes (without the NUL).
/// `buf` may be NULL to ask for the length.
///
/// Thread safety: any thread; each thread has its own last error.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn bsrs_last_error(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|e| {
        let e = e.borrow();
        if !buf.is_null() && len > 0 {
            let n = e.len().min(len - 1);
            // SAFETY: `buf` is writable for `len` > n bytes; the source is `n` bytes of a
            // String that does not overlap a caller's buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(e.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        e.len()
    })
}

/// The library's version, as a static NUL-terminated string.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn bsrs_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        let mut buf = [0 as c_char; 128];
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { bsrs_last_error(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: bsrs_last_error NUL-terminates within `buf`.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(s.to_bytes().len(), n.min(buf.len() - 1));
        s.to_string_lossy().into_owned()
    }

    fn empty_info() -> BsrsInfo {
        BsrsInfo {
            version: std::ptr::null(),
            game_version: std::ptr::null(),
            timestamp: std::ptr::null(),
            player_id: std::ptr::null(),
            player_name: c"someone".as_ptr(),
            platform: std::ptr::null(),
            tracking_system: std::ptr::null(),
            hmd: std::ptr::null(),
            controller: std::ptr::null(),
            hash: std::ptr::null(),
            song_name: std::ptr::null(),
            mapper: std::ptr::null(),
            difficulty: std::ptr::null(),
            score: 0,
            mode: std::ptr::null(),
            environment: std::ptr::null(),
            modifiers: std::ptr::null(),
            jump_distance: 0.0,
            left_handed: 0,
            height: 0.0,
            start_time: 0.0,
            fail_time: 0.0,
            speed: 1.0,
        }
    }

    fn config() -> BsrsConfig {
        let mut c = std::mem::MaybeUninit::<BsrsConfig>::uninit();
        // SAFETY: bsrs_config_default writes the whole struct.
        unsafe {
            assert_eq!(bsrs_config_default(c.as_mut_ptr()), BSRS_OK);
            c.assume_init()
        }
    }

    #[test]
    fn null_and_bad_arguments_are_codes_with_a_message_not_crashes() {
        let info = empty_info();
        let mut rec = std::ptr::null_mut();
        // SAFETY: every pointer is NULL or valid, which the functions allow.
        unsafe {
            assert_eq!(bsrs_config_default(std::ptr::null_mut()), BSRS_ERR_NULL);
            assert_eq!(
                bsrs_recorder_start(&info, std::ptr::null(), &mut rec),
                BSRS_ERR_NULL
            );
            let mut c = config();
            c.profile = 9;
            assert_eq!(bsrs_recorder_start(&info, &c, &mut rec), BSRS_ERR_INVALID);
            assert!(last_error().contains("profile 9"));
            let mut c = config();
            c.queue_capacity = 0;
            assert_eq!(bsrs_recorder_start(&info, &c, &mut rec), BSRS_ERR_START);
            assert!(last_error().contains("queue_capacity"));
            assert!(rec.is_null());
            let f = BsrsFrame::default();
            assert_eq!(bsrs_push_frame(std::ptr::null_mut(), &f), BSRS_ERR_NULL);
            bsrs_recorder_free(std::ptr::null_mut());
        }
    }

    #[test]
    fn a_recorder_without_sinks_takes_frames_and_finishes() {
        let info = empty_info();
        let c = config();
        let mut rec = std::ptr::null_mut();
        // SAFETY: valid pointers throughout; the handle is freed once.
        unsafe {
            assert_eq!(bsrs_recorder_start(&info, &c, &mut rec), BSRS_OK);
            let mut f = BsrsFrame::default();
            for k in 0..100 {
                f.time = k as f32 / 90.0;
                assert_eq!(bsrs_push_frame(rec, &f), BSRS_OK);
            }
            assert_eq!(bsrs_push_frame(rec, std::ptr::null()), BSRS_ERR_NULL);
            assert_eq!(bsrs_recorder_finish(rec, &info), BSRS_OK);
            assert_eq!(bsrs_push_frame(rec, &f), BSRS_CLOSED);
            assert_eq!(bsrs_recorder_finish(rec, &info), BSRS_CLOSED);
            let mut st = BsrsStatus::default();
            assert_eq!(bsrs_recorder_wait(rec, 10_000, &mut st), BSRS_OK);
            assert_eq!((st.accepted, st.encoded, st.ended), (100, 100, 1));
            assert_eq!(st.stream_file, BSRS_SINK_OFF);
            assert!(st.stream_bytes > 0);
            bsrs_recorder_free(rec);
        }
    }

    #[test]
    fn the_last_error_is_truncated_to_the_buffer_and_its_length_is_told() {
        set_error("0123456789".into());
        let mut small = [0 as c_char; 4];
        // SAFETY: `small` is writable for its length; NULL asks for the length only.
        unsafe {
            assert_eq!(bsrs_last_error(std::ptr::null_mut(), 0), 10);
            assert_eq!(bsrs_last_error(small.as_mut_ptr(), small.len()), 10);
            assert_eq!(CStr::from_ptr(small.as_ptr()).to_bytes(), b"012");
        }
    }

    #[test]
    fn a_panic_becomes_an_error_code() {
        assert_eq!(guard(|| panic!("boom")), BSRS_ERR_PANIC);
        assert!(last_error().contains("boom"));
    }
}

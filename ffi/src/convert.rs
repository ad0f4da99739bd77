//! Conversions between the C ABI's types and the library's: C strings, poses and records
//! in; configuration in; push results, sink states and the status out.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::time::Duration;

use bsor_stream::bsor::{
    BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, NoteOutcome, Pause,
    Pose, Quat, RawBool, UnknownEventType, Vec3, Wall,
};
#[cfg(feature = "live")]
use bsor_stream::recorder::LiveConfig;
use bsor_stream::recorder::{Config, OnFull, Push, SinkState, Status};
use bsor_stream::stream::{Profile, Settings};

use crate::error::set_error;
use crate::log::log_fn;
use crate::types::*;

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

pub(crate) fn pose(p: BsrsPose) -> Pose {
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

pub(crate) fn frame(f: &BsrsFrame) -> Frame {
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

pub(crate) fn note(n: &BsrsNoteEvent) -> NoteEvent {
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
pub(crate) unsafe fn info(i: &BsrsInfo) -> Info {
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

/// A wall event.
pub(crate) fn wall(w: &BsrsWall) -> Wall {
    Wall {
        wall_id: w.wall_id,
        energy: w.energy,
        time: w.time,
        spawn_time: w.spawn_time,
    }
}

/// An automatic height change.
pub(crate) fn height(h: &BsrsHeight) -> Height {
    Height {
        height: h.height,
        time: h.time,
    }
}

/// A pause.
pub(crate) fn pause(p: &BsrsPause) -> Pause {
    Pause {
        duration: p.duration,
        time: p.time,
    }
}

/// The controller offsets.
pub(crate) fn controller_offsets(o: &BsrsControllerOffsets) -> ControllerOffsets {
    ControllerOffsets {
        left: pose(o.left),
        right: pose(o.right),
    }
}

/// The code a push returns.
pub(crate) fn push_code(p: Push) -> i32 {
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
        // Not connected is still running, until the ABI gains its state.
        SinkState::Connecting => BSRS_SINK_RUNNING,
    }
}

/// The status as C sees it; a sink's error message becomes this thread's last error.
pub(crate) fn status_out(s: &Status) -> BsrsStatus {
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

/// The defaults `bsrs_config_default` hands out.
pub(crate) fn default_config() -> BsrsConfig {
    BsrsConfig {
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
    }
}

fn profile(p: u32) -> Result<Profile, String> {
    match p {
        BSRS_PROFILE_LOSSLESS => Ok(Profile::Lossless),
        BSRS_PROFILE_FINE => Ok(Profile::Fine),
        BSRS_PROFILE_COMPACT => Ok(Profile::Compact),
        p => Err(format!("profile {p} is not a BSRS_PROFILE_*")),
    }
}

fn on_full(o: u32) -> Result<OnFull, String> {
    match o {
        BSRS_ON_FULL_DROP => Ok(OnFull::Drop),
        BSRS_ON_FULL_BACK_PRESSURE => Ok(OnFull::BackPressure),
        o => Err(format!("on_full {o} is not a BSRS_ON_FULL_*")),
    }
}

fn idle_flush(seconds: f32) -> Result<Option<Duration>, String> {
    match seconds {
        0.0 => Ok(None),
        s if s > 0.0 && s <= MAX_IDLE_FLUSH_SECONDS => Ok(Duration::try_from_secs_f32(s).ok()),
        s => Err(format!(
            "idle_flush_seconds {s} is not 0 or a number of seconds above 0 and at most \
             {MAX_IDLE_FLUSH_SECONDS}"
        )),
    }
}

/// The longest idle flush a configuration may ask for (a day); beyond it a `Duration`
/// conversion could fail, and no game needs it.
const MAX_IDLE_FLUSH_SECONDS: f32 = 86_400.0;

/// The live publisher's settings, if both its address and session are given.
///
/// # Safety
/// The string pointers in `c` are NULL or NUL-terminated strings valid for the call.
#[cfg(feature = "live")]
unsafe fn live(c: &BsrsConfig) -> Result<Option<LiveConfig>, String> {
    // SAFETY (the calls below): the caller guarantees the strings, as documented on
    // `BsrsConfig`.
    let (addr, session, token) = unsafe {
        (
            c_text(c.live_addr),
            c_text(c.live_session),
            c_text(c.live_token),
        )
    };
    match (addr, session) {
        (Some(addr), Some(session)) => {
            let mut l = LiveConfig::new(&addr, &session, &token.unwrap_or_default());
            l.buffer_bytes = usize::try_from(c.live_buffer_bytes).unwrap_or(usize::MAX);
            Ok(Some(l))
        }
        (None, None) => Ok(None),
        _ => Err("live_addr and live_session go together".into()),
    }
}

/// Built without the live sink: a configuration that asks for it is refused.
#[cfg(not(feature = "live"))]
fn live(c: &BsrsConfig) -> Result<(), String> {
    if c.live_addr.is_null() && c.live_session.is_null() {
        Ok(())
    } else {
        Err("this library was built without the live sink (feature `live`)".into())
    }
}

/// The recorder's configuration, or the message of what is out of range.
///
/// # Safety
/// The pointers in `c` follow `BsrsConfig`'s documentation.
pub(crate) unsafe fn config(c: &BsrsConfig) -> Result<Config, String> {
    let profile = profile(c.profile)?;
    let on_full = on_full(c.on_full)?;
    let idle_flush = idle_flush(c.idle_flush_seconds)?;
    let mut settings = Settings::live(profile);
    settings.keyframe_seconds = c.keyframe_seconds;
    settings.flush_seconds = c.flush_seconds;
    // SAFETY (the calls below): the caller guarantees the strings, as documented on
    // `BsrsConfig`.
    let (stream, classic) = unsafe { (c_text(c.stream_path), c_text(c.classic_path)) };
    #[cfg(feature = "live")]
    // SAFETY: as above.
    let live = unsafe { live(c) }?;
    #[cfg(not(feature = "live"))]
    live(c)?;
    Ok(Config {
        settings,
        queue_capacity: c.queue_capacity as usize,
        on_full,
        stream_file: stream.map(PathBuf::from),
        sync_each_chunk: c.sync_each_chunk != 0,
        idle_flush,
        classic_file: classic.map(PathBuf::from),
        #[cfg(feature = "live")]
        live,
        log: c.log.map(|f| log_fn(f, c.log_user)),
        ..Config::default()
    })
}

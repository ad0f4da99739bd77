//! Conversions between the C ABI's types and the library's: C strings, poses and records
//! in; configuration in; push results, sink states and the status out.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::time::Duration;

use bsor_stream_core::bsor::{
    BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, NoteOutcome, Pause,
    Pose, Quat, RawBool, UnknownEventType, Vec3, Wall,
};
#[cfg(feature = "live")]
use bsor_stream_core::recorder::LiveConfig;
use bsor_stream_core::recorder::{Config, OnFull, SinkState, Status};
use bsor_stream_core::stream::{Profile, Settings};

use crate::log::log_fn;
use crate::types::*;

/// The bytes of a C string; NULL is empty.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_bytes<'a>(p: *const c_char) -> &'a [u8] {
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

fn sink_code(s: SinkState) -> u32 {
    match s {
        SinkState::Off => BSRS_SINK_OFF,
        SinkState::Running => BSRS_SINK_RUNNING,
        SinkState::Failed => BSRS_SINK_FAILED,
        SinkState::Done => BSRS_SINK_DONE,
        SinkState::Connecting => BSRS_SINK_CONNECTING,
    }
}

/// The status as C sees it.
pub(crate) fn status_out(s: &Status) -> BsrsStatus {
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
        struct_size: size_of::<BsrsConfig>() as u32,
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
        live_ca_file: std::ptr::null(),
        live_retry_interval_ms: 500,
        live_max_retries: 120,
        live_finish_timeout_ms: 10_000,
        signing_key: std::ptr::null(),
    }
}

/// The size of the base layout: `struct_size` through `log_user`.
pub(crate) const BASE_CONFIG_SIZE: usize = std::mem::offset_of!(BsrsConfig, live_ca_file);

/// The size of the layout before `signing_key` (`sizeof(BsrsConfig)` of ABI 2's first
/// headers: the field starts where their padded size ended).
pub(crate) const UNSIGNED_CONFIG_SIZE: usize = std::mem::offset_of!(BsrsConfig, signing_key);

/// The configuration behind `p` as this library's `BsrsConfig`: the caller's bytes up to
/// its `struct_size`, and the defaults past them.
///
/// # Safety
/// `p` is not NULL and points to a readable `u32`, and to `struct_size` readable bytes
/// when `struct_size` is one of the sizes accepted (as `BsrsConfig` documents).
pub(crate) unsafe fn read_config(p: *const BsrsConfig) -> Result<BsrsConfig, String> {
    // SAFETY: the caller guarantees a readable `u32` (the first field, `struct_size`).
    let size = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    let full = size_of::<BsrsConfig>();
    // Each accepted size ends at a field boundary of this `BsrsConfig` (the base layout is
    // a prefix of it), so the copy below writes whole fields only, never padding the
    // caller did not initialise into a field.
    if size != full && size != BASE_CONFIG_SIZE && size != UNSIGNED_CONFIG_SIZE {
        return Err(format!(
            "struct_size {size} is neither sizeof(BsrsConfig) ({full}) nor that of an older \
             layout ({BASE_CONFIG_SIZE} or {UNSIGNED_CONFIG_SIZE}): set it with \
             bsrs_config_default"
        ));
    }
    let mut c = default_config();
    // SAFETY: the caller guarantees `size` readable bytes at `p`; `c` is a distinct local
    // of `full >= size` bytes; the bytes copied are whole fields of the same `repr(C)`
    // layout (checked above), each a valid value of its type as C passed it (integers,
    // floats, pointers and nullable function pointers have no invalid bit patterns but a
    // NULL function pointer, which is `Option`'s `None`).
    unsafe {
        std::ptr::copy_nonoverlapping(
            p.cast::<u8>(),
            std::ptr::from_mut(&mut c).cast::<u8>(),
            size,
        );
    }
    Ok(c)
}

fn profile(p: u32) -> Result<Profile, String> {
    match p {
        BSRS_PROFILE_LOSSLESS => Ok(Profile::Lossless),
        BSRS_PROFILE_FINE => Ok(Profile::Fine),
        BSRS_PROFILE_COMPACT => Ok(Profile::Compact),
        p => Err(format!("profile {p} is not a BSRS_PROFILE_* (0 to 2)")),
    }
}

fn on_full(o: u32) -> Result<OnFull, String> {
    match o {
        BSRS_ON_FULL_DROP => Ok(OnFull::Drop),
        BSRS_ON_FULL_BACK_PRESSURE => Ok(OnFull::BackPressure),
        o => Err(format!("on_full {o} is not a BSRS_ON_FULL_* (0 or 1)")),
    }
}

/// The longest keyframe and flush intervals (an hour: longer than any song).
const MAX_INTERVAL_SECONDS: f32 = 3600.0;

fn keyframe_seconds(s: f32) -> Result<f32, String> {
    if s > 0.0 && s <= MAX_INTERVAL_SECONDS {
        Ok(s)
    } else {
        Err(format!(
            "keyframe_seconds {s} is not above 0 and at most {MAX_INTERVAL_SECONDS}"
        ))
    }
}

fn flush_seconds(s: f32) -> Result<f32, String> {
    if s == 0.0 || (s > 0.0 && s <= MAX_INTERVAL_SECONDS) {
        Ok(s)
    } else {
        Err(format!(
            "flush_seconds {s} is not 0 or above 0 and at most {MAX_INTERVAL_SECONDS}"
        ))
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

/// The smallest ring: room for half a second at 120 frames per second, events aside.
const MIN_QUEUE_CAPACITY: u32 = 64;

fn queue_capacity(q: u32) -> Result<usize, String> {
    let max = bsor_stream_core::recorder::MAX_QUEUE_CAPACITY;
    let q = q as usize;
    if (MIN_QUEUE_CAPACITY as usize..=max).contains(&q) {
        Ok(q)
    } else {
        Err(format!(
            "queue_capacity {q} is not between {MIN_QUEUE_CAPACITY} and {max}"
        ))
    }
}

/// `value` if it is in `range`, else the message naming `field`.
fn within<T: PartialOrd + std::fmt::Display>(
    field: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, String> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{field} {value} is not between {} and {}",
            range.start(),
            range.end()
        ))
    }
}

/// A C string of `min` to `max` bytes, NULL as `None`.
///
/// # Safety
/// As [`c_bytes`].
unsafe fn c_field<'a>(
    field: &str,
    p: *const c_char,
    min: usize,
    max: usize,
) -> Result<Option<&'a [u8]>, String> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded from the caller.
    let b: &'a [u8] = unsafe { c_bytes(p) };
    if b.len() < min || b.len() > max {
        return Err(format!(
            "{field} is {} bytes long, not {min} to {max}",
            b.len()
        ));
    }
    Ok(Some(b))
}

/// A path field: 1 to 4096 bytes, as the OS takes them (any bytes but NUL on Unix;
/// UTF-8 elsewhere).
///
/// # Safety
/// As [`c_bytes`].
unsafe fn c_path(field: &str, p: *const c_char) -> Result<Option<PathBuf>, String> {
    // SAFETY: forwarded from the caller.
    let Some(b) = unsafe { c_field(field, p, 1, 4096) }? else {
        return Ok(None);
    };
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(Some(PathBuf::from(std::ffi::OsStr::from_bytes(b))))
    }
    #[cfg(not(unix))]
    match std::str::from_utf8(b) {
        Ok(s) => Ok(Some(PathBuf::from(s))),
        Err(_) => Err(format!("{field} is not UTF-8")),
    }
}

/// A UTF-8 text field of `min` to `max` bytes.
#[cfg(feature = "live")]
///
/// # Safety
/// As [`c_bytes`].
unsafe fn c_utf8(
    field: &str,
    p: *const c_char,
    min: usize,
    max: usize,
) -> Result<Option<String>, String> {
    // SAFETY: forwarded from the caller.
    match unsafe { c_field(field, p, min, max) }? {
        None => Ok(None),
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => Ok(Some(s.to_owned())),
            Err(e) => Err(format!("{field} is not UTF-8 ({e})")),
        },
    }
}

/// A session name as the relay takes it (wire.md): `[A-Za-z0-9._-]{1,64}`, not only dots.
#[cfg(feature = "live")]
fn session_name(s: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !s.bytes().all(|b| b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "live_session {s:?} is not 1 to 64 of [A-Za-z0-9._-], not only dots"
        ))
    }
}

/// The live sink's numbers, in their ranges (checked in builds without the sink too, so
/// that a configuration is valid or not whatever the build).
fn live_numbers(c: &BsrsConfig) -> Result<(u64, u32, u32, u32), String> {
    Ok((
        within("live_buffer_bytes", c.live_buffer_bytes, 1 << 16..=1 << 30)?,
        within(
            "live_retry_interval_ms",
            c.live_retry_interval_ms,
            10..=60_000,
        )?,
        within("live_max_retries", c.live_max_retries, 0..=10_000)?,
        within(
            "live_finish_timeout_ms",
            c.live_finish_timeout_ms,
            0..=600_000,
        )?,
    ))
}

/// The live publisher's settings, if both its address and session are given.
///
/// # Safety
/// The string pointers in `c` are NULL or NUL-terminated strings valid for the call.
#[cfg(feature = "live")]
unsafe fn live(c: &BsrsConfig) -> Result<Option<LiveConfig>, String> {
    // Without TLS, refused before anything is read through the pointer.
    #[cfg(not(feature = "tls"))]
    if !c.live_ca_file.is_null() {
        return Err(
            "live_ca_file: TLS to the relay is not in this build (feature `tls`, docs/quest.md)"
                .into(),
        );
    }
    // SAFETY: the caller guarantees the string, as documented on `BsrsConfig`.
    #[cfg(feature = "tls")]
    let ca_file = unsafe { c_path("live_ca_file", c.live_ca_file) }?;
    // SAFETY (the calls below): the caller guarantees the strings, as documented on
    // `BsrsConfig`.
    let (addr, session, token) = unsafe {
        (
            c_utf8("live_addr", c.live_addr, 1, 255)?,
            c_utf8("live_session", c.live_session, 0, usize::MAX)?,
            c_utf8("live_token", c.live_token, 0, 1024)?,
        )
    };
    let (buffer, retry, retries, finish) = live_numbers(c)?;
    match (addr, session) {
        (Some(addr), Some(session)) => {
            session_name(&session)?;
            let mut l = LiveConfig::new(&addr, &session, &token.unwrap_or_default());
            l.buffer_bytes = usize::try_from(buffer).unwrap_or(usize::MAX);
            l.retry_every = Duration::from_millis(u64::from(retry));
            l.max_retries = retries;
            // `live_max_retries` keeps its meaning: failed attempts in a row, nothing else.
            l.retry_for = Duration::ZERO;
            l.finish_timeout = Duration::from_millis(u64::from(finish));
            #[cfg(feature = "tls")]
            {
                l.ca_file = ca_file;
            }
            Ok(Some(l))
        }
        #[cfg(feature = "tls")]
        (None, None) if ca_file.is_some() => {
            Err("live_ca_file is set without live_addr and live_session".into())
        }
        (None, None) => Ok(None),
        _ => Err("live_addr and live_session go together".into()),
    }
}

/// Built without the live sink: a configuration that asks for it is refused.
#[cfg(not(feature = "live"))]
fn live(c: &BsrsConfig) -> Result<(), String> {
    live_numbers(c)?;
    if c.live_addr.is_null() && c.live_session.is_null() && c.live_ca_file.is_null() {
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
    let queue_capacity = queue_capacity(c.queue_capacity)?;
    let sync_each_chunk = within("sync_each_chunk", c.sync_each_chunk, 0..=1)? == 1;
    let mut settings = Settings::live(profile);
    settings.keyframe_seconds = keyframe_seconds(c.keyframe_seconds)?;
    settings.flush_seconds = flush_seconds(c.flush_seconds)?;
    // SAFETY (the calls below): the caller guarantees the strings, as documented on
    // `BsrsConfig`.
    let stream = unsafe { c_path("stream_path", c.stream_path) }?;
    // SAFETY: as above.
    let classic = unsafe { c_path("classic_path", c.classic_path) }?;
    #[cfg(feature = "live")]
    // SAFETY: as above.
    let live = unsafe { live(c) }?;
    #[cfg(not(feature = "live"))]
    live(c)?;
    // SAFETY: the caller guarantees 32 readable bytes behind a non-NULL `signing_key`.
    let signing_key = unsafe { signing_key(c.signing_key) }?;
    if signing_key.is_some() && profile != Profile::Lossless {
        return Err(
            "signing_key: only the lossless profile (BSRS_PROFILE_LOSSLESS) is signed".into(),
        );
    }
    Ok(Config {
        settings,
        queue_capacity,
        on_full,
        stream_file: stream,
        sync_each_chunk,
        idle_flush,
        classic_file: classic,
        #[cfg(feature = "live")]
        live,
        log: c.log.map(|f| log_fn(f, c.log_user)),
        #[cfg(feature = "sign")]
        signing_key,
        ..Config::default()
    })
}

/// The signing key behind `p`: `None` for NULL.
///
/// # Safety
/// `p` is NULL or points to 32 readable bytes.
#[cfg(feature = "sign")]
pub(crate) unsafe fn signing_key(
    p: *const u8,
) -> Result<Option<bsor_stream_core::integrity::SigningKey>, String> {
    if p.is_null() {
        return Ok(None);
    }
    let mut seed = [0u8; 32];
    // SAFETY: not NULL, and the caller guarantees 32 readable bytes; `seed` is a distinct
    // local of 32 bytes; any bytes are a valid seed.
    unsafe { std::ptr::copy_nonoverlapping(p, seed.as_mut_ptr(), 32) };
    let key = bsor_stream_core::integrity::SigningKey::from_bytes(&seed);
    // The copy on the stack goes; the key wipes itself when dropped (`zeroize`).
    seed.fill(0);
    std::hint::black_box(&seed);
    Ok(Some(key))
}

/// Built without signing: a configuration that asks for it is refused, unread.
#[cfg(not(feature = "sign"))]
unsafe fn signing_key(p: *const u8) -> Result<Option<std::convert::Infallible>, String> {
    if p.is_null() {
        Ok(None)
    } else {
        Err("signing_key: signing is not in this build (feature `sign`)".into())
    }
}

#[cfg(all(test, feature = "live"))]
mod tests {
    use super::{default_config, live};

    /// `live_ca_file` reaches the live sink's settings in a build with TLS, and is refused,
    /// naming the feature, in one without.
    #[test]
    fn the_ca_file_is_taken_only_by_a_build_with_tls() {
        let mut c = default_config();
        c.live_addr = c"127.0.0.1:9".as_ptr();
        c.live_session = c"s".as_ptr();
        c.live_ca_file = c"/ca.pem".as_ptr();
        // SAFETY: every string in `c` is a NUL-terminated literal.
        let got = unsafe { live(&c) };
        #[cfg(feature = "tls")]
        {
            let l = got
                .expect("a build with TLS takes the CA file")
                .expect("live");
            assert_eq!(l.ca_file.as_deref(), Some(std::path::Path::new("/ca.pem")));
            c.live_addr = std::ptr::null();
            c.live_session = std::ptr::null();
            // SAFETY: as above.
            let alone = unsafe { live(&c) }.expect_err("a CA file alone is refused");
            assert!(alone.contains("live_ca_file"), "{alone}");
        }
        #[cfg(not(feature = "tls"))]
        {
            let e = got.expect_err("a build without TLS refuses the CA file");
            assert!(e.contains("live_ca_file") && e.contains("`tls`"), "{e}");
        }
    }
}

#[cfg(test)]
mod layout_tests {
    use super::{default_config, read_config, UNSIGNED_CONFIG_SIZE};

    /// A mod built against the header before `signing_key` passes the smaller size and
    /// gets no key, whatever lies past its struct.
    #[test]
    fn the_layout_before_the_signing_key_is_accepted_without_a_key() {
        let mut c = default_config();
        c.struct_size = UNSIGNED_CONFIG_SIZE as u32;
        c.signing_key = [0x42u8; 32].as_ptr();
        // SAFETY: `c` is a whole `BsrsConfig`, readable for any accepted size.
        let read = unsafe { read_config(&c) }.unwrap();
        assert!(read.signing_key.is_null());
        assert_eq!(read.struct_size as usize, UNSIGNED_CONFIG_SIZE);
        c.struct_size = UNSIGNED_CONFIG_SIZE as u32 + 4;
        // SAFETY: as above.
        assert!(unsafe { read_config(&c) }.is_err());
    }
}

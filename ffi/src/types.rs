//! The C ABI's types: the `BSRS_*` codes and the `#[repr(C)]` structs that cross it, as
//! cbindgen writes them into `include/bsor_stream.h`. Nothing here has behaviour; the
//! conversions to the library's types are in `convert`.

use std::ffi::{c_char, c_void};

use bsor_stream_core::recorder::Recorder;

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
/// Bad settings: a `BsrsConfig` field out of its stated range (or a `struct_size` this
/// library does not know), or an argument out of range; see `bsrs_last_error`, which names
/// the field. The one code for every bad setting.
pub const BSRS_ERR_INVALID: i32 = -3;
/// The recorder could not start for a reason other than its settings (the system refused
/// the background thread); see `bsrs_last_error`.
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
/// Sink state (live sink only): not connected to the relay: connecting, or waiting to
/// reconnect after a lost connection, with the chunks kept in its buffer meanwhile. After
/// `live_max_retries` failed attempts in a row it becomes BSRS_SINK_FAILED.
pub const BSRS_SINK_CONNECTING: u32 = 4;

/// The version of this C ABI, as `bsrs_abi_version` returns it. Version 2 is the first with
/// `BsrsConfig::struct_size`; version 1 (without it) is not accepted: its first field,
/// `profile`, reads as a `struct_size` too small, which is bad settings. A later version
/// only adds fields at the end of `BsrsConfig` and keeps accepting this one's size.
pub const BSRS_ABI_VERSION: u32 = 2;

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

/// A rotation quaternion. The lossless profile keeps it bit for bit, unit or not. The lossy
/// profiles (BSRS_PROFILE_FINE, BSRS_PROFILE_COMPACT) expect a unit quaternion (x² + y² +
/// z² + w² within 0.001 of 1): they normalise it and code it within their bound. One that
/// is not (zeros, (-1,-1,-1,-1) placeholders, NaN or infinite components) is kept bit for
/// bit instead, as an escape of 4 raw floats, which costs more than the lossless coding: a
/// lossy stream of non-unit rotations comes out larger than a lossless one.
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

impl Default for BsrsInfo {
    /// Every string NULL (empty), every number 0, speed 1: for Rust callers, who then set
    /// the fields they know.
    fn default() -> Self {
        let none = std::ptr::null();
        BsrsInfo {
            version: none,
            game_version: none,
            timestamp: none,
            player_id: none,
            player_name: none,
            platform: none,
            tracking_system: none,
            hmd: none,
            controller: none,
            hash: none,
            song_name: none,
            mapper: none,
            difficulty: none,
            score: 0,
            mode: none,
            environment: none,
            modifiers: none,
            jump_distance: 0.0,
            left_handed: 0,
            height: 0.0,
            start_time: 0.0,
            fail_time: 0.0,
            speed: 1.0,
        }
    }
}

/// Receives the recorder's log messages: `level` 1 error, 2 warning, 3 info; `message` is
/// NUL-terminated UTF-8, valid during the call only.
///
/// Threads: it is called only on the recorder's own background threads (the encoder's and
/// the live publisher's), never on a thread that calls a `bsrs_*` function, so never on the
/// game thread that pushes frames. For one recorder it is never entered concurrently: each
/// call returns before the next one begins, though successive calls may come from different
/// threads. The callbacks of two recorders alive at the same time may run concurrently.
/// It is called, with `log_user`, until `bsrs_recorder_free` returns, also while
/// `bsrs_recorder_wait` or `bsrs_recorder_free` wait for the background threads: it must not
/// wait for the thread that calls those, nor use the recorder's handle.
pub type BsrsLogFn = Option<extern "C" fn(user: *mut c_void, level: i32, message: *const c_char)>;

/// How to record. Start from `bsrs_config_default`, which fills every field (with
/// `struct_size` = `sizeof(BsrsConfig)`), then change what you need. Paths and strings are
/// NUL-terminated and copied by `bsrs_recorder_start`; NULL means "no such sink". A field
/// out of its range below makes `bsrs_recorder_start` return BSRS_ERR_INVALID with the
/// field named in `bsrs_last_error`; nothing is clamped.
///
/// Compatibility: fields are only ever added at the end. A mod built against an older
/// header passes its smaller `struct_size` and gets the defaults for the fields it does not
/// know. The sizes accepted are `sizeof(BsrsConfig)`, that of the base layout,
/// `offsetof(BsrsConfig, live_ca_file)` (`struct_size` through `log_user`), and that of the
/// layout before `signing_key`, `offsetof(BsrsConfig, signing_key)`; the fields past the
/// size given take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BsrsConfig {
    /// `sizeof(BsrsConfig)` as the mod's header declares it (set by `bsrs_config_default`).
    /// Another value than the sizes above (0, a size cutting a field, a larger struct from
    /// a newer header) is bad settings.
    pub struct_size: u32,
    /// BSRS_PROFILE_*: 0 to 2 (0, lossless, by default).
    pub profile: u32,
    /// A keyframe at least every this many seconds of song time: above 0 and at most 3600
    /// (1 by default).
    pub keyframe_seconds: f32,
    /// A chunk every this many seconds of song time: 0 (chunks only at keyframes) or above
    /// 0 and at most 3600 (0.1 by default). A crash loses at most this much.
    pub flush_seconds: f32,
    /// Ring capacity in records (a frame or an event each), 64 to 1,048,576 (8192 by
    /// default: over a minute at 120 frames per second). Allocated whole at start: about
    /// 128 bytes a record.
    pub queue_capacity: u32,
    /// BSRS_ON_FULL_*: 0 or 1 (0, drop, by default).
    pub on_full: u32,
    /// 0 or 1: 1 to fdatasync the stream file after each chunk (0 by default).
    pub sync_each_chunk: u8,
    /// When no frame comes for this many seconds of wall time (a pause), the open chunk
    /// goes out anyway: 0, or above 0 and at most 86,400 (0.1 by default). 0 turns this
    /// off: chunk boundaries then depend on song time alone, and the same pushes give the
    /// same bytes.
    pub idle_flush_seconds: f32,
    /// The `.bsors` file, written chunk by chunk: NULL, or a path of 1 to 4096 bytes.
    pub stream_path: *const c_char,
    /// The classic `.bsor` file, written at finish: NULL, or a path of 1 to 4096 bytes.
    pub classic_path: *const c_char,
    /// The relay's TCP address (`host:port`) for live publishing: NULL, or UTF-8 of 1 to
    /// 255 bytes. Set together with `live_session`.
    pub live_addr: *const c_char,
    /// Session name for live publishing: NULL, or `[A-Za-z0-9._-]`, 1 to 64 characters,
    /// not only dots.
    pub live_session: *const c_char,
    /// Token for live publishing: NULL (none), or UTF-8 of at most 1024 bytes.
    pub live_token: *const c_char,
    /// Bytes kept for the relay while it is away: 65,536 to 1,073,741,824 (8 MiB by
    /// default). A bound, not an allocation made at start.
    pub live_buffer_bytes: u64,
    /// Log callback, or NULL; `BsrsLogFn` says on which threads it is called.
    pub log: BsrsLogFn,
    /// Passed to `log` as it is, on the recorder's background threads: what it points to
    /// must be usable there until `bsrs_recorder_free` returns.
    pub log_user: *mut c_void,
    /// Past the base layout. A PEM file of the CA certificates to trust for TLS to the relay
    /// (the only ones trusted: the headset has no system store), or NULL (default) for plain
    /// TCP. Needs `live_addr` and a library built with the `tls` feature (docs/quest.md); in
    /// a build without it a non-NULL value is bad settings. A file that cannot be read or
    /// holds no certificate fails the live sink (`BSRS_SINK_FAILED`, with the message). TLS
    /// 1.3 only; the relay's certificates must be signed with ECDSA (P-256 or P-384) or
    /// Ed25519: a relay with an RSA certificate is refused at the handshake.
    pub live_ca_file: *const c_char,
    /// Past the base layout. Milliseconds the live sink waits before its first reconnection
    /// attempt: 10 to 60,000 (500 by default). The wait doubles after each failed attempt, up
    /// to 5 s (or this interval, if longer).
    pub live_retry_interval_ms: u32,
    /// Past the base layout. Failed connection attempts in a row after which the live sink gives
    /// up (BSRS_SINK_FAILED; the other sinks go on): 0 to 10,000 (120 by default, about ten
    /// minutes of a relay away with the doubling waits; a relay restarted on its archive lets
    /// the sink resume its session). Each attempt takes at most 10 s (a refused connection
    /// fails at once), plus the wait.
    pub live_max_retries: u32,
    /// Past the base layout. After finish, milliseconds the live sink waits for the relay to
    /// acknowledge the last chunk, connected or not, before it gives up: 0 to 600,000
    /// (10,000 by default). `bsrs_recorder_free` never waits for it.
    pub live_finish_timeout_ms: u32,
    /// Past the base layout. The player's signing key: NULL (default: the recording is not
    /// signed), or 32 bytes, the Ed25519 secret seed (RFC 8032) of the key the player
    /// registered, copied by `bsrs_recorder_start`. With it the stream (file and live) is
    /// signed (proto-spec/integrity.md) and the classic file carries the signature entry
    /// (§13); only the lossless profile can be signed (another is bad settings). The
    /// hashing and signing run on the background thread; `bsrs_push_*` do no more than
    /// without a key. The seed is the player's secret: the mod keeps it in the player's
    /// own storage, never in a replay, a log or a file it shares, and wipes its copy when
    /// the recorder has started; whoever holds it signs as the player. Needs a library
    /// built with the `sign` feature (on by default); without it a non-NULL value is bad
    /// settings.
    pub signing_key: *const u8,
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
    pub(crate) inner: Recorder,
}

//! The C ABI of the bsor-stream recorder runtime, for game mods (C++ on Quest, C# on PC).
//!
//! Everything here is a thin layer over [`bsor_stream_core::recorder`]: plain C structs are
//! copied into the library's types, errors become codes plus a per-thread last-error
//! message, and every entry point catches panics so that none unwinds into the game. This
//! crate is the only place in the project with `unsafe`: each block says why it is sound.
//!
//! One concern per file: `types` holds the `#[repr(C)]` types and the `BSRS_*` codes,
//! `convert` the conversions between them and the library's types, `error` the last error
//! and the panic guard, `log` the C log callback, and this file the `extern "C"` entry
//! points. The header `include/bsor_stream.h` is generated from them by cbindgen.

#![warn(missing_docs)]

mod convert;
mod error;
mod log;
mod types;

use std::ffi::c_char;
use std::time::Duration;

use bsor_stream_core::recorder::{Push, Recorder, StartError};

use crate::convert::{
    controller_offsets, default_config, frame, height, note, pause, status_out, wall,
};
use crate::error::{copy_last_error, guard, set_error, Fail};
pub use crate::types::*;

/// The error for a NULL argument of `function`.
macro_rules! null {
    ($function:literal) => {
        Err((BSRS_ERR_NULL, concat!($function, ": NULL argument").into()))
    };
}

/// The error for a call on a finished recorder.
macro_rules! closed {
    ($function:literal) => {
        Err((
            BSRS_CLOSED,
            concat!($function, ": the recorder is finished").into(),
        ))
    };
}

/// Fills `out` with the defaults: `struct_size` = `sizeof(BsrsConfig)`, lossless, keyframes
/// every 1 s, a chunk every 0.1 s, a ring of 8192 records that drops when full, no sinks,
/// and the live sink's defaults (see each field of `BsrsConfig`).
///
/// Errors set this thread's last error (`bsrs_last_error`) and success clears it, here and
/// in every function but `bsrs_version`, `bsrs_abi_version` and `bsrs_last_error`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `out` is NULL or points to writable memory for a `BsrsConfig`.
#[no_mangle]
pub unsafe extern "C" fn bsrs_config_default(out: *mut BsrsConfig) -> i32 {
    guard(|| {
        if out.is_null() {
            return null!("bsrs_config_default");
        }
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(default_config()) };
        Ok(BSRS_OK)
    })
}

/// Starts a recorder with the info known at the start of the song, and its background
/// thread. On success `*out` holds the handle, to be freed with `bsrs_recorder_free`; on
/// an error `*out` is left as it was.
///
/// Returns BSRS_OK; BSRS_ERR_NULL; BSRS_ERR_INVALID for bad settings (a field out of its
/// range, a `struct_size` not accepted; `bsrs_last_error` names the field); BSRS_ERR_START
/// when the system refuses the background thread. A sink that cannot open (a path that
/// cannot be created) does not fail the start: it shows as BSRS_SINK_FAILED in the status,
/// and the others go on.
///
/// The log callback, if any, is called as `BsrsLogFn` says: on the recorder's background
/// threads only, one call at a time, with `log_user`, until `bsrs_recorder_free` returns.
///
/// Thread safety: any thread.
///
/// # Safety
/// `info` points to a valid struct whose strings are NULL or NUL-terminated; `config`
/// points to `config->struct_size` readable bytes of a `BsrsConfig` (as an accepted size
/// lays it out) whose strings are NULL or NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bsrs_recorder_start(
    info: *const BsrsInfo,
    config: *const BsrsConfig,
    out: *mut *mut BsrsRecorder,
) -> i32 {
    guard(|| {
        if info.is_null() || config.is_null() || out.is_null() {
            return null!("bsrs_recorder_start");
        }
        let invalid = |e: String| (BSRS_ERR_INVALID, format!("bsrs_recorder_start: {e}").into());
        // SAFETY: not NULL; the caller guarantees `struct_size` readable bytes.
        let config = unsafe { convert::read_config(config) }.map_err(invalid)?;
        // SAFETY: the caller guarantees a valid info and valid strings in both structs.
        let (info, config) = unsafe { (convert::info(&*info), convert::config(&config)) };
        let config = config.map_err(invalid)?;
        match Recorder::start(info, config) {
            Ok(inner) => {
                let handle = Box::into_raw(Box::new(BsrsRecorder { inner }));
                // SAFETY: `out` is not NULL and the caller guarantees it is writable.
                unsafe { out.write(handle) };
                Ok(BSRS_OK)
            }
            Err(e @ StartError::Thread(_)) => {
                Err((BSRS_ERR_START, format!("bsrs_recorder_start: {e}").into()))
            }
            // Checked by `convert::config` already; kept as bad settings if it ever differs.
            Err(e) => Err(invalid(e.to_string())),
        }
    })
}

/// The recorder behind a handle, or `None` for a NULL one.
///
/// # Safety
/// `r` is NULL or a live handle from `bsrs_recorder_start` that no other thread is using.
unsafe fn with<'a>(r: *mut BsrsRecorder) -> Option<&'a mut Recorder> {
    // SAFETY: the caller guarantees a live handle used by this thread alone.
    unsafe { r.as_mut() }.map(|r| &mut r.inner)
}

/// One push: a live handle and a record, or BSRS_ERR_NULL; the messages are static, so
/// that no push allocates.
///
/// # Safety
/// `r` is NULL or a live handle used by this thread alone; `x` is NULL or valid for the
/// call.
unsafe fn push<T>(
    r: *mut BsrsRecorder,
    x: *const T,
    errors: [Fail; 2],
    f: impl FnOnce(&mut Recorder, &T) -> Push,
) -> i32 {
    guard(|| {
        let [null, closed] = errors;
        // SAFETY: the caller guarantees a live handle and a valid record.
        match unsafe { (with(r), x.as_ref()) } {
            (Some(r), Some(x)) => match f(r, x) {
                Push::Queued => Ok(BSRS_OK),
                Push::Dropped => Ok(BSRS_DROPPED),
                Push::Full => Ok(BSRS_FULL),
                Push::Closed => Err(closed),
            },
            _ => Err(null),
        }
    })
}

/// The static errors of push function `$f`.
macro_rules! push_errors {
    ($f:literal) => {
        [
            (BSRS_ERR_NULL, concat!($f, ": NULL argument").into()),
            (
                BSRS_CLOSED,
                concat!($f, ": the recorder is finished").into(),
            ),
        ]
    };
}

/// Queues a frame (frames come in song order).
///
/// Returns BSRS_OK, BSRS_DROPPED or BSRS_FULL (ring full, see `on_full`), BSRS_CLOSED after
/// finish, or BSRS_ERR_NULL. Never blocks, allocates, locks or makes a system call: made
/// for the render thread (an error's message is static; clearing one that another call
/// left may free it). The same holds for the other `bsrs_push_*` functions.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `f` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_frame(r: *mut BsrsRecorder, f: *const BsrsFrame) -> i32 {
    let errors = push_errors!("bsrs_push_frame");
    // SAFETY: forwarded from the caller.
    unsafe { push(r, f, errors, |r, f| r.push_frame(&frame(f))) }
}

/// Queues a note event. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `n` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_note(r: *mut BsrsRecorder, n: *const BsrsNoteEvent) -> i32 {
    let errors = push_errors!("bsrs_push_note");
    // SAFETY: forwarded from the caller.
    unsafe { push(r, n, errors, |r, n| r.push_note(&note(n))) }
}

/// Queues a wall event. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `w` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_wall(r: *mut BsrsRecorder, w: *const BsrsWall) -> i32 {
    let errors = push_errors!("bsrs_push_wall");
    // SAFETY: forwarded from the caller.
    unsafe { push(r, w, errors, |r, w| r.push_wall(&wall(w))) }
}

/// Queues an automatic height change. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `h` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_height(r: *mut BsrsRecorder, h: *const BsrsHeight) -> i32 {
    let errors = push_errors!("bsrs_push_height");
    // SAFETY: forwarded from the caller.
    unsafe { push(r, h, errors, |r, h| r.push_height(&height(h))) }
}

/// Queues a pause. Returns as `bsrs_push_frame`.
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `p` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn bsrs_push_pause(r: *mut BsrsRecorder, p: *const BsrsPause) -> i32 {
    let errors = push_errors!("bsrs_push_pause");
    // SAFETY: forwarded from the caller.
    unsafe { push(r, p, errors, |r, p| r.push_pause(&pause(p))) }
}

/// Sets the controller offsets, written at the end. BSRS_CLOSED (nothing kept) after
/// finish; BSRS_ERR_NULL.
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
                if r.set_controller_offsets(controller_offsets(o)) {
                    Ok(BSRS_OK)
                } else {
                    closed!("bsrs_set_controller_offsets")
                }
            }
            _ => null!("bsrs_set_controller_offsets"),
        }
    })
}

/// Sets the user data (copied; it allocates: not for the per-frame path). BSRS_CLOSED
/// (nothing kept) after finish; BSRS_ERR_NULL; BSRS_ERR_INVALID over 16 MiB. The live sink
/// sends it in the trailer, which a relay takes up to its frame limit (8 MiB by default,
/// wire.md): past that the live sink fails at finish, and the files keep the user data.
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
            return null!("bsrs_set_user_data");
        };
        let bytes = if len == 0 {
            &[][..]
        } else if data.is_null() {
            return null!("bsrs_set_user_data");
        } else if len > MAX_USER_DATA {
            return Err((
                BSRS_ERR_INVALID,
                format!("bsrs_set_user_data: {len} bytes, more than {MAX_USER_DATA}").into(),
            ));
        } else {
            // SAFETY: not NULL, and the caller guarantees `len` readable bytes.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        if r.set_user_data(bytes) {
            Ok(BSRS_OK)
        } else {
            closed!("bsrs_set_user_data")
        }
    })
}

/// The most user data `bsrs_set_user_data` takes (16 MiB): a copy of more would only risk
/// the game's memory.
const MAX_USER_DATA: usize = 16 << 20;

/// Ends the song with the info known at its end (score, fail time). Returns at once; the
/// background writes the last chunks, the trailer and the classic file. Then call
/// `bsrs_recorder_wait` before `bsrs_recorder_free`. BSRS_CLOSED if already finished.
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
                let i = unsafe { convert::info(i) };
                if r.finish(i) {
                    Ok(BSRS_OK)
                } else {
                    closed!("bsrs_recorder_finish")
                }
            }
            _ => null!("bsrs_recorder_finish"),
        }
    })
}

/// Fills `out` with the recorder's progress and sink states (a few atomic loads). On
/// BSRS_OK the last error is the message of the sink that failed last, if one did (else it
/// is cleared).
///
/// Thread safety: one thread at a time per recorder.
///
/// # Safety
/// `r` is a live handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bsrs_recorder_status(r: *mut BsrsRecorder, out: *mut BsrsStatus) -> i32 {
    let mut sink_error = None;
    let code = guard(|| {
        // SAFETY: the caller guarantees a live handle and a writable `out`.
        match unsafe { (with(r), out.as_mut()) } {
            (Some(r), Some(out)) => {
                let s = r.status();
                *out = status_out(&s);
                sink_error = s.last_error;
                Ok(BSRS_OK)
            }
            _ => null!("bsrs_recorder_status"),
        }
    });
    if let Some(e) = sink_error {
        set_error(e);
    }
    code
}

/// Waits up to `timeout_ms` for the background thread to end after `bsrs_recorder_finish`,
/// and fills `out` (may be NULL) with the final status. BSRS_TIMEOUT if it is still working
/// (not an error: the last error is cleared). Blocks: not for the render thread.
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
            return null!("bsrs_recorder_wait");
        };
        match r.wait(Duration::from_millis(u64::from(timeout_ms))) {
            Some(s) => {
                // SAFETY: the caller guarantees `out` is NULL or writable.
                if let Some(out) = unsafe { out.as_mut() } {
                    *out = status_out(&s);
                }
                Ok(BSRS_OK)
            }
            None => Ok(BSRS_TIMEOUT),
        }
    })
}

/// Frees a recorder. If it was not finished, the stream ends where it is (a file without
/// trailer, which decodes as a cut-short recording) and no classic file is written. NULL is
/// allowed (and clears the last error, as the free of a handle does).
///
/// Returns at once whatever the network or the disk do: it tells the recorder's threads to
/// stop and waits for neither. They finish on their own, soon after: the encoder writes
/// out the last records (and completes the files after a finish); a live sink still
/// connecting, sending or finishing ends within its budget (`live_max_retries`,
/// `live_retry_interval_ms`, `live_finish_timeout_ms`). The log is not called once this
/// returns, so it waits for a log callback already running on one of those threads. Call
/// `bsrs_recorder_wait` (off the game thread) before it to know the files are complete and
/// the live session finished.
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
            let r = unsafe { Box::from_raw(r) };
            // Zero: the game's thread never sleeps here (each sleep is a wake-up the
            // scheduler may serve late on a busy headset); the encoder ends on its own.
            r.inner.close(Duration::ZERO);
        }
        Ok(BSRS_OK)
    });
}

/// Signs the registration of the player's public key with a replay server's key registry
/// (proto-spec/http.md §8.13): `secret_key` (the 32-byte seed of `BsrsConfig::signing_key`)
/// signs the registration message of its public key to `player_id` on the server named
/// `server_name`, for the 32-byte `challenge` the server issued (`POST /keys/challenge`,
/// whose reply names the player and the server). Writes the 64-byte Ed25519 signature to
/// `out_signature`, and the 32-byte public key to `out_public_key` unless it is NULL: the
/// mod sends both, in hex, with the challenge to `POST /keys`.
///
/// Returns BSRS_OK; BSRS_ERR_NULL for a NULL argument (but `out_public_key`);
/// BSRS_ERR_INVALID when `player_id` or `server_name` is empty, longer than 256 bytes or
/// not UTF-8, or when the library was built without signing (feature `sign`).
///
/// Thread safety: any thread.
///
/// # Safety
/// `secret_key` and `challenge` point to 32 readable bytes each; `player_id` and
/// `server_name` are NUL-terminated strings; `out_signature` is writable for 64 bytes and
/// `out_public_key` is NULL or writable for 32 bytes.
#[no_mangle]
pub unsafe extern "C" fn bsrs_sign_key_challenge(
    secret_key: *const u8,
    player_id: *const c_char,
    server_name: *const c_char,
    challenge: *const u8,
    out_signature: *mut u8,
    out_public_key: *mut u8,
) -> i32 {
    guard(|| {
        if secret_key.is_null()
            || player_id.is_null()
            || server_name.is_null()
            || challenge.is_null()
            || out_signature.is_null()
        {
            return null!("bsrs_sign_key_challenge");
        }
        // SAFETY: not NULL; the caller guarantees NUL-terminated strings.
        let (player, server) =
            unsafe { (convert::c_bytes(player_id), convert::c_bytes(server_name)) };
        let (Ok(player), Ok(server)) = (std::str::from_utf8(player), std::str::from_utf8(server))
        else {
            return Err((
                BSRS_ERR_INVALID,
                "bsrs_sign_key_challenge: player_id and server_name are UTF-8".into(),
            ));
        };
        let mut c = [0u8; 32];
        // SAFETY: not NULL, and the caller guarantees 32 readable bytes; `c` is a distinct
        // local of 32 bytes.
        unsafe { std::ptr::copy_nonoverlapping(challenge, c.as_mut_ptr(), 32) };
        let (signature, public) =
            sign_key_challenge(secret_key, player, server, &c).map_err(|e| {
                (
                    BSRS_ERR_INVALID,
                    format!("bsrs_sign_key_challenge: {e}").into(),
                )
            })?;
        // SAFETY: not NULL, and the caller guarantees 64 writable bytes that do not overlap
        // the local `signature`.
        unsafe { std::ptr::copy_nonoverlapping(signature.as_ptr(), out_signature, 64) };
        if !out_public_key.is_null() {
            // SAFETY: not NULL, and the caller guarantees 32 writable bytes.
            unsafe { std::ptr::copy_nonoverlapping(public.as_ptr(), out_public_key, 32) };
        }
        Ok(BSRS_OK)
    })
}

/// The signature and public key of `bsrs_sign_key_challenge`, by the library's one
/// registration message.
///
/// # Safety
/// `secret_key` points to 32 readable bytes.
#[cfg(feature = "sign")]
unsafe fn sign_key_challenge(
    secret_key: *const u8,
    player: &str,
    server: &str,
    challenge: &[u8; 32],
) -> Result<([u8; 64], [u8; 32]), String> {
    use bsor_stream_core::integrity;
    // SAFETY: forwarded from the caller; not NULL (checked by the caller).
    let key = unsafe { convert::signing_key(secret_key) }?
        .ok_or_else(|| "secret_key: NULL".to_string())?;
    let signature = integrity::sign_key_registration(&key, player, server, challenge)
        .map_err(|e| e.to_string())?;
    Ok((signature, key.verifying_key().to_bytes()))
}

/// Built without signing: refused, the key unread.
#[cfg(not(feature = "sign"))]
unsafe fn sign_key_challenge(
    _secret_key: *const u8,
    _player: &str,
    _server: &str,
    _challenge: &[u8; 32],
) -> Result<([u8; 64], [u8; 32]), String> {
    Err("signing is not in this build (feature `sign`)".into())
}

/// Copies this thread's last error message (NUL-terminated, truncated to fit) into `buf`
/// of `len` bytes, and returns the message's full length in bytes (without the NUL): 0
/// when the last call on this thread succeeded.
///
/// Thread safety: any thread; each thread has its own last error, set by the calls it made
/// (whichever recorder they were on).
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn bsrs_last_error(buf: *mut c_char, len: usize) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { copy_last_error(buf, len) }
}

/// The library's version, as a static NUL-terminated string.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn bsrs_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The C ABI version of the library, BSRS_ABI_VERSION as it was built: a mod compares it
/// with the BSRS_ABI_VERSION of its header.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn bsrs_abi_version() -> u32 {
    BSRS_ABI_VERSION
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

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
            player_name: c"someone".as_ptr(),
            ..BsrsInfo::default()
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
            // Out of range at both ends: an error, never an allocation that aborts the game.
            for capacity in [0, (1 << 20) + 1, 100_000_000, u32::MAX] {
                let mut c = config();
                c.queue_capacity = capacity;
                assert_eq!(bsrs_recorder_start(&info, &c, &mut rec), BSRS_ERR_INVALID);
                assert!(last_error().contains("queue_capacity"), "{capacity}");
                assert!(rec.is_null());
            }
            // An idle flush too long for a Duration, or not a number: an error, not a panic.
            for seconds in [1e30, f32::INFINITY, f32::NAN, -1.0, 86_401.0] {
                let mut c = config();
                c.idle_flush_seconds = seconds;
                assert_eq!(bsrs_recorder_start(&info, &c, &mut rec), BSRS_ERR_INVALID);
                assert!(last_error().contains("idle_flush_seconds"), "{seconds}");
                assert!(rec.is_null());
            }
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
        set_error("0123456789");
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

    /// What the log callback saw, behind its `user` pointer.
    struct Seen {
        caller: std::thread::ThreadId,
        calls: std::sync::atomic::AtomicUsize,
        errors: std::sync::atomic::AtomicUsize,
        on_caller: std::sync::atomic::AtomicUsize,
    }

    extern "C" fn note_thread(user: *mut std::ffi::c_void, level: i32, message: *const c_char) {
        use std::sync::atomic::Ordering::SeqCst;
        // SAFETY: `user` is the `Seen` of the test below, which outlives the recorder
        // (freed before the test returns), and is only read through atomics.
        let seen = unsafe { &*user.cast::<Seen>() };
        // SAFETY: the recorder passes a NUL-terminated string valid during the call.
        let text = unsafe { CStr::from_ptr(message) };
        seen.calls.fetch_add(1, SeqCst);
        // No assert here: a panic cannot leave an `extern "C"` function (it aborts).
        if level == 1 && !text.to_bytes().is_empty() {
            seen.errors.fetch_add(1, SeqCst);
        }
        if std::thread::current().id() == seen.caller {
            seen.on_caller.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn the_log_is_called_with_its_user_pointer_on_background_threads_only() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let seen = Seen {
            caller: std::thread::current().id(),
            calls: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            on_caller: AtomicUsize::new(0),
        };
        // A stream path under a plain file cannot be created: the sink fails and logs.
        let file = std::env::temp_dir().join(format!("bsrs-log-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let path = std::ffi::CString::new(file.join("song.bsors").to_str().unwrap()).unwrap();
        let info = empty_info();
        let mut c = config();
        c.stream_path = path.as_ptr();
        c.log = Some(note_thread);
        c.log_user = std::ptr::from_ref(&seen).cast_mut().cast();
        let mut rec = std::ptr::null_mut();
        // SAFETY: valid pointers throughout; `seen` and `path` outlive the recorder, which
        // is freed once.
        unsafe {
            assert_eq!(bsrs_recorder_start(&info, &c, &mut rec), BSRS_OK);
            let f = BsrsFrame::default();
            assert_eq!(bsrs_push_frame(rec, &f), BSRS_OK);
            assert_eq!(bsrs_recorder_finish(rec, &info), BSRS_OK);
            let mut st = BsrsStatus::default();
            assert_eq!(bsrs_recorder_wait(rec, 10_000, &mut st), BSRS_OK);
            assert_eq!(st.stream_file, BSRS_SINK_FAILED);
            bsrs_recorder_free(rec);
        }
        let _ = std::fs::remove_file(&file);
        assert!(seen.errors.load(SeqCst) >= 1, "the failed sink was logged");
        assert!(seen.calls.load(SeqCst) >= 2, "and the end of the recording");
        assert_eq!(
            seen.on_caller.load(SeqCst),
            0,
            "never on the caller's thread"
        );
    }
}

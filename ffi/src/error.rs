//! Errors across the C ABI: the per-thread last-error message behind `bsrs_last_error`,
//! and the guard that turns a Rust panic into `BSRS_ERR_PANIC` instead of unwinding into
//! the caller.
//!
//! Every entry point runs in [`guard`]: an error code sets this thread's last error, a
//! success clears it. Messages of the push calls are `'static`, so that setting one does
//! not allocate on the render thread.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::types::BSRS_ERR_PANIC;

thread_local! {
    static LAST_ERROR: RefCell<Cow<'static, str>> = const { RefCell::new(Cow::Borrowed("")) };
}

/// An error code with its message.
pub(crate) type Fail = (i32, Cow<'static, str>);

/// Makes `msg` this thread's last error.
pub(crate) fn set_error(msg: impl Into<Cow<'static, str>>) {
    let msg = msg.into();
    LAST_ERROR.with(|e| *e.borrow_mut() = msg);
}

/// Clears this thread's last error (no allocation; it frees a message that was allocated).
pub(crate) fn clear_error() {
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        if !e.is_empty() {
            *e = Cow::Borrowed("");
        }
    });
}

/// Runs `f`: an `Err` sets its message as this thread's last error and returns its code;
/// an `Ok` clears the last error and returns its code (BSRS_OK or a non-negative code); a
/// panic becomes BSRS_ERR_PANIC, with its message as the last error.
pub(crate) fn guard(f: impl FnOnce() -> Result<i32, Fail>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => {
            clear_error();
            code
        }
        Ok(Err((code, msg))) => {
            set_error(msg);
            code
        }
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

/// Copies this thread's last error, NUL-terminated and truncated to fit, into `buf` of
/// `len` bytes (nothing when `buf` is NULL or `len` is 0); returns the message's full
/// length in bytes, without the NUL.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
pub(crate) unsafe fn copy_last_error(buf: *mut c_char, len: usize) -> usize {
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

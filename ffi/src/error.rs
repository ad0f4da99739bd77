//! Errors across the C ABI: the per-thread last-error message behind `bsrs_last_error`,
//! and the guard that turns a Rust panic into `BSRS_ERR_PANIC` instead of unwinding into
//! the caller.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::types::BSRS_ERR_PANIC;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Makes `msg` this thread's last error.
pub(crate) fn set_error(msg: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = msg);
}

/// Runs `f`, turning a panic into BSRS_ERR_PANIC (with its message as the last error).
pub(crate) fn guard(f: impl FnOnce() -> i32) -> i32 {
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

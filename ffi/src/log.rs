//! The C log callback as the recorder's [`LogFn`]: the C function and its user pointer.

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use bsor_stream::recorder::{LogFn, LogLevel};

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
        let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        (self.f)(self.user, level as i32, text.as_ptr());
    }
}

/// The recorder's log function for the C callback `f` with its `user` pointer.
pub(crate) fn log_fn(
    f: extern "C" fn(*mut c_void, i32, *const c_char),
    user: *mut c_void,
) -> LogFn {
    let log = CLog { f, user };
    Arc::new(move |level: LogLevel, msg: &str| log.call(level, msg))
}

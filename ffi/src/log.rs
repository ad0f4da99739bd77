//! The C log callback as the recorder's [`LogFn`]: the C function and its user pointer,
//! called under a lock so that the C side is never entered concurrently.
//!
//! The recorder calls its log from more than one thread (the encoder's and the live
//! publisher's, which may run at the same time), so the `Sync` that a [`LogFn`] needs is
//! not given by the callers: it comes from the [`Mutex`] here, which makes the calls of one
//! recorder's callback strictly one after another.

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, Mutex, PoisonError};

use bsor_stream_core::recorder::{LogFn, LogLevel};

/// The C function and the pointer it is given back.
struct Callback {
    f: extern "C" fn(*mut c_void, i32, *const c_char),
    user: *mut c_void,
}

// SAFETY: `Send` lets a `Callback` be used by a thread other than the one that made it.
// `user` is the only field that is not `Send` by itself; this type never reads or writes
// through it, only passes it back to `f`, and the C caller hands it over for exactly that:
// calls of `f` on the recorder's background threads (the encoder's and the live
// publisher's), as `BsrsLogFn` and `BsrsConfig::log_user` document. No `Sync` is claimed:
// the recorder shares its log between those threads, so `CLog` puts the `Callback` in a
// `Mutex` (which is `Sync` because `Callback` is `Send`) and holds it across each call,
// which keeps the promise made to C that `f` is never entered concurrently.
unsafe impl Send for Callback {}

/// One recorder's log callback: calls are serialised by the lock.
struct CLog {
    callback: Mutex<Callback>,
}

impl CLog {
    fn call(&self, level: LogLevel, msg: &str) {
        // Built before the lock, so that the lock is held for the C call alone.
        let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // A poisoned lock still serialises, and there is no state of ours behind it to be
        // left half-changed (nor can it be poisoned: the C function must not unwind, which
        // the "C" ABI does not allow, and nothing else runs under the lock).
        let c = self.callback.lock().unwrap_or_else(PoisonError::into_inner);
        (c.f)(c.user, level as i32, text.as_ptr());
    }
}

/// The recorder's log function for the C callback `f` with its `user` pointer.
pub(crate) fn log_fn(
    f: extern "C" fn(*mut c_void, i32, *const c_char),
    user: *mut c_void,
) -> LogFn {
    let log = CLog {
        callback: Mutex::new(Callback { f, user }),
    };
    Arc::new(move |level: LogLevel, msg: &str| log.call(level, msg))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;
    use std::time::{Duration, Instant};

    use super::*;

    /// How many calls are inside the callback now.
    static INSIDE: AtomicUsize = AtomicUsize::new(0);
    static OVERLAPS: AtomicUsize = AtomicUsize::new(0);
    static CALLS: AtomicUsize = AtomicUsize::new(0);

    /// A C-ABI callback that notes whether another call is inside it, and stays inside for
    /// a millisecond, so that unserialised calls would overlap (a thread preempted in here
    /// leaves the others time to come in, even on a loaded machine).
    extern "C" fn spinning(_user: *mut c_void, _level: i32, _message: *const c_char) {
        if INSIDE.fetch_add(1, Ordering::SeqCst) > 0 {
            OVERLAPS.fetch_add(1, Ordering::SeqCst);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1) {
            std::hint::spin_loop();
        }
        INSIDE.fetch_sub(1, Ordering::SeqCst);
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn calls_from_several_threads_never_enter_the_callback_at_once() {
        const THREADS: usize = 4;
        const EACH: usize = 25;
        let log = log_fn(spinning, std::ptr::null_mut());
        let start = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (log, start) = (&log, &start);
                s.spawn(move || {
                    start.wait();
                    for k in 0..EACH {
                        log(LogLevel::Info, &format!("thread {t}, message {k}"));
                    }
                });
            }
        });
        assert_eq!(CALLS.load(Ordering::SeqCst), THREADS * EACH);
        assert_eq!(
            OVERLAPS.load(Ordering::SeqCst),
            0,
            "the callback was entered concurrently"
        );
    }
}

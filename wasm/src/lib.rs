//! The classic BSOR codec and the stream decoder as a WebAssembly module for
//! `wasm32-unknown-unknown`, with plain `extern "C"` exports and no JavaScript glue:
//!
//! 1. `input_reserve(len)` returns where to write `len` input bytes in the module's memory;
//! 2. `stream_to_bsor()` decodes the input as a `.bsors` stream into a classic BSOR, or
//!    `bsor_check()` parses the input as a classic BSOR and writes it back; each returns 0
//!    on success, 1 when damage was stepped over (the output holds what was recovered), and
//!    -1 on an error;
//! 3. `output_ptr()` and `output_len()` locate the result (the BSOR bytes, or after -1 the
//!    error's text in UTF-8).
//!
//! The buffers live in the module and are reused by the next call. No `unsafe` block: the
//! exports only hand out addresses, and JavaScript writes and reads the module's memory
//! itself. The one thing the compiler counts as unsafe is `no_mangle` (an exported
//! symbol could collide with another library's); each is allowed where it stands, and the
//! names are this module's own, in a module that links nothing else that exports symbols.

#![deny(unsafe_code)]

use std::cell::RefCell;

use bsor_stream::{bsor, transcode};

thread_local! {
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Makes room for `len` input bytes and returns where they go (valid until the next call).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn input_reserve(len: usize) -> *mut u8 {
    INPUT.with_borrow_mut(|input| {
        input.clear();
        input.resize(len, 0);
        input.as_mut_ptr()
    })
}

/// Where the last result starts.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn output_ptr() -> *const u8 {
    OUTPUT.with_borrow(|out| out.as_ptr())
}

/// The last result's length in bytes.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn output_len() -> usize {
    OUTPUT.with_borrow(|out| out.len())
}

/// Runs `f` on the input and keeps its result (or its error's text) as the output.
fn run(f: impl FnOnce(&[u8]) -> Result<(Vec<u8>, bool), String>) -> i32 {
    let result = INPUT.with_borrow(|input| f(input));
    let (bytes, code) = match result {
        Ok((bytes, damaged)) => (bytes, i32::from(damaged)),
        Err(e) => (e.into_bytes(), -1),
    };
    OUTPUT.with_borrow_mut(|out| *out = bytes);
    code
}

/// Decodes the input stream into a classic BSOR (see the crate docs for the codes).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn stream_to_bsor() -> i32 {
    run(|input| {
        let (replay, recovery) = transcode::decode_replay(input).map_err(|e| e.to_string())?;
        let bytes = bsor::to_vec(&replay).map_err(|e| e.to_string())?;
        Ok((bytes, !recovery.damage.is_empty()))
    })
}

/// Parses the input as a classic BSOR and writes it back byte for byte.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn bsor_check() -> i32 {
    run(|input| {
        let replay = bsor::parse(input).map_err(|e| e.to_string())?;
        let bytes = bsor::to_vec(&replay).map_err(|e| e.to_string())?;
        Ok((bytes, false))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(name: &str) -> Vec<u8> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto-spec/vectors/");
        std::fs::read(format!("{dir}{name}")).unwrap()
    }

    fn call(input: &[u8], f: extern "C" fn() -> i32) -> (i32, Vec<u8>) {
        INPUT.with_borrow_mut(|i| *i = input.to_vec());
        let code = f();
        (code, OUTPUT.with_borrow(|o| o.clone()))
    }

    #[test]
    fn the_exports_decode_a_vector_and_report_errors_as_text() {
        let (code, out) = call(&vector("synthetic.lossless.bsors"), stream_to_bsor);
        assert_eq!((code, out), (0, vector("synthetic.bsor")));
        let (code, out) = call(&vector("synthetic.bsor"), bsor_check);
        assert_eq!((code, out), (0, vector("synthetic.bsor")));
        let (code, out) = call(b"not a replay", bsor_check);
        assert_eq!(code, -1);
        assert!(!out.is_empty() && std::str::from_utf8(&out).is_ok());
        assert_eq!(input_reserve(3), INPUT.with_borrow_mut(|i| i.as_mut_ptr()));
        assert_eq!(output_len(), out.len());
    }
}

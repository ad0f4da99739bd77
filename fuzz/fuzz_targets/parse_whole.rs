//! Whole-buffer parsing never panics, and the codec is lossless: any input `parse` accepts
//! is written back by `to_vec` byte for byte, and that output parses again.

#![no_main]

use bsor_stream::bsor;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(replay) = bsor::parse(data) else {
        return;
    };
    let written = bsor::to_vec(&replay).expect("a parsed replay must be writable");
    assert!(
        written == data,
        "rewrite differs: {} bytes in, {} bytes out, first difference at {:?}",
        data.len(),
        written.len(),
        data.iter().zip(&written).position(|(a, b)| a != b)
    );
    bsor::parse(&written).expect("the rewritten bytes must parse");
});

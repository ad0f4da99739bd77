//! The live protocol's frame decoder (`WireCodec`, as the relay's `tcp::Framing` runs it under
//! tokio_util) on arbitrary bytes in arbitrary pieces.
//!
//! The first input byte is a control byte: its low two bits pick the frame limit (64, 1024,
//! 65536 bytes or the relay's default of 8 MiB, so that small inputs reach `FrameTooLarge`
//! too) and the rest seed the piece sizes (1..=64). The remaining bytes are what a peer
//! sent. Checked:
//! - no panic;
//! - the decoder never buffers or reserves beyond one frame under the limit: after each
//!   call, the buffer's capacity stays under what the pushed bytes and one whole frame
//!   need (`capacity_bound`); a forged length over the limit is refused from its 4 bytes;
//! - the messages and the error (up to and including the first error, where a `Framed`
//!   stops reading) do not depend on the piece sizes, nor does what is left at the end
//!   (`decode_eof`);
//! - every decoded message encodes back to exactly the frame it came from, and every error
//!   maps to a protocol error code.

#![no_main]

use bsor_stream::net::tcp::Framing;
use bsor_stream::net::wire::{Message, WireCodec, WireError, DEFAULT_MAX_FRAME};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

/// What a run gave: each message (with the frame bytes it came from, re-encoded), then the
/// error that stopped it, if any.
#[derive(Debug, PartialEq)]
struct Run {
    messages: Vec<Message>,
    /// The first error, as its code and text.
    error: Option<(u16, String)>,
    /// Whether bytes of an unfinished frame were left at the end.
    leftover: bool,
}

/// A small generator for piece sizes.
struct Pieces(u32);

impl Pieces {
    fn next(&mut self) -> usize {
        self.0 = self.0.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        1 + (self.0 >> 16) as usize % 64
    }
}

/// The most a decoder's buffer may hold after `pushed` bytes were pushed into it: the
/// bytes themselves (as `extend_from_slice` grows it, at most doubling) and one frame at
/// the limit (reserved once its length is seen), at most doubled by `BytesMut::reserve`.
fn capacity_bound(pushed: usize, max_frame: u32) -> usize {
    2 * (pushed + 4 + max_frame as usize) + 64
}

fn error_of(e: &WireError) -> (u16, String) {
    (e.code().code(), e.to_string())
}

/// Decodes what `buf` holds, appending to `run`; false once an error stopped it.
fn drain(codec: &mut Framing, buf: &mut BytesMut, run: &mut Run, max_frame: u32) -> bool {
    loop {
        let before = buf.clone();
        match codec.decode(buf) {
            Ok(Some(m)) => {
                // The frame it came from is what `before` lost.
                let used = before.len() - buf.len();
                let mut again = BytesMut::new();
                m.encode(&mut again);
                assert_eq!(
                    &again[..],
                    &before[..used],
                    "{m:?} does not encode back to its frame"
                );
                assert!(used <= 4 + max_frame as usize, "a frame over the limit");
                run.messages.push(m);
            }
            Ok(None) => return true,
            Err(e) => {
                run.error = Some(error_of(&e));
                return false;
            }
        }
    }
}

/// Pushes `data` in pieces of `piece()` bytes, decoding after each.
fn run(data: &[u8], max_frame: u32, mut piece: impl FnMut() -> usize) -> Run {
    let mut codec = Framing(WireCodec::new(max_frame));
    let mut buf = BytesMut::new();
    let mut run = Run {
        messages: Vec::new(),
        error: None,
        leftover: false,
    };
    let mut pushed = 0;
    let mut rest = data;
    while !rest.is_empty() {
        let n = piece().clamp(1, rest.len());
        buf.extend_from_slice(&rest[..n]);
        pushed += n;
        rest = &rest[n..];
        let going = drain(&mut codec, &mut buf, &mut run, max_frame);
        assert!(
            buf.capacity() <= capacity_bound(pushed, max_frame),
            "buffer of {} bytes after {pushed} bytes pushed (limit {max_frame})",
            buf.capacity()
        );
        if !going {
            return run;
        }
    }
    match codec.decode_eof(&mut buf) {
        Ok(Some(m)) => panic!("decode_eof found a message decode missed: {m:?}"),
        Ok(None) => {}
        Err(e) => {
            run.leftover = true;
            // tokio_util's default: bytes of an unfinished frame left at the end.
            assert!(matches!(e, WireError::Io(_)), "{e}");
        }
    }
    run
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, data)) = data.split_first() else {
        return;
    };
    let max_frame = [64, 1024, 65536, DEFAULT_MAX_FRAME][usize::from(ctl & 3)];
    let whole = run(data, max_frame, || usize::MAX);
    let mut pieces = Pieces(u32::from(ctl >> 2));
    let some = run(data, max_frame, || pieces.next());
    assert_eq!(whole, some, "pieces change what is decoded");
    let ones = run(data, max_frame, || 1);
    assert_eq!(whole, ones, "byte by byte changes what is decoded");
});

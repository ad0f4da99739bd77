//! The push parser agrees with the whole-buffer parser, whatever the piece sizes.
//!
//! The first byte of the input picks the piece sizes (1..=64, from a small generator it
//! seeds); the rest is the BSOR input, pushed piece by piece, draining `next_event` after
//! each push, then `finish` and a last drain. Checked:
//! - the result does not depend on the piece sizes: the same events and the same error as
//!   pushing everything in one piece;
//! - it agrees with `bsor::parse` on the same bytes: both Ok with identical `to_vec` bytes,
//!   or both Err with equal errors (proto-spec/bsor-v1.md, "Incremental (push) reading":
//!   the one allowed difference, a trailing-bytes `OverLimit` tripping early, needs 64 MiB
//!   of input, far over the `-max_len` these targets are run with);
//! - no `Event::End` before `finish`, errors are sticky, nothing after the end.

#![no_main]

use bsor_stream::bsor::{self, Event, ParseError, PushParser, ReplayBuilder};
use bsor_stream::bsor::{
    encode_controller_offsets, encode_frame, encode_height, encode_info, encode_note,
    encode_pause, encode_wall,
};
use libfuzzer_sys::fuzz_target;

/// What one push-parser run gave: every event in order, and the error that stopped it.
struct Run {
    events: Vec<Event>,
    /// `events`, each as bytes.
    keys: Vec<Vec<u8>>,
    error: Option<ParseError>,
    done: bool,
    offset: u64,
}

/// An event as bytes, to compare events bit for bit (`Event`'s `PartialEq` compares floats,
/// and a NaN, which the input may hold anywhere, is not equal to itself).
fn event_bytes(ev: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    match ev {
        Event::Info(i) => {
            out.push(0);
            encode_info(i, &mut out);
        }
        Event::SectionStart { section, count } => {
            out.push(1);
            out.push(section.marker().unwrap_or(255));
            out.extend(count.to_le_bytes());
        }
        Event::Frame(f) => out.extend([2].into_iter().chain(encode_frame(f))),
        Event::Note(n) => {
            out.push(3);
            encode_note(n, &mut out);
        }
        Event::Wall(w) => out.extend([4].into_iter().chain(encode_wall(w))),
        Event::Height(h) => out.extend([5].into_iter().chain(encode_height(h))),
        Event::Pause(p) => out.extend([6].into_iter().chain(encode_pause(p))),
        Event::ControllerOffsets(o) => {
            out.extend([7].into_iter().chain(encode_controller_offsets(o)))
        }
        Event::UserData(d) => out.extend([8].iter().chain(d)),
        Event::Trailing(t) => out.extend([9].iter().chain(t)),
        Event::End => out.push(10),
    }
    out
}

fn drain(parser: &mut PushParser, run: &mut Run, finished: bool) -> bool {
    loop {
        match parser.next_event() {
            Ok(Some(ev)) => {
                assert!(
                    finished || ev != Event::End,
                    "Event::End before finish (after {} events)",
                    run.events.len()
                );
                assert!(run.events.last() != Some(&Event::End), "an event after Event::End");
                run.keys.push(event_bytes(&ev));
                run.events.push(ev);
            }
            Ok(None) => return true,
            Err(e) => {
                // Sticky: asked again, the parser gives the same error.
                assert_eq!(parser.next_event(), Err(e.clone()), "error not sticky");
                run.error = Some(e);
                return false;
            }
        }
    }
}

fn push_run(bytes: &[u8], mut sizes: impl FnMut() -> usize) -> Run {
    let mut parser = PushParser::new();
    let mut run = Run {
        events: Vec::new(),
        keys: Vec::new(),
        error: None,
        done: false,
        offset: 0,
    };
    let mut rest = bytes;
    let mut ok = true;
    while ok && !rest.is_empty() {
        let n = sizes().min(rest.len());
        let (piece, tail) = rest.split_at(n);
        rest = tail;
        parser.push(piece);
        ok = drain(&mut parser, &mut run, false);
    }
    if ok {
        parser.finish();
        if drain(&mut parser, &mut run, true) {
            assert!(parser.is_done(), "no error, no end after finish");
            assert_eq!(run.events.last(), Some(&Event::End), "last event is not End");
            // Nothing after the end.
            assert_eq!(parser.next_event(), Ok(None), "an event after the end");
        }
    }
    run.done = parser.is_done();
    run.offset = parser.offset();
    run
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, bytes)) = data.split_first() else {
        return;
    };

    // Piece sizes 1..=64 from a xorshift seeded by the control byte.
    let mut x = u32::from(ctl).wrapping_mul(0x9e37_79b9) | 1;
    let chunked = push_run(bytes, || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        1 + (x % 64) as usize
    });
    let one_piece = push_run(bytes, || usize::MAX);

    // Independent of the piece sizes.
    assert_eq!(chunked.error, one_piece.error, "error depends on piece sizes");
    assert!(
        chunked.keys == one_piece.keys,
        "events depend on piece sizes: {} vs {} events, first difference at {:?}",
        chunked.keys.len(),
        one_piece.keys.len(),
        chunked.keys.iter().zip(&one_piece.keys).position(|(a, b)| a != b)
    );
    assert_eq!(chunked.done, one_piece.done);
    assert_eq!(chunked.offset, one_piece.offset);

    // Agrees with the whole-buffer parser.
    match (bsor::parse(bytes), chunked.error) {
        (Ok(whole), None) => {
            assert_eq!(chunked.offset, bytes.len() as u64, "end offset");
            let mut builder = ReplayBuilder::default();
            for ev in chunked.events {
                builder.apply(ev);
            }
            assert!(builder.is_complete());
            let pushed = builder.finish().expect("End without Info");
            let a = bsor::to_vec(&pushed).expect("push result must be writable");
            let b = bsor::to_vec(&whole).expect("parse result must be writable");
            assert!(a == b, "push and whole-buffer results are written differently");
        }
        (Ok(_), Some(e)) => panic!("parse accepts, the push parser fails: {e:?}"),
        (Err(e), None) => panic!("the push parser accepts, parse fails: {e:?}"),
        (Err(whole), Some(push)) => {
            assert_eq!(whole, push, "different errors (left: parse, right: push)");
        }
    }
});

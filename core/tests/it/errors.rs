//! Bad input: every fault gets an error naming section, field and byte offset; counts and
//! lengths are checked before anything is allocated; nothing valid before a fault is lost.

use bsor_stream_core::bsor::{
    self, ErrorKind, Limits, ParseError, PushParser, Replay, ReplayBuilder, Section,
};
use bsor_stream_core::synth;

fn small() -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed: 11,
        seconds: 2.0,
        fps: 20,
    });
    r.notes.truncate(4);
    r
}

/// Feeds `bytes` in pieces of `piece` bytes, collecting events until an error or the end.
fn push_parse(bytes: &[u8], piece: usize) -> (ReplayBuilder, Result<(), ParseError>) {
    let mut p = PushParser::new();
    let mut b = ReplayBuilder::default();
    let drain = |p: &mut PushParser, b: &mut ReplayBuilder| -> Result<(), ParseError> {
        while let Some(ev) = p.next_event()? {
            b.apply(ev);
        }
        Ok(())
    };
    for chunk in bytes.chunks(piece.max(1)) {
        p.push(chunk);
        if let Err(e) = drain(&mut p, &mut b) {
            return (b, Err(e));
        }
    }
    p.finish();
    let r = drain(&mut p, &mut b);
    (b, r)
}

/// Byte offset of the frames section's count field.
fn frames_count_offset(r: &Replay) -> usize {
    let mut info = Vec::new();
    bsor::encode_info(&r.info, &mut info);
    6 + info.len() + 1
}

#[test]
fn every_truncation_is_an_error_at_or_before_the_cut_and_agrees_with_push() {
    let r = small();
    let bytes = bsor::to_vec(&r).unwrap();
    let full = bsor::parse(&bytes).unwrap();
    // The optional sections may end a file: a cut right after the pauses or right after
    // the controller offsets is a valid, shorter replay. Every other strict prefix fails.
    let after_offsets = bytes.len() - 5 - r.user_data.as_ref().map_or(0, Vec::len);
    let after_pauses = after_offsets - 57;
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        let err = match bsor::parse(prefix) {
            Ok(short) => {
                assert!(
                    cut == after_pauses || cut == after_offsets,
                    "cut {cut} parsed"
                );
                assert_eq!(short.controller_offsets.is_some(), cut == after_offsets);
                assert!(bsor::to_vec(&short).unwrap() == prefix);
                continue;
            }
            Err(e) => e,
        };
        assert!(err.offset <= cut as u64, "cut {cut}: {err}");
        assert!(
            matches!(
                err.kind,
                ErrorKind::Truncated { .. } | ErrorKind::ExceedsInput { .. }
            ),
            "cut {cut}: {err}"
        );
        let (partial, push_err) = push_parse(prefix, 1 + cut % 13);
        assert_eq!(push_err, Err(err.clone()), "cut {cut}");
        // Nothing valid before the fault is lost: every whole frame before the cut is there.
        let got = partial.partial();
        if let Some(last) = got.frames.last() {
            let i = got.frames.len() - 1;
            assert_eq!(last.time.to_bits(), full.frames[i].time.to_bits());
        }
        if cut >= frames_count_offset(&r) + 4 + bsor::FRAME_SIZE * r.frames.len() {
            assert_eq!(got.frames.len(), r.frames.len(), "cut {cut}");
        }
    }
}

#[test]
fn a_short_input_is_not_an_error_before_finish() {
    let bytes = bsor::to_vec(&small()).unwrap();
    let mut p = PushParser::new();
    p.push(&bytes[..bytes.len() / 2]);
    while p.next_event().unwrap().is_some() {}
    assert!(!p.is_done());
    p.finish();
    let err = loop {
        match p.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("finish on a half file must fail"),
            Err(e) => break e,
        }
    };
    // Half way through the frames: the frame count no longer fits, as the whole-buffer
    // parser says too.
    assert_eq!(
        Err(err.clone()),
        bsor::parse(&bytes[..bytes.len() / 2]).map(|_| ())
    );
    assert!(matches!(err.kind, ErrorKind::ExceedsInput { .. }));
    // The parser stays failed with the same error.
    assert_eq!(p.next_event(), Err(err));
}

#[test]
fn truncation_errors_name_the_record_field_and_offset() {
    let r = small();
    let bytes = bsor::to_vec(&r).unwrap();
    // The last note is a cut (88 bytes); cut the input inside its cutPoint.y. The notes
    // count still fits the bytes left (4 notes of at least 16 bytes), so the error is
    // the truncated record itself.
    let last = r.notes.len() - 1;
    assert!(r.notes[last].outcome.cut().is_some());
    let notes_at = frames_count_offset(&r) + 4 + r.frames.len() * bsor::FRAME_SIZE + 5;
    let before: usize = r.notes[..last]
        .iter()
        .map(|n| if n.outcome.cut().is_some() { 88 } else { 16 })
        .sum();
    let field_at = notes_at + before + 16 + 36;
    for parse in [
        |b: &[u8]| bsor::parse(b).map(|_| ()),
        |b: &[u8]| push_parse(b, 3).1,
    ] {
        let err = parse(&bytes[..field_at + 2]).unwrap_err();
        assert_eq!(err.section, Section::Notes);
        assert_eq!(err.record, Some(last as u32));
        assert_eq!(err.field, "cutPoint.y");
        assert_eq!(err.offset, field_at as u64);
        assert_eq!(
            err.kind,
            ErrorKind::Truncated {
                needed: 72 - 36 - 2
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("notes") && msg.contains(&format!("record {last}")),
            "{msg}"
        );
        assert!(msg.contains("cutPoint.y") && msg.contains(&format!("byte {field_at}")));
    }
    // Inside the frames, the count no longer fits what remains: that is the error, at
    // the count field, from both parsers.
    let count_at = frames_count_offset(&r);
    let cut = count_at + 4 + 3 * bsor::FRAME_SIZE + 40;
    let whole = bsor::parse(&bytes[..cut]).unwrap_err();
    assert_eq!((whole.section, whole.field), (Section::Frames, "count"));
    assert_eq!(whole.offset, count_at as u64);
    assert_eq!(
        whole.kind,
        ErrorKind::ExceedsInput {
            value: r.frames.len() as u32,
            min_bytes: (r.frames.len() * bsor::FRAME_SIZE) as u64,
            remaining: (3 * bsor::FRAME_SIZE + 40) as u64,
        }
    );
    let (partial, push) = push_parse(&bytes[..cut], 10);
    assert_eq!(push, Err(whole));
    assert_eq!(
        partial.partial().frames.len(),
        3,
        "the whole frames before the cut"
    );
}

#[test]
fn forged_frame_count_fails_at_once() {
    let r = small();
    let mut bytes = bsor::to_vec(&Replay {
        frames: vec![],
        notes: vec![],
        ..r.clone()
    })
    .unwrap();
    let at = frames_count_offset(&r);
    bytes[at..at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    bytes.truncate(at + 4 + 60);
    let err = bsor::parse(&bytes).unwrap_err();
    assert_eq!(err.section, Section::Frames);
    assert_eq!(err.field, "count");
    assert_eq!(err.offset, at as u64);
    assert_eq!(
        err.kind,
        ErrorKind::ExceedsInput {
            value: i32::MAX as u32,
            min_bytes: i32::MAX as u64 * 92,
            remaining: 60
        }
    );
    // The push parser cannot check the count before the end is known, but it allocates
    // nothing for it either (core/tests/alloc_bounds.rs measures that): it waits for records,
    // and at the end reports what the whole-buffer parser reports.
    let (b, res) = push_parse(&bytes, 7);
    assert!(b.partial().frames.is_empty());
    assert_eq!(res, Err(err));
}

#[test]
fn forged_string_and_user_data_lengths_are_refused() {
    let r = small();
    let bytes = bsor::to_vec(&r).unwrap();
    // The first string's length field, set to 2^31-1.
    let mut forged = bytes.clone();
    forged[6..10].copy_from_slice(&i32::MAX.to_le_bytes());
    let err = bsor::parse(&forged).unwrap_err();
    assert_eq!(
        (err.section, err.field, err.offset),
        (Section::Info, "version", 6)
    );
    assert!(matches!(err.kind, ErrorKind::OverLimit { .. }));
    // Within the limit but beyond the input.
    forged[6..10].copy_from_slice(&100_000i32.to_le_bytes());
    let err = bsor::parse(&forged).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ExceedsInput { .. }), "{err}");
    // A negative length.
    forged[6..10].copy_from_slice(&(-3i32).to_le_bytes());
    let err = bsor::parse(&forged).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Negative { value: -3 });

    // User data: the last section; its length field is 4 bytes after its marker.
    let ud = r.user_data.as_ref().unwrap().len();
    let at = bytes.len() - ud - 4;
    let mut forged = bytes.clone();
    forged[at..at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    let err = bsor::parse(&forged).unwrap_err();
    assert_eq!(
        (err.section, err.field, err.offset),
        (Section::UserData, "length", at as u64)
    );
    let tight = Limits {
        max_user_data_bytes: 4,
        ..Limits::default()
    };
    let err = bsor::parse_with_limits(&bytes, tight).unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::OverLimit {
            value: ud as u64,
            limit: 4
        }
    );
}

#[test]
fn push_parser_bounds_trailing_bytes_without_knowing_the_end() {
    let mut r = small();
    r.user_data = None;
    r.controller_offsets = None;
    let bytes = bsor::to_vec(&r).unwrap();
    let limits = Limits {
        max_trailing_bytes: 1000,
        ..Limits::default()
    };
    let mut p = PushParser::with_limits(limits);
    p.push(&bytes);
    while p.next_event().unwrap().is_some() {}
    let junk = [9u8; 600];
    p.push(&junk);
    assert_eq!(p.next_event().unwrap(), None);
    p.push(&junk);
    let err = p.next_event().unwrap_err();
    assert_eq!(err.section, Section::Trailing);
    assert_eq!(err.offset, bytes.len() as u64);
    assert!(matches!(err.kind, ErrorKind::OverLimit { limit: 1000, .. }));
}

#[test]
fn header_and_marker_faults() {
    let bytes = bsor::to_vec(&small()).unwrap();
    let mut bad = bytes.clone();
    bad[0] = 0;
    let e = bsor::parse(&bad).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::BadMagic { .. }));
    assert_eq!((e.section, e.offset), (Section::Header, 0));

    let mut bad = bytes.clone();
    bad[4] = 2;
    let e = bsor::parse(&bad).unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnsupportedVersion { found: 2 });
    assert_eq!(e.offset, 4);

    let mut bad = bytes.clone();
    bad[5] = 1;
    let e = bsor::parse(&bad).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::WrongMarker {
            expected: 0,
            found: 1
        }
    );
    assert_eq!((e.section, e.offset), (Section::Info, 5));

    let r = small();
    let at = frames_count_offset(&r) - 1;
    let mut bad = bytes.clone();
    bad[at] = 4;
    let e = bsor::parse(&bad).unwrap_err();
    assert_eq!(
        (e.section, e.field, e.offset),
        (Section::Frames, "marker", at as u64)
    );

    // A negative count, and everything before it still yielded by the push parser.
    let mut bad = bytes.clone();
    bad[at + 1..at + 5].copy_from_slice(&(-1i32).to_le_bytes());
    let e = bsor::parse(&bad).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Negative { value: -1 });
    let (b, res) = push_parse(&bad, 5);
    assert_eq!(res, Err(e));
    assert_eq!(b.partial().info, r.info);

    // A fault in the notes keeps every frame.
    let notes_at = at + 5 + r.frames.len() * bsor::FRAME_SIZE;
    let mut bad = bytes.clone();
    bad[notes_at] = 9;
    let (b, res) = push_parse(&bad, 64);
    assert_eq!(res.unwrap_err().section, Section::Notes);
    assert_eq!(b.partial().frames.len(), r.frames.len());
}

#[test]
fn garbage_never_panics() {
    // A fixed sweep of byte patterns through both parsers (the fuzz targets go further).
    let bytes = bsor::to_vec(&small()).unwrap();
    let mut state = 0x1234_5678_u32;
    for round in 0..2000 {
        let mut b = bytes.clone();
        for _ in 0..(1 + round % 8) {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let i = state as usize % b.len();
            b[i] = (state >> 24) as u8;
        }
        let whole = bsor::parse(&b);
        let (built, push) = push_parse(&b, 1 + round % 97);
        match (whole, push) {
            (Ok(r), Ok(())) => {
                assert!(
                    bsor::to_vec(&r).unwrap() == b,
                    "accepted input rewrites exactly"
                );
                assert!(built.is_complete());
            }
            (Err(e1), Err(e2)) => assert_eq!(e1, e2),
            (w, p) => panic!("parsers disagree: {w:?} vs {p:?}"),
        }
    }
}

//! The stream decoder never panics, stays in bounded memory, and does not depend on the
//! piece sizes its input arrives in.
//!
//! The first byte of the input picks the piece sizes (1..=64, from a small generator it
//! seeds); when its high bit is set, the stream header's, the chunks' and the footer's CRCs
//! in the rest are first recomputed (`fix_crcs`), so that mutations reach the payload
//! decoders instead of stopping at a CRC check. The rest is the `.bsors` input, pushed into a `StreamDecoder` piece by piece,
//! draining `next_item` after each push (an `Err`, a bad stream header or a critical
//! unknown chunk, stops the run: it is allowed), then `finish` and a last drain. Checked:
//! - nothing comes after `StreamItem::End`, and a run without error ends with `End`;
//! - the events (as `{:?}` text) and the error are those of pushing everything in one piece
//!   (but for two known differences, see `coalesce` and `footer_after_junk`, unless run with
//!   `STREAM_DECODE_STRICT=1`);
//! - `transcode::decode_replay` fails exactly when the one-piece run does, and a replay it
//!   returns goes through `bsor::to_vec` without panicking (an `Err` is fine);
//! - `transcode::decode_span` and `transcode::read_events` do not panic.
//!
//! Run with `-malloc_limit_mb=512`: no input under `-max_len` may make the decoder allocate
//! more than that at once.

#![no_main]

use std::io::Cursor;
use std::sync::OnceLock;

use bsor_stream::bsor;
use bsor_stream::stream::{Damage, DamageKind, StreamDecoder, StreamError, StreamItem};
use bsor_stream::transcode;
use libfuzzer_sys::fuzz_target;

/// Whether to compare the events exactly as the decoder gives them (environment variable
/// `STREAM_DECODE_STRICT=1`), rather than past the known differences (`coalesce`,
/// `footer_after_junk`).
fn strict() -> bool {
    static STRICT: OnceLock<bool> = OnceLock::new();
    *STRICT.get_or_init(|| std::env::var_os("STREAM_DECODE_STRICT").is_some_and(|v| v == "1"))
}

/// The decoder skips bytes that are not a chunk as they arrive: one stretch of junk comes
/// as one `Damage` event when pushed whole, but as several (one per push) when pushed in
/// pieces. Unless `strict()`, such a `Damage` that starts where the previous one ended is
/// merged into it, so that the comparison looks past that known difference.
fn coalesce(events: &mut Vec<StreamItem>, ev: StreamItem) {
    if !strict() {
        if let (
            Some(StreamItem::Damage(prev)),
            StreamItem::Damage(Damage {
                offset,
                skipped_bytes,
                kind,
                ..
            }),
        ) = (events.last_mut(), &ev)
        {
            if prev.kind == DamageKind::NotAChunk
                && *kind == DamageKind::NotAChunk
                && prev.offset.checked_add(prev.skipped_bytes) == Some(*offset)
            {
                prev.skipped_bytes += skipped_bytes;
                return;
            }
        }
    }
    events.push(ev);
}

/// The second known difference (unless `strict()`): a footer that follows bytes that are
/// not a chunk ends the stream when a piece starts with it, but is skipped with those bytes
/// when it arrives together with them (and whatever follows it is decoded then). Tolerated
/// where the runs first differ at such a `Damage` (same offset, fewer bytes skipped in
/// pieces) and the pieces run ends right after it.
fn footer_after_junk(pieces: &[StreamItem], whole: &[StreamItem], at: usize) -> bool {
    let (Some(StreamItem::Damage(p)), Some(StreamItem::Damage(w))) =
        (pieces.get(at), whole.get(at))
    else {
        return false;
    };
    p.kind == DamageKind::NotAChunk
        && w.kind == DamageKind::NotAChunk
        && p.offset == w.offset
        && p.skipped_bytes < w.skipped_bytes
        && pieces[at + 1..] == [StreamItem::End]
}

/// What one decoder run gave.
struct Run {
    /// Every event (merged as `coalesce` says).
    events: Vec<StreamItem>,
    /// The error that stopped it.
    error: Option<StreamError>,
    ended: bool,
}

/// Drains the decoder; false once it gave an error.
fn drain(d: &mut StreamDecoder, run: &mut Run) -> bool {
    loop {
        match d.next_item() {
            Ok(Some(ev)) => {
                assert!(!run.ended, "an event after End: {ev:?}");
                run.ended = matches!(ev, StreamItem::End);
                coalesce(&mut run.events, ev);
            }
            Ok(None) => return true,
            Err(e) => {
                run.error = Some(e);
                return false;
            }
        }
    }
}

fn push_run(bytes: &[u8], mut sizes: impl FnMut() -> usize) -> Run {
    let mut d = StreamDecoder::new();
    let mut run = Run {
        events: Vec::new(),
        error: None,
        ended: false,
    };
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = sizes().min(rest.len());
        let (piece, tail) = rest.split_at(n);
        rest = tail;
        d.push(piece);
        if !drain(&mut d, &mut run) {
            return run;
        }
    }
    d.finish();
    if drain(&mut d, &mut run) {
        assert!(run.ended, "no error and no End after finish");
        assert!(matches!(d.next_item(), Ok(None)), "an event after End");
    }
    run
}

/// A LEB128 varint at `b[*p..]` as the decoder reads it (at most 10 bytes).
fn varint(b: &[u8], p: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let byte = *b.get(*p)?;
        *p += 1;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Where the stream header's CRC is (the header's bytes are `b[..at]`).
fn header_crc_at(b: &[u8]) -> Option<usize> {
    let mut p = 4 + 1 + 1 + 4; // magic, version, profile, step
    varint(b, &mut p)?; // rotation steps (two bytes in the lossy profiles)
    p += 4; // keyframe seconds
    varint(b, &mut p)?; // keyframe frames
    p += 4; // flush seconds
    let info = varint(b, &mut p)?;
    p = p.checked_add(usize::try_from(info).ok()?)?;
    (p + 4 <= b.len()).then_some(p)
}

/// Recomputes the CRCs the decoder checks: the stream header's, then those of every chunk
/// found by walking from sync marker to sync marker (a whole payload's CRC, and the chunk
/// header's), and the footer's if the input ends with the footer magic.
fn fix_crcs(b: &mut [u8]) {
    let put = |b: &mut [u8], at: usize, crc: u32| b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    let mut p = 0;
    if b.starts_with(b"BSRS") {
        if let Some(at) = header_crc_at(b) {
            let crc = crc32fast::hash(&b[..at]);
            put(b, at, crc);
            p = at + 4;
        }
    }
    while p < b.len() {
        if b[p] != 0xB5 {
            p += 1;
            continue;
        }
        let start = p;
        let mut q = p + 2; // sync, type
        let fields = (|| {
            for _ in 0..3 {
                varint(b, &mut q)?; // seq, first, count
            }
            q += 4; // t0
            let len = varint(b, &mut q)?;
            Some(len)
        })();
        let Some(len) = fields else { break };
        let crc_at = q; // payload CRC, then the header CRC
        if crc_at + 8 > b.len() {
            break;
        }
        let payload = crc_at + 8;
        let end = usize::try_from(len).ok().and_then(|l| payload.checked_add(l));
        if let Some(end) = end.filter(|&e| e <= b.len()) {
            let crc = crc32fast::hash(&b[payload..end]);
            put(b, crc_at, crc);
            let crc = crc32fast::hash(&b[start..crc_at + 4]);
            put(b, crc_at + 4, crc);
            p = end;
        } else {
            let crc = crc32fast::hash(&b[start..crc_at + 4]);
            put(b, crc_at + 4, crc);
            break;
        }
    }
    let n = b.len();
    if n >= 16 && b.ends_with(b"BSRE") {
        let crc = crc32fast::hash(&b[n - 16..n - 8]);
        put(b, n - 8, crc);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, bytes)) = data.split_first() else {
        return;
    };
    let mut fixed;
    let bytes = if ctl & 0x80 != 0 {
        fixed = bytes.to_vec();
        fix_crcs(&mut fixed);
        &fixed[..]
    } else {
        bytes
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

    // Independent of the piece sizes. Compared as `{:?}` text: a NaN in a frame is not
    // equal to itself.
    assert_eq!(chunked.error, one_piece.error, "error depends on piece sizes");
    let text = |r: &Run| r.events.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>();
    let (pieces, whole) = (text(&chunked), text(&one_piece));
    if pieces != whole {
        let at = pieces
            .iter()
            .zip(&whole)
            .position(|(a, b)| a != b)
            .unwrap_or(pieces.len().min(whole.len()));
        if !strict() && footer_after_junk(&chunked.events, &one_piece.events, at) {
            return;
        }
        panic!(
            "events depend on piece sizes: {} (pieces) vs {} (one piece) events, first \
             difference at {at}:\n  pieces:    {:?}\n  one piece: {:?}",
            pieces.len(),
            whole.len(),
            pieces.get(at),
            whole.get(at),
        );
    }

    // The whole-buffer helpers.
    match transcode::decode_replay(bytes) {
        Ok((replay, _recovery)) => {
            assert!(one_piece.error.is_none(), "decode_replay accepts what the decoder rejects");
            let _ = bsor::to_vec(&replay);
        }
        Err(e) => assert_eq!(Some(e), one_piece.error, "decode_replay fails differently"),
    }
    let _ = transcode::decode_span(bytes, 1.0, 3.0);
    let _ = transcode::read_events(&mut Cursor::new(bytes));
});

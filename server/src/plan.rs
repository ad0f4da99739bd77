//! The replay server's decisions without I/O: what an upload is, whether it is a replay the
//! server keeps, its ID, the byte ranges a request reads from a stored stream, and the
//! search cursor. The shells (`store.rs`, `index.rs`, `server/src/http.rs`) do what
//! these say.

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::stream::{ChunkType, IndexEntry};

/// Hex digits of a replay ID (`http.md` §7).
pub const ID_HEX: usize = 32;

/// The derive-key context of a replay's ID.
const CONTEXT_ID: &str = "bsor-stream server replay id v1";

/// What an upload's body is, by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Classic BSOR (its magic number).
    Bsor,
    /// A `.bsors` stream (`BSRS`).
    Stream,
    /// A legacy ScoreSaber replay JSON (`{`, after white space).
    LegacyJson,
}

/// The kind of an upload's (decompressed) body, or `None` when it is none of them.
pub fn sniff(body: &[u8]) -> Option<Kind> {
    if body.starts_with(&bsor::MAGIC.to_le_bytes()) {
        return Some(Kind::Bsor);
    }
    if body.starts_with(&bsor_stream_core::stream::STREAM_MAGIC) {
        return Some(Kind::Stream);
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    (first == Some(&b'{')).then_some(Kind::LegacyJson)
}

/// Gzip's magic bytes: a body that starts with them without `Content-Encoding: gzip` is
/// taken as gzip too (some uploaders do not say it).
pub fn looks_gzipped(body: &[u8]) -> bool {
    body.starts_with(&[0x1f, 0x8b])
}

/// Counts a replay may hold at most (besides the byte limits).
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// Frames (an hour at 120 fps by default).
    pub frames: usize,
    /// Note events.
    pub notes: usize,
    /// Walls, heights and pauses, each.
    pub others: usize,
    /// Bytes after the last section a reader knows (kept and served byte for byte, so
    /// bounded: [`MAX_TRAILING`] by default).
    pub trailing: usize,
}

/// The most trailing bytes a replay may carry by default: 64 KiB. BeatLeader's own data
/// goes in the user data section; bytes after it are a writer's leftovers.
pub const MAX_TRAILING: usize = 64 << 10;

impl Default for Counts {
    fn default() -> Self {
        Counts {
            frames: 3600 * 120,
            notes: 50_000,
            others: 50_000,
            trailing: MAX_TRAILING,
        }
    }
}

/// Why a parsed replay is not one the server keeps (`http.md` §7.2).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// No note event.
    #[error("the replay has no note event")]
    NoNotes,
    /// Fewer than four frames.
    #[error("the replay has {0} frames; at least 4 are needed")]
    FewFrames(usize),
    /// A section is over its count limit.
    #[error("the replay has {count} {what}; at most {max} are accepted")]
    TooMany {
        /// Which records.
        what: &'static str,
        /// How many it has.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Too many bytes after the last known section.
    #[error(
        "the replay has {count} trailing bytes after its last section; at most {max} are accepted"
    )]
    Trailing {
        /// How many it has.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A frame's time is not a finite number.
    #[error("frame {0} has a time that is not a finite number")]
    BadFrameTime(usize),
    /// A frame's time is before the one before it.
    #[error("frame {index} goes back in time ({time} s after {before} s)")]
    Backwards {
        /// The frame.
        index: usize,
        /// Its time.
        time: f32,
        /// The time of the frame before it.
        before: f32,
    },
    /// A note's time is outside the frames' span.
    #[error("note {index} at {time} s is outside the frames' span ({first} s to {last} s)")]
    Uncovered {
        /// The note.
        index: usize,
        /// Its event time.
        time: f32,
        /// The first frame's time.
        first: f32,
        /// The last frame's time.
        last: f32,
    },
}

/// How far a note's event time may be outside the frames' span, in seconds, besides
/// [`COVER_SHARE`] of the span: a game records a note's event up to a frame interval after
/// the last frame, and frame clocks drift from the song's (repeated frame times; the
/// synthetic replays of `synth` end about 1% early).
pub const COVER_SLACK: f32 = 0.5;
/// The share of the frames' span a note's event time may be outside it, besides
/// [`COVER_SLACK`].
pub const COVER_SHARE: f32 = 0.02;

/// Whether `r` is a replay the server keeps: at least one note and four frames, frame times
/// finite and never decreasing (they repeat in real replays), every note's event time within
/// the frames' span (give or take [`COVER_SLACK`] and [`COVER_SHARE`] of the span), and the
/// counts and trailing bytes within `limits`.
pub fn validate(r: &Replay, limits: &Counts) -> Result<(), Invalid> {
    let too_many = |what, count: usize, max: usize| {
        (count > max).then_some(Invalid::TooMany { what, count, max })
    };
    if let Some(e) = too_many("frames", r.frames.len(), limits.frames)
        .or_else(|| too_many("notes", r.notes.len(), limits.notes))
        .or_else(|| too_many("walls", r.walls.len(), limits.others))
        .or_else(|| too_many("heights", r.heights.len(), limits.others))
        .or_else(|| too_many("pauses", r.pauses.len(), limits.others))
    {
        return Err(e);
    }
    if r.trailing.len() > limits.trailing {
        return Err(Invalid::Trailing {
            count: r.trailing.len(),
            max: limits.trailing,
        });
    }
    if r.notes.is_empty() {
        return Err(Invalid::NoNotes);
    }
    if r.frames.len() < 4 {
        return Err(Invalid::FewFrames(r.frames.len()));
    }
    let mut before = f32::NEG_INFINITY;
    for (index, f) in r.frames.iter().enumerate() {
        if !f.time.is_finite() {
            return Err(Invalid::BadFrameTime(index));
        }
        if f.time < before {
            return Err(Invalid::Backwards {
                index,
                time: f.time,
                before,
            });
        }
        before = f.time;
    }
    let first = r.frames[0].time;
    let last = before;
    let slack = COVER_SLACK + COVER_SHARE * (last - first);
    for (index, n) in r.notes.iter().enumerate() {
        let t = n.event_time;
        if !(t >= first - slack && t <= last + slack) {
            return Err(Invalid::Uncovered {
                index,
                time: t,
                first,
                last,
            });
        }
    }
    Ok(())
}

/// A replay's ID: the first 16 bytes of BLAKE3 (derive-key mode, `CONTEXT_ID`) over its
/// BSOR bytes, as [`ID_HEX`] lower-case hex digits. The same file gets the same ID however
/// it is uploaded (BSOR, `.bsors`, gzip or not), by whichever server.
pub fn replay_id(bsor: &[u8]) -> String {
    let h = blake3::Hasher::new_derive_key(CONTEXT_ID)
        .update(bsor)
        .finalize();
    bsor_stream_core::integrity::hex(&h.as_bytes()[..ID_HEX / 2])
}

/// Whether `s` is a replay ID: exactly [`ID_HEX`] lower-case hex digits. Nothing else
/// names a stored replay, so no path or query can reach outside the store.
pub fn is_id(s: &str) -> bool {
    s.len() == ID_HEX && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The fewest bytes of a chunk header (`format.md` §5): sync and type, three one-byte
/// varints, `t0`, a one-byte length and two CRCs.
pub const CHUNK_HEADER_MIN: usize = 18;

/// How many bytes from a chunk's start are needed to know its header, judging by the
/// `prefix` read so far: its length once the prefix shows it, otherwise a lower bound (each
/// varint not yet seen taken as one byte). Never less than [`CHUNK_HEADER_MIN`].
pub fn chunk_header_needs(prefix: &[u8]) -> usize {
    let mut at = 2;
    let varint = |at: &mut usize| {
        while let Some(b) = prefix.get(*at) {
            *at += 1;
            if b & 0x80 == 0 {
                return;
            }
        }
        *at += 1;
    };
    for _ in 0..3 {
        varint(&mut at);
    }
    at += 4;
    varint(&mut at);
    (at + 8).max(CHUNK_HEADER_MIN)
}

/// Where a stored stream's index chunk starts and its length, as its footer says, for a
/// stream of `len` bytes whose last [`FOOTER_SIZE`](bsor_stream_core::stream::FOOTER_SIZE) bytes are
/// `footer`. `None` when there is no footer or it points outside the stream.
pub fn index_span(footer: &[u8], len: u64) -> Option<(u64, u64)> {
    let at = bsor_stream_core::stream::parse_footer(footer)?;
    let end = len.checked_sub(bsor_stream_core::stream::FOOTER_SIZE as u64)?;
    (at < end && end - at <= MAX_INDEX_BYTES).then_some((at, end - at))
}

/// The largest index chunk read.
pub const MAX_INDEX_BYTES: u64 = 4 << 20;

/// The offsets of the event chunks, in file order, from a stream's index.
pub fn event_chunks(index: &[IndexEntry]) -> Vec<u64> {
    let mut v: Vec<u64> = index
        .iter()
        .filter(|e| e.kind == ChunkType::Events)
        .map(|e| e.offset)
        .collect();
    v.sort_unstable();
    v
}

/// The byte range `begin..end` of a stored stream that holds the keyframe groups covering
/// song time `from..=to` (with the events between them), from its index; `stream_end` is
/// where the trailer (or index) starts. `None` when the index has no keyframe chunk.
pub fn span_range(index: &[IndexEntry], from: f32, to: f32, stream_end: u64) -> Option<(u64, u64)> {
    let mut keys: Vec<&IndexEntry> = index
        .iter()
        .filter(|e| e.kind == ChunkType::Keyframes)
        .collect();
    keys.sort_by_key(|e| e.offset);
    let start = keys.iter().rposition(|e| e.t0 <= from).unwrap_or(0);
    let begin = keys.get(start)?.offset;
    let trailer = index
        .iter()
        .filter(|e| e.kind == ChunkType::Trailer)
        .map(|e| e.offset)
        .min()
        .unwrap_or(stream_end)
        .min(stream_end);
    let end = keys
        .iter()
        .skip(start + 1)
        .find(|e| e.t0 > to)
        .map_or(trailer, |e| e.offset);
    (begin < end).then_some((begin, end))
}

/// A search's cursor: the upload time and ID of the last replay of the page before, as
/// opaque text (hex of `TIME.ID`).
pub fn cursor(uploaded: i64, id: &str) -> String {
    bsor_stream_core::integrity::hex(format!("{uploaded}.{id}").as_bytes())
}

/// The upload time and ID a cursor holds, or `None` when it is not one.
pub fn parse_cursor(s: &str) -> Option<(i64, String)> {
    if s.len() > 2 * (20 + 1 + ID_HEX) {
        return None;
    }
    let bytes = bsor_stream_core::integrity::from_hex(s)?;
    let text = String::from_utf8(bytes).ok()?;
    let (t, id) = text.split_once('.')?;
    let t: i64 = t.parse().ok()?;
    (t >= 0 && is_id(id)).then(|| (t, id.to_string()))
}

/// The most characters of a `Bsor-Witness` header's value (`http.md` §8.2.2): 12 KiB of
/// base64, 9 KiB of records, 56 statements; the request's head as a whole stays within the
/// relay's 16 KiB.
pub const MAX_WITNESS_HEADER: usize = 12 << 10;

/// The `.witness` file's bytes (`integrity.md` §12.2) carried by a `Bsor-Witness` header's
/// value: standard base64 (padded or not) of one or more whole records. Anything else is
/// refused `400` `bad-witness`; whether the statements check is not decided here.
pub fn witness_header(value: &str) -> Result<Vec<u8>, super::Refusal> {
    use base64::Engine as _;
    let bad = |why: String| {
        super::Refusal::new(
            super::Cause::Invalid,
            "bad-witness",
            format!("Bsor-Witness: {why}"),
        )
    };
    let value = value.trim();
    if value.len() > MAX_WITNESS_HEADER {
        return Err(bad(format!(
            "{} characters, over the {MAX_WITNESS_HEADER} allowed",
            value.len()
        )));
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bytes = engine
        .decode(value)
        .map_err(|e| bad(format!("not base64 ({e})")))?;
    let file = bsor_stream_core::integrity::witness::parse_file(&bytes);
    if file.cut {
        return Err(bad(format!(
            "the last record is cut short after {} whole ones",
            file.records.len()
        )));
    }
    if file.records.is_empty() {
        return Err(bad("no statement record".into()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bsor_stream_core::synth::{replay, Settings};

    #[test]
    fn a_witness_header_is_base64_of_whole_records() {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        // One record: a length and that many bytes (whether it is a statement is not
        // decided here).
        let mut file = 158u32.to_le_bytes().to_vec();
        file.extend_from_slice(&[7u8; 158]);
        assert_eq!(witness_header(&b64(&file)).unwrap(), file);
        assert_eq!(
            witness_header(b64(&file).trim_end_matches('=')).unwrap(),
            file
        );
        let code = |v: &str| witness_header(v).unwrap_err();
        for (value, why) in [
            ("not base64!".to_string(), "not base64"),
            (String::new(), "no statement"),
            (b64(&file[..100]), "cut short"),
            ("A".repeat(MAX_WITNESS_HEADER + 4), "over the"),
        ] {
            let e = code(&value);
            assert_eq!(
                (e.cause, e.code),
                (super::super::Cause::Invalid, "bad-witness")
            );
            assert!(e.reason.contains(why), "{}", e.reason);
        }
    }

    #[test]
    fn sniffing_by_the_first_bytes() {
        let r = replay(Settings {
            seed: 1,
            seconds: 2.0,
            fps: 30,
        });
        let b = bsor::to_vec(&r).unwrap();
        assert_eq!(sniff(&b), Some(Kind::Bsor));
        let s = bsor_stream_core::transcode::encode_replay(
            &r,
            bsor_stream_core::stream::Settings::archive(
                bsor_stream_core::stream::Profile::Lossless,
            ),
        );
        assert_eq!(sniff(&s), Some(Kind::Stream));
        assert_eq!(sniff(b"  \n{\"x\":1}"), Some(Kind::LegacyJson));
        assert_eq!(sniff(b"GIF89a"), None);
        assert_eq!(sniff(b""), None);
        assert!(looks_gzipped(&[0x1f, 0x8b, 8]));
    }

    #[test]
    fn validation_refuses_what_is_not_a_play() {
        let good = replay(Settings {
            seed: 2,
            seconds: 5.0,
            fps: 30,
        });
        let limits = Counts::default();
        assert_eq!(validate(&good, &limits), Ok(()));
        // What `synth --seconds 240` writes (its frames end about 1% early) is a play.
        let long = replay(Settings {
            seed: 3,
            seconds: 240.0,
            fps: 90,
        });
        assert_eq!(validate(&long, &limits), Ok(()));
        let mut r = good.clone();
        r.notes.clear();
        assert_eq!(validate(&r, &limits), Err(Invalid::NoNotes));
        let mut r = good.clone();
        r.frames.truncate(3);
        assert_eq!(validate(&r, &limits), Err(Invalid::FewFrames(3)));
        let mut r = good.clone();
        r.frames[5].time = r.frames[3].time - 0.1;
        assert!(matches!(
            validate(&r, &limits),
            Err(Invalid::Backwards { index: 5, .. })
        ));
        let mut r = good.clone();
        r.frames[2].time = r.frames[1].time; // repeats are fine
        assert_eq!(validate(&r, &limits), Ok(()));
        r.frames[2].time = f32::NAN;
        assert_eq!(validate(&r, &limits), Err(Invalid::BadFrameTime(2)));
        let mut r = good.clone();
        let last = r.frames.last().unwrap().time;
        r.notes.last_mut().unwrap().event_time = last + 10.0;
        assert!(matches!(
            validate(&r, &limits),
            Err(Invalid::Uncovered { .. })
        ));
        let small = Counts {
            frames: 10,
            ..Counts::default()
        };
        assert!(matches!(
            validate(&good, &small),
            Err(Invalid::TooMany { what: "frames", .. })
        ));
        // Trailing bytes: up to the cap kept, one more refused.
        let mut r = good.clone();
        r.trailing = vec![0; MAX_TRAILING];
        assert_eq!(validate(&r, &limits), Ok(()));
        r.trailing.push(0);
        assert_eq!(
            validate(&r, &limits),
            Err(Invalid::Trailing {
                count: MAX_TRAILING + 1,
                max: MAX_TRAILING
            })
        );
    }

    #[test]
    fn ids_are_fixed_hex_and_nothing_else_is_one() {
        let id = replay_id(b"abc");
        assert_eq!(id.len(), ID_HEX);
        assert!(is_id(&id));
        assert_ne!(id, replay_id(b"abd"));
        for bad in [
            "",
            "../etc/passwd",
            &id[1..],
            &format!("{id}0"),
            &id.to_uppercase(),
            "g0000000000000000000000000000000",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
    }

    #[test]
    fn chunk_header_lengths_from_a_prefix() {
        let mut out = Vec::new();
        bsor_stream_core::stream::ChunkHeader {
            kind: ChunkType::Events,
            seq: 300,
            first: 70_000,
            count: 5,
            t0: 1.0,
            len: 0,
            payload_crc: 0,
        }
        .write_to(&[7u8; 200], &mut out);
        let (_, hlen) = bsor_stream_core::stream::ChunkHeader::parse_at(&out).unwrap();
        let mut have = 0;
        let mut reads = 0;
        loop {
            let need = chunk_header_needs(&out[..have]);
            assert!(need <= hlen, "asked {need} of a {hlen}-byte header");
            if need == have {
                break;
            }
            have = need;
            reads += 1;
        }
        assert_eq!(have, hlen);
        assert!(reads <= 4, "{reads}");
    }

    #[test]
    fn cursors_round_trip_and_refuse_junk() {
        let id = replay_id(b"x");
        let c = cursor(1_700_000_000_123, &id);
        assert_eq!(parse_cursor(&c), Some((1_700_000_000_123, id.clone())));
        assert_eq!(parse_cursor("zz"), None);
        assert_eq!(
            parse_cursor(&bsor_stream_core::integrity::hex(b"1.x")),
            None
        );
        assert_eq!(
            parse_cursor(&bsor_stream_core::integrity::hex(b"-1.x")),
            None
        );
        assert_eq!(parse_cursor(&"ab".repeat(500)), None);
    }

    #[test]
    fn a_span_takes_the_groups_that_cover_it() {
        let r = replay(Settings {
            seed: 3,
            seconds: 40.0,
            fps: 30,
        });
        let s = bsor_stream_core::transcode::encode_replay(
            &r,
            bsor_stream_core::stream::Settings::archive(
                bsor_stream_core::stream::Profile::Lossless,
            ),
        );
        let (_, index) = bsor_stream_core::transcode::read_index(&mut std::io::Cursor::new(&s))
            .unwrap()
            .unwrap();
        let (begin, end) = span_range(&index, 12.0, 15.0, s.len() as u64).unwrap();
        let keys: Vec<&IndexEntry> = index
            .iter()
            .filter(|e| e.kind == ChunkType::Keyframes)
            .collect();
        assert!(keys.len() >= 4);
        let first = keys.iter().find(|e| e.offset == begin).unwrap();
        assert!(first.t0 <= 12.0);
        assert!(begin > keys[0].offset && end < s.len() as u64);
        assert!(span_range(&[], 0.0, 1.0, 10).is_none());
    }
}

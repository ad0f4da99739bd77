//! `GET /sessions/NAME/events` (`http.md` §4.1): a session's event chunks so far, read from
//! its archive file (which is written as the chunks arrive, so it serves a live session's
//! past too): what a viewer who joined late needs for the score from the start.

use bsor_stream_core::net::archive::read_full;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::Path;

use bsor_stream_core::stream::{ChunkHeader, ChunkType, StreamHeader};

/// The most bytes of event chunks one answer holds (a long, dense session has well under
/// 1 MiB of them).
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// The longest stream header read (its info block's strings are short; the format caps it
/// far lower in practice).
const MAX_HEADER: usize = 1 << 20;

/// The longest chunk header (`format.md` §4.1).
const MAX_CHUNK_HEADER: usize = 34;

/// What [`read`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Events {
    /// The body: the stream header, then each whole event chunk in file order, each after
    /// one byte, 1 when a keyframe chunk comes between it and the event chunk before it
    /// (or, for the first, before it at all), else 0.
    Body(Vec<u8>),
    /// The file ends inside its stream header, or it does not parse.
    NoHeader,
    /// More than [`MAX_EVENT_BYTES`] of event chunks.
    TooLarge,
}

/// The event chunks of the stream in `file`, up to the first chunk that is not whole yet
/// (a live session's file grows as this reads it) or does not parse. Reads the chunk headers
/// and the event chunks, and skips every other payload.
pub fn read(file: &Path) -> io::Result<Events> {
    let mut f = BufReader::with_capacity(64 << 10, File::open(file)?);
    // The stream header: read more until it parses.
    let mut head = Vec::new();
    let hlen = loop {
        let want = (head.len().max(2048) * 2).min(MAX_HEADER);
        let had = head.len();
        head.resize(want, 0);
        let n = read_full(&mut f, &mut head[had..])?;
        head.truncate(had + n);
        match StreamHeader::parse_prefix_len(&head) {
            Ok(Some((_, len))) => break len,
            Ok(None) if n > 0 && head.len() < MAX_HEADER => continue,
            _ => return Ok(Events::NoHeader),
        }
    };
    let mut out = head[..hlen].to_vec();
    // Where the reader is, in the file, and the bytes read past the header.
    let mut rest = head.split_off(hlen);
    let mut new_group = 0u8;
    let mut events = 0usize;
    loop {
        if rest.len() < MAX_CHUNK_HEADER {
            let had = rest.len();
            rest.resize(MAX_CHUNK_HEADER, 0);
            let n = read_full(&mut f, &mut rest[had..])?;
            rest.truncate(had + n);
        }
        let Some((h, len)) = ChunkHeader::parse_at(&rest) else {
            break;
        };
        let total = len + h.len as usize;
        match h.kind {
            ChunkType::Events => {
                if events + total > MAX_EVENT_BYTES {
                    return Ok(Events::TooLarge);
                }
                let mut chunk = std::mem::take(&mut rest);
                if chunk.len() > total {
                    rest = chunk.split_off(total);
                } else {
                    let had = chunk.len();
                    chunk.resize(total, 0);
                    if read_full(&mut f, &mut chunk[had..])? < total - had {
                        break;
                    }
                }
                out.push(new_group);
                out.extend_from_slice(&chunk);
                events += total;
                new_group = 0;
            }
            kind => {
                if kind == ChunkType::Keyframes {
                    new_group = 1;
                }
                if rest.len() >= total {
                    rest.drain(..total);
                } else {
                    let skip = (total - rest.len()) as i64;
                    rest.clear();
                    // Past the end of a file still being written: the next read finds
                    // nothing, and the loop ends.
                    f.seek_relative(skip)?;
                }
            }
        }
    }
    Ok(Events::Body(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bsor_stream_core::stream::{Profile, Settings};

    #[test]
    fn every_event_chunk_with_its_group_flag_and_nothing_else() {
        let r = bsor_stream_core::synth::replay(bsor_stream_core::synth::Settings {
            seed: 5,
            seconds: 12.0,
            fps: 30,
        });
        let bytes =
            bsor_stream_core::transcode::encode_replay(&r, Settings::live(Profile::Compact));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.bsors");
        std::fs::write(&path, &bytes).unwrap();
        let Events::Body(body) = read(&path).unwrap() else {
            panic!("no body")
        };
        let (_, hlen) = StreamHeader::parse_prefix_len(&bytes).unwrap().unwrap();
        assert_eq!(body[..hlen], bytes[..hlen]);
        // The same chunks, walked in the file.
        let mut want = Vec::new();
        let (mut at, mut flag) = (hlen, 0u8);
        while let Some((h, len)) = ChunkHeader::parse_at(&bytes[at..]) {
            let total = len + h.len as usize;
            match h.kind {
                ChunkType::Events => {
                    want.push(flag);
                    want.extend_from_slice(&bytes[at..at + total]);
                    flag = 0;
                }
                ChunkType::Keyframes => flag = 1,
                _ => {}
            }
            at += total;
        }
        assert!(want.len() > 100);
        assert_eq!(body[hlen..], want[..]);
        // A file cut anywhere gives the whole event chunks before the cut, never an error.
        for cut in [hlen - 1, hlen, hlen + 7, bytes.len() / 2, bytes.len() - 20] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            match read(&path).unwrap() {
                Events::NoHeader => assert!(cut < hlen),
                Events::Body(b) => assert!(b.len() <= body.len() && body.starts_with(&b)),
                Events::TooLarge => panic!("too large"),
            }
        }
    }
}

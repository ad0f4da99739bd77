//! A stored stream's BSOR rebuilt in pieces, without I/O (`http.md` §8.6): the head (from
//! the trailer's info and frame count) first, then the frames keyframe group by keyframe
//! group as the stream's chunks are pushed in order, gathering the events among them, then
//! the tail (the event sections and what follows them). Memory: one group's bytes and the
//! events.
//!
//! [`bsor_stream_core::transcode::BsorSink`] does this for a sink it can seek back into; a download
//! cannot, so the counts it patches afterwards are taken from the trailer here instead.

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::stream::{EventBatch, StreamDecoder, StreamHeader, StreamItem, Trailer};
use bsor_stream_core::transcode::EventSections;

/// Why a stored stream's BSOR could not be rebuilt: what does not match, and where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// The trailer's frame count does not fit in memory's addresses.
    #[error("the trailer counts {0} frames")]
    FrameCount(u64),
    /// The BSOR writer refused the info or the records.
    #[error(transparent)]
    Write(#[from] bsor::WriteError),
    /// A section's records are not as many as the trailer counts.
    #[error("the trailer counts {counted} {what}, the event chunks hold {found}")]
    EventCount {
        /// The section: "notes", "walls", "heights" or "pauses".
        what: &'static str,
        /// The trailer's count.
        counted: u64,
        /// The records the event chunks hold.
        found: usize,
    },
    /// Frames out of order, or more than the trailer counts.
    #[error("frames {first} to {last} where frame {due} of {expected} was due")]
    FrameOrder {
        /// The first frame of the chunk.
        first: u64,
        /// Its last frame.
        last: u64,
        /// The frame due next.
        due: u64,
        /// The trailer's frame count.
        expected: u64,
    },
    /// Fewer frames than the trailer counts.
    #[error("{written} frames of the {expected} the trailer counts")]
    MissingFrames {
        /// The frames that came.
        written: u64,
        /// The trailer's count.
        expected: u64,
    },
    /// A section of events with a gap.
    #[error("the event chunks leave a gap")]
    EventGap,
    /// Damage the stream decoder found.
    #[error("the stream: {0}")]
    Damage(bsor_stream_core::stream::Damage),
    /// The stream decoder's error.
    #[error("the stream: {0}")]
    Stream(#[from] bsor_stream_core::stream::StreamError),
}

/// The BSOR's bytes before its frames, for a stream whose trailer is `trailer`.
pub fn head(trailer: &Trailer) -> Result<Vec<u8>, RebuildError> {
    let frames = usize::try_from(trailer.counts.frames)
        .map_err(|_| RebuildError::FrameCount(trailer.counts.frames))?;
    let mut head = Vec::new();
    bsor::write_head(&trailer.info, frames, &mut head)?;
    Ok(head)
}

/// The BSOR's bytes after its frames, for a stream whose trailer is `trailer` and whose
/// events are `events` (gathered in order, each section from its first record): `Err`
/// saying what does not match when the events are not the ones the trailer counts.
pub fn tail(trailer: &Trailer, events: EventBatch) -> Result<Vec<u8>, RebuildError> {
    let c = &trailer.counts;
    let have = [
        ("notes", c.notes, events.notes.records.len()),
        ("walls", c.walls, events.walls.records.len()),
        ("heights", c.heights, events.heights.records.len()),
        ("pauses", c.pauses, events.pauses.records.len()),
    ];
    for (what, counted, found) in have {
        if counted != found as u64 {
            return Err(RebuildError::EventCount {
                what,
                counted,
                found,
            });
        }
    }
    let tail = Replay {
        notes: events.notes.records,
        walls: events.walls.records,
        heights: events.heights.records,
        pauses: events.pauses.records,
        controller_offsets: trailer.controller_offsets,
        user_data: trailer.user_data.clone(),
        trailing: trailer.trailing.clone(),
        ..Replay::default()
    };
    let mut out = Vec::new();
    bsor::write_tail(&tail, &mut out)?;
    Ok(out)
}

/// The frame records of a stored stream, from its chunks pushed in order (a keyframe group
/// at a time): every frame must come, in order, undamaged, and no more than `expected`.
/// The event chunks among them are gathered for [`tail`].
#[derive(Debug)]
pub struct Frames {
    decoder: StreamDecoder,
    written: u64,
    expected: u64,
    events: EventBatch,
    gaps: bool,
}

impl Frames {
    /// Frames of a stream with `header`, `expected` of them.
    pub fn new(header: StreamHeader, expected: u64) -> Frames {
        Frames::starting_at(header, 0, expected)
    }

    /// Frames of a stream with `header` from frame `first` (the first frame of the keyframe
    /// group pushed first), `expected` in the whole stream.
    pub fn starting_at(header: StreamHeader, first: u64, expected: u64) -> Frames {
        Frames {
            decoder: StreamDecoder::with_header(header).bsor_records(),
            written: first,
            expected,
            events: EventBatch::default(),
            gaps: false,
        }
    }

    /// The BSOR records of the frames in `chunks` (the next bytes of the stream, from a
    /// chunk's start): `Err` saying what was wrong at the first damage, gap or extra frame.
    pub fn push(&mut self, chunks: &[u8]) -> Result<Vec<u8>, RebuildError> {
        self.decoder.push(chunks);
        self.drain(usize::MAX)
    }

    /// Takes the next bytes of the stream (as [`push`](Self::push)) without decoding them
    /// yet: [`next`](Self::next) decodes them as their records are asked for.
    pub fn feed(&mut self, chunks: &[u8]) {
        self.decoder.push(chunks);
    }

    /// The BSOR records of the chunks fed and not yet decoded, a chunk at a time until
    /// `max` bytes or more are made (empty when the decoder needs more bytes): what a
    /// download holds decoded at once is a piece, not all it read.
    pub fn next(&mut self, max: usize) -> Result<Vec<u8>, RebuildError> {
        self.drain(max)
    }

    /// The frames still held, once every chunk was pushed: `Err` also when fewer frames
    /// came than expected.
    pub fn finish(&mut self) -> Result<Vec<u8>, RebuildError> {
        self.decoder.finish();
        let out = self.drain(usize::MAX)?;
        if self.written != self.expected {
            return Err(RebuildError::MissingFrames {
                written: self.written,
                expected: self.expected,
            });
        }
        Ok(out)
    }

    /// The frames still held, once every chunk asked for was pushed, when the stream's
    /// later chunks are not (no check that every frame came).
    pub fn end(&mut self) -> Result<Vec<u8>, RebuildError> {
        self.decoder.finish();
        self.drain(usize::MAX)
    }

    /// Frames written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The events gathered from the chunks pushed, once [`finish`](Self::finish) returned:
    /// `Err` when a section has a gap.
    pub fn events(self) -> Result<EventBatch, RebuildError> {
        if self.gaps {
            return Err(RebuildError::EventGap);
        }
        Ok(self.events)
    }

    fn drain(&mut self, max: usize) -> Result<Vec<u8>, RebuildError> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.decoder.next_item() {
                Ok(Some(StreamItem::FrameRecords { first, records })) => {
                    let count = (records.len() / bsor::FRAME_SIZE) as u64;
                    if u64::from(first) != self.written || self.written + count > self.expected {
                        return Err(RebuildError::FrameOrder {
                            first: u64::from(first),
                            last: u64::from(first) + count.saturating_sub(1),
                            due: self.written,
                            expected: self.expected,
                        });
                    }
                    if out.is_empty() {
                        out = records;
                    } else {
                        out.extend_from_slice(&records);
                    }
                    self.written += count;
                }
                Ok(Some(StreamItem::Events(b))) => {
                    let e = &mut self.events;
                    EventSections {
                        notes: &mut e.notes.records,
                        walls: &mut e.walls.records,
                        heights: &mut e.heights.records,
                        pauses: &mut e.pauses.records,
                    }
                    .place(&b, &mut self.gaps);
                }
                Ok(Some(StreamItem::Damage(d))) => return Err(RebuildError::Damage(d)),
                Ok(Some(_)) => {}
                Ok(None) => return Ok(out),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bsor_stream_core::stream::{split_stream, ChunkType, Profile, Settings};

    fn pieces(stream: &[u8]) -> (StreamHeader, Trailer, Vec<&[u8]>) {
        let (header, header_len, spans) = split_stream(stream).unwrap();
        let mut d = StreamDecoder::new();
        d.push(stream);
        d.finish();
        let mut trailer = None;
        while let Some(item) = d.next_item().unwrap() {
            if let StreamItem::Trailer(t) = item {
                trailer = Some(*t);
            }
        }
        let mut cuts: Vec<usize> = spans
            .iter()
            .filter(|s| stream.get(s.offset + 1) == Some(&ChunkType::Keyframes.byte()))
            .map(|s| s.offset)
            .collect();
        let trailer_at = spans
            .iter()
            .find(|s| stream.get(s.offset + 1) == Some(&ChunkType::Trailer.byte()))
            .unwrap()
            .offset;
        cuts.insert(0, header_len);
        cuts.push(trailer_at);
        cuts.dedup();
        let groups = cuts.windows(2).map(|w| &stream[w[0]..w[1]]).collect();
        (header, trailer.unwrap(), groups)
    }

    #[test]
    fn pieces_make_the_same_bsor_as_a_whole_rebuild() {
        let replay = bsor_stream_core::synth::replay(bsor_stream_core::synth::Settings {
            seed: 3,
            seconds: 60.0,
            fps: 90,
        });
        let stream = bsor_stream_core::transcode::encode_replay(
            &replay,
            Settings::archive(Profile::Lossless),
        );
        let (header, trailer, groups) = pieces(&stream);
        assert!(groups.len() > 2, "{} groups", groups.len());
        let mut frames = Frames::new(header, trailer.counts.frames);
        let mut out = head(&trailer).unwrap();
        for g in groups {
            out.extend(frames.push(g).unwrap());
        }
        out.extend(frames.finish().unwrap());
        let events = frames.events().unwrap();
        assert_eq!(events.notes.records, replay.notes);
        assert_eq!(events.walls.records, replay.walls);
        out.extend(tail(&trailer, events).unwrap());
        assert!(out == bsor::to_vec(&replay).unwrap(), "the pieces differ");
    }

    #[test]
    fn a_span_fed_whole_is_decoded_a_piece_at_a_time() {
        let replay = bsor_stream_core::synth::replay(bsor_stream_core::synth::Settings {
            seed: 5,
            seconds: 120.0,
            fps: 90,
        });
        let stream = bsor_stream_core::transcode::encode_replay(
            &replay,
            Settings::archive(Profile::Lossless),
        );
        let (header, trailer, groups) = pieces(&stream);
        // The whole stream fed at once, as a download reads a span of several groups.
        let all: Vec<u8> = groups.concat();
        let mut frames = Frames::new(header.clone(), trailer.counts.frames);
        frames.feed(&all);
        let max = 16 << 10;
        // A keyframe group's records at most past `max`: the largest group's.
        let mut whole = Frames::new(header, trailer.counts.frames);
        let largest = groups
            .iter()
            .map(|g| whole.push(g).unwrap().len())
            .max()
            .unwrap();
        let mut out = Vec::new();
        let mut pieces_made = 0;
        loop {
            let piece = frames.next(max).unwrap();
            if piece.is_empty() {
                break;
            }
            assert!(piece.len() < max + largest, "{} bytes", piece.len());
            pieces_made += 1;
            out.extend(piece);
        }
        out.extend(frames.finish().unwrap());
        assert!(pieces_made > 2, "{pieces_made} pieces");
        let want: Vec<u8> = replay.frames.iter().flat_map(bsor::encode_frame).collect();
        assert!(out == want, "the pieces differ from the frames");
    }

    #[test]
    fn a_damaged_or_missing_group_is_an_error() {
        let replay = bsor_stream_core::synth::replay(bsor_stream_core::synth::Settings {
            seed: 4,
            seconds: 60.0,
            fps: 90,
        });
        let stream = bsor_stream_core::transcode::encode_replay(
            &replay,
            Settings::archive(Profile::Lossless),
        );
        let (header, trailer, groups) = pieces(&stream);
        // A flipped byte in the second group's payload.
        let mut bad = groups[1].to_vec();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x55;
        let mut frames = Frames::new(header.clone(), trailer.counts.frames);
        frames.push(groups[0]).unwrap();
        assert!(frames.push(&bad).is_err());
        // A group left out: the frame numbers jump.
        let mut frames = Frames::new(header.clone(), trailer.counts.frames);
        frames.push(groups[0]).unwrap();
        let skipped: Result<Vec<_>, _> = groups[2..].iter().map(|g| frames.push(g)).collect();
        assert!(skipped.is_err() || frames.finish().is_err());
        // Fewer frames than the trailer counts.
        let mut frames = Frames::new(header, trailer.counts.frames + 1);
        for g in &groups {
            frames.push(g).unwrap();
        }
        let e = frames.finish().unwrap_err();
        assert!(matches!(e, RebuildError::MissingFrames { .. }), "{e}");
        assert!(e.to_string().contains("frames of the"), "{e}");
        // Event counts that do not match the trailer's.
        let mut short = EventBatch::default();
        short.notes.records.push(replay.notes[0]);
        let e = tail(&trailer, short).unwrap_err();
        assert!(
            matches!(e, RebuildError::EventCount { what: "notes", counted, found: 1 } if counted == replay.notes.len() as u64),
            "{e}"
        );
    }
}

//! Whole-buffer parsing, and building a [`Replay`] from events.

use super::decode::{Decoder, Event, Limits, Step};
use super::error::{ParseError, Section};
use super::model::Replay;

/// Parses a whole BSOR file with the default [`Limits`].
///
/// ```
/// use bsor_stream_core::{bsor, synth};
///
/// let replay = synth::replay(synth::Settings {
///     seed: 7,
///     seconds: 3.0,
///     fps: 60,
/// });
/// let bytes = bsor::to_vec(&replay)?;
/// let back = bsor::parse(&bytes)?;
/// assert_eq!(back.frames.len(), replay.frames.len());
/// assert_eq!(bsor::to_vec(&back)?, bytes); // byte for byte
/// // Malformed input is an error naming where it went wrong, never a panic.
/// assert!(bsor::parse(&bytes[..100]).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse(bytes: &[u8]) -> Result<Replay, ParseError> {
    parse_with_limits(bytes, Limits::default())
}

/// Parses a whole BSOR file.
///
/// On error, [`ReplayBuilder`] fed from a [`super::PushParser`] keeps what was valid before
/// the fault; this function returns only the error.
pub fn parse_with_limits(bytes: &[u8], limits: Limits) -> Result<Replay, ParseError> {
    let mut decoder = Decoder::new(limits);
    let mut builder = ReplayBuilder::default();
    let mut pos = 0;
    loop {
        let rest = &bytes[pos..];
        // Frames are most of a file: decode them in bulk, without an event each.
        let bulk = decoder.frames_bulk(rest, &mut builder.replay.frames);
        if bulk > 0 {
            pos += bulk;
            continue;
        }
        match decoder.step(rest, true)? {
            Step::Item(event, used) => {
                pos += used;
                if let Event::SectionStart { section, count } = event {
                    // With the whole input the decoder has checked `count` against the
                    // bytes left, so this reservation is bounded by the input's size.
                    builder.reserve(section, count as usize);
                }
                builder.apply(event);
            }
            // `Finished` follows `End`, which follows the info block: the replay is whole.
            Step::Finished => return Ok(builder.replay),
            // With `eof` the decoder reports missing bytes as errors, never as this.
            Step::NeedMore(n) => return Err(decoder.truncated_at_end(n, rest.len())),
        }
    }
}

/// Parses a whole BSOR file without decoding its frames: the replay comes back with no
/// frames, together with the byte range of the frame records (92 bytes each, in the layout
/// of `bsor-v1.md`'s frames section). Everything else is checked as [`parse_with_limits`]
/// checks it, so the range holds exactly the frame count's records.
///
/// For readers that want the events only, or that lay the frames out their own way
/// (columns for array libraries).
///
/// ```
/// use bsor_stream_core::{bsor, synth};
///
/// let replay = synth::replay(synth::Settings { seed: 7, seconds: 3.0, fps: 60 });
/// let bytes = bsor::to_vec(&replay)?;
/// let (events, frames) = bsor::parse_skipping_frames(&bytes, bsor::Limits::default())?;
/// assert!(events.frames.is_empty());
/// assert_eq!(frames.len(), replay.frames.len() * bsor::FRAME_SIZE);
/// assert_eq!(events.notes, replay.notes);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_skipping_frames(
    bytes: &[u8],
    limits: Limits,
) -> Result<(Replay, std::ops::Range<usize>), ParseError> {
    let mut decoder = Decoder::new(limits);
    let mut builder = ReplayBuilder::default();
    let mut pos = 0;
    let mut frames = 0..0;
    loop {
        let rest = &bytes[pos..];
        let skipped = decoder.frames_skip(rest);
        if skipped > 0 {
            if frames.is_empty() {
                frames = pos..pos;
            }
            pos += skipped;
            frames.end = pos;
            continue;
        }
        match decoder.step(rest, true)? {
            Step::Item(event, used) => {
                pos += used;
                if let Event::SectionStart { section, count } = event {
                    if section != Section::Frames {
                        builder.reserve(section, count as usize);
                    } else {
                        frames = pos..pos;
                    }
                }
                builder.apply(event);
            }
            Step::Finished => return Ok((builder.replay, frames)),
            Step::NeedMore(n) => return Err(decoder.truncated_at_end(n, rest.len())),
        }
    }
}

/// Collects [`Event`]s into a [`Replay`]: what the whole-buffer parser does, and what a
/// caller of the push parser uses to keep everything valid before a fault.
#[derive(Clone, Debug, Default)]
pub struct ReplayBuilder {
    replay: Replay,
    has_info: bool,
    ended: bool,
}

impl ReplayBuilder {
    /// Adds one event.
    pub fn apply(&mut self, event: Event) {
        let r = &mut self.replay;
        match event {
            Event::Info(info) => {
                r.info = *info;
                self.has_info = true;
            }
            Event::SectionStart { .. } => {}
            Event::Frame(f) => r.frames.push(f),
            Event::Note(n) => r.notes.push(n),
            Event::Wall(w) => r.walls.push(w),
            Event::Height(h) => r.heights.push(h),
            Event::Pause(p) => r.pauses.push(p),
            Event::ControllerOffsets(o) => r.controller_offsets = Some(o),
            Event::UserData(d) => r.user_data = Some(d),
            Event::Trailing(t) => r.trailing = t,
            Event::End => self.ended = true,
        }
    }

    fn reserve(&mut self, section: Section, n: usize) {
        let r = &mut self.replay;
        match section {
            Section::Frames => r.frames.reserve_exact(n),
            Section::Notes => r.notes.reserve_exact(n),
            Section::Walls => r.walls.reserve_exact(n),
            Section::Heights => r.heights.reserve_exact(n),
            Section::Pauses => r.pauses.reserve_exact(n),
            _ => {}
        }
    }

    /// What has been collected so far, complete or not.
    pub fn partial(&self) -> &Replay {
        &self.replay
    }

    /// True once [`Event::End`] was applied.
    pub fn is_complete(&self) -> bool {
        self.ended
    }

    /// The replay, once the info block was seen (even if later sections are missing: see
    /// [`is_complete`](ReplayBuilder::is_complete)).
    pub fn finish(self) -> Option<Replay> {
        self.has_info.then_some(self.replay)
    }
}

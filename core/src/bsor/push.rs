//! The push parser: bytes in, in pieces of any size; events out as soon as they are whole.

use super::decode::{Decoder, Event, Limits, Step};
use super::error::ParseError;

/// A sans-IO BSOR parser, for replays still being written or downloaded.
///
/// ```
/// use bsor_stream_core::bsor::{self, Event, PushParser};
/// # let bytes = bsor::to_vec(&bsor::Replay::default()).unwrap();
/// let mut parser = PushParser::new();
/// let mut frames = 0;
/// for piece in bytes.chunks(7) {
///     parser.push(piece);
///     while let Some(event) = parser.next_event()? {
///         if let Event::Frame(_) = event { frames += 1 }
///     }
/// }
/// parser.finish(); // no more input: missing bytes are now errors
/// while let Some(event) = parser.next_event()? {
///     if let Event::Frame(_) = event { frames += 1 }
/// }
/// assert!(parser.is_done());
/// # Ok::<(), bsor::ParseError>(())
/// ```
///
/// [`next_event`](PushParser::next_event) returns `Ok(None)` when it needs more input (or,
/// after [`Event::End`], when there is nothing left). Before [`finish`](PushParser::finish)
/// a short input is never an error. After an error the parser stays failed and returns the
/// same error again; everything yielded before it was valid.
///
/// It buffers at most one incomplete record (or info block, or user-data section), plus,
/// after the last section, the trailing bytes; [`Limits`] bounds each.
#[derive(Debug)]
pub struct PushParser {
    decoder: Decoder,
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    /// The decoder needs `buf[start..]` to hold this many bytes before it is asked again.
    need: usize,
    eof: bool,
    failed: Option<ParseError>,
}

impl Default for PushParser {
    fn default() -> Self {
        Self::new()
    }
}

impl PushParser {
    /// A parser with the default [`Limits`].
    pub fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    /// A parser with the given limits.
    pub fn with_limits(limits: Limits) -> Self {
        PushParser {
            decoder: Decoder::new(limits),
            buf: Vec::new(),
            start: 0,
            need: 0,
            eof: false,
            failed: None,
        }
    }

    /// Adds input. Bytes pushed after [`finish`](PushParser::finish) are ignored.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.eof || self.failed.is_some() {
            return;
        }
        // Drop consumed bytes before growing, so the buffer holds about one record.
        if self.start > 0 && (self.start == self.buf.len() || self.start >= self.buf.len() / 2) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Declares the end of the input.
    pub fn finish(&mut self) {
        self.eof = true;
        self.need = 0;
    }

    /// The next event, `Ok(None)` if more input is needed (or the end was already yielded).
    pub fn next_event(&mut self) -> Result<Option<Event>, ParseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let pending = &self.buf[self.start..];
        if pending.len() < self.need {
            return Ok(None);
        }
        match self.decoder.step(pending, self.eof) {
            Ok(Step::Item(event, used)) => {
                self.start += used;
                self.need = 0;
                Ok(Some(event))
            }
            Ok(Step::NeedMore(n)) => {
                self.need = n;
                Ok(None)
            }
            Ok(Step::Finished) => Ok(None),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Bytes consumed so far: the offset of the next byte to decode.
    pub fn offset(&self) -> u64 {
        self.decoder.offset()
    }

    /// Bytes pushed but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// True once [`Event::End`] has been yielded.
    pub fn is_done(&self) -> bool {
        self.decoder.is_done()
    }
}

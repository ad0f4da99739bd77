//! JSON export helpers: JSON has no NaN or infinity, so non-finite floats are written as the
//! strings `"NaN"`, `"Infinity"` and `"-Infinity"` (never as `null`, which would lose them).
//! Raw byte sections are written as lowercase hex strings.

use serde::Serializer;

/// An `f32` that serializes with the non-finite rule above.
pub(crate) struct F(pub f32);

impl serde::Serialize for F {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v == f32::INFINITY {
            s.serialize_str("Infinity")
        } else if v == f32::NEG_INFINITY {
            s.serialize_str("-Infinity")
        } else {
            s.serialize_f32(v)
        }
    }
}

/// For `#[serde(with = "...")]` on `f32` fields.
pub(crate) mod f32 {
    use serde::Serializer;

    pub(crate) fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&super::F(*v), s)
    }
}

pub(crate) fn bytes<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(b))
}

pub(crate) fn opt_bytes<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match b {
        Some(b) => s.serialize_str(&hex::encode(b)),
        None => s.serialize_none(),
    }
}

#[cfg(feature = "json")]
/// Writes a replay's JSON export from its [`Event`](super::Event)s as they come, without
/// holding the replay: the same bytes `serde_json::to_vec(&replay)` gives for the replay the
/// events make, produced record by record (a download rebuilt piece by piece turns into JSON
/// piece by piece, in memory bounded by one piece).
///
/// The sections come in the format's order (info, frames, notes, walls, heights, pauses,
/// then the optional ones), as a parser yields them; the fields after the pauses are
/// written at [`Event::End`](super::Event::End).
#[derive(Debug, Default)]
pub struct JsonWriter {
    /// The array open now and how many records it holds.
    open: Option<(&'static str, u64)>,
    controller_offsets: Option<super::ControllerOffsets>,
    user_data: Option<Vec<u8>>,
    trailing: Vec<u8>,
    started: bool,
    ended: bool,
}

#[cfg(feature = "json")]
/// Why [`JsonWriter::event`] wrote nothing: events out of the order a parser yields them, or
/// a value JSON cannot hold.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// An event after [`Event::End`](super::Event::End).
    #[error("an event after the end")]
    AfterEnd,
    /// A record before the info block.
    #[error("a record before the info block")]
    BeforeInfo,
    /// A record of this section outside its section.
    #[error("a record of {0} outside its section")]
    OutsideSection(&'static str),
    /// The JSON serializer's own error.
    #[error("JSON: {0}")]
    Serialize(#[from] serde_json::Error),
}

#[cfg(feature = "json")]
impl JsonWriter {
    /// A writer before the info block.
    pub fn new() -> JsonWriter {
        JsonWriter::default()
    }

    /// Appends what `event` adds to the JSON to `out`. Events after the end, or records
    /// before the info block, are an `Err` naming them (a parser never yields them so).
    pub fn event(&mut self, event: super::Event, out: &mut Vec<u8>) -> Result<(), JsonError> {
        use super::{Event, Section};
        if self.ended {
            return Err(JsonError::AfterEnd);
        }
        if !self.started && !matches!(event, Event::Info(_)) {
            return Err(JsonError::BeforeInfo);
        }
        let written = match event {
            Event::Info(info) => {
                self.started = true;
                out.extend_from_slice(b"{\"info\":");
                serde_json::to_writer(&mut *out, &info)
            }
            Event::SectionStart { section, .. } => {
                let name = match section {
                    Section::Frames => "frames",
                    Section::Notes => "notes",
                    Section::Walls => "walls",
                    Section::Heights => "heights",
                    Section::Pauses => "pauses",
                    _ => return Ok(()),
                };
                self.close(out);
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":[");
                self.open = Some((name, 0));
                Ok(())
            }
            Event::Frame(f) => self.record("frames", &f, out)?,
            Event::Note(n) => self.record("notes", &n, out)?,
            Event::Wall(w) => self.record("walls", &w, out)?,
            Event::Height(h) => self.record("heights", &h, out)?,
            Event::Pause(p) => self.record("pauses", &p, out)?,
            Event::ControllerOffsets(o) => {
                self.controller_offsets = Some(o);
                Ok(())
            }
            Event::UserData(d) => {
                self.user_data = Some(d);
                Ok(())
            }
            Event::Trailing(t) => {
                self.trailing = t;
                Ok(())
            }
            Event::End => {
                self.ended = true;
                self.close(out);
                out.extend_from_slice(b",\"controllerOffsets\":");
                serde_json::to_writer(&mut *out, &self.controller_offsets)?;
                out.extend_from_slice(b",\"userData\":");
                match &self.user_data {
                    Some(d) => serde_json::to_writer(&mut *out, &hex::encode(d)),
                    None => serde_json::to_writer(&mut *out, &()),
                }?;
                out.extend_from_slice(b",\"trailing\":");
                serde_json::to_writer(&mut *out, &hex::encode(&self.trailing))?;
                out.push(b'}');
                Ok(())
            }
        };
        Ok(written?)
    }

    /// True once the end was written.
    pub fn is_done(&self) -> bool {
        self.ended
    }

    fn record<T: serde::Serialize>(
        &mut self,
        section: &'static str,
        value: &T,
        out: &mut Vec<u8>,
    ) -> Result<Result<(), serde_json::Error>, JsonError> {
        match &mut self.open {
            Some((name, n)) if *name == section => {
                if *n > 0 {
                    out.push(b',');
                }
                *n += 1;
                Ok(serde_json::to_writer(&mut *out, value))
            }
            _ => Err(JsonError::OutsideSection(section)),
        }
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.open.take().is_some() {
            out.push(b']');
        }
    }
}

#[cfg(all(test, feature = "json"))]
mod tests {
    use super::JsonWriter;
    use crate::bsor::{self, PushParser};

    fn written(bytes: &[u8], piece: usize) -> Vec<u8> {
        let mut p = PushParser::new();
        let mut w = JsonWriter::new();
        let mut out = Vec::new();
        for c in bytes.chunks(piece) {
            p.push(c);
            while let Some(e) = p.next_event().unwrap() {
                w.event(e, &mut out).unwrap();
            }
        }
        p.finish();
        while let Some(e) = p.next_event().unwrap() {
            w.event(e, &mut out).unwrap();
        }
        assert!(w.is_done());
        out
    }

    #[test]
    fn the_events_write_the_replays_own_json() {
        let mut replay = crate::synth::replay(crate::synth::Settings {
            seed: 9,
            seconds: 10.0,
            fps: 60,
        });
        for (offsets, user, trailing) in [
            (false, None, vec![]),
            (true, Some(vec![1u8, 2, 0xff]), vec![]),
            (false, Some(vec![]), vec![]),
        ] {
            if !offsets {
                replay.controller_offsets = None;
            } else if replay.controller_offsets.is_none() {
                replay.controller_offsets = Some(bsor::ControllerOffsets::default());
            }
            replay.user_data = user;
            replay.trailing = trailing;
            let bytes = bsor::to_vec(&replay).unwrap();
            let whole = serde_json::to_vec(&replay).unwrap();
            for piece in [7, 4096, bytes.len()] {
                assert!(written(&bytes, piece) == whole, "piece {piece}");
            }
        }
        // No frames, no events at all.
        let mut empty = replay.clone();
        empty.frames.clear();
        empty.notes.clear();
        empty.walls.clear();
        empty.heights.clear();
        empty.pauses.clear();
        let bytes = bsor::to_vec(&empty).unwrap();
        assert!(written(&bytes, 5) == serde_json::to_vec(&empty).unwrap());
    }

    #[test]
    fn events_out_of_place_are_errors() {
        let mut w = JsonWriter::new();
        let mut out = Vec::new();
        let frame = bsor::Frame::default();
        assert!(w.event(bsor::Event::Frame(frame), &mut out).is_err());
        assert!(w.event(bsor::Event::End, &mut out).is_err());
    }
}

//! Legacy ScoreSaber replay JSON to BSOR v1 (feature `legacy`).
//!
//! Before BSOR, replays of ranked ScoreSaber plays circulated as a JSON document (`info`,
//! `frames`, `scores`, `combos`, `noteTime`, `noteInfos`, `dynamicHeight`). [`import`] turns
//! one into a [`Replay`] holding all the document carries; which BSOR field is filled from
//! which JSON field, which is derived and how, and which is left empty with what value is
//! specified in `proto-spec/legacy-import.md`.
//!
//! Nothing here panics on input. The document is refused before it is parsed when it is
//! longer than [`ImportLimits::max_json_bytes`]; each array is refused as soon as it holds
//! more items than its limit, so what is allocated is bounded by the limits; and every error
//! names the field it is about, as a path (`frames[3].h.p.x`, `noteInfos[17]`).
//!
//! The legacy document names no player: the imported replay's `playerID` is empty, for the
//! caller to fill (a server from the upload's token, for example).

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::bsor::{
    replay_score, BsorString, CutInfo, Frame, Height, Info, NoteEvent, NoteId, NoteOutcome, Pose,
    Quat, RawBool, Replay, Vec3, Wall,
};

/// Limits on what [`import`] accepts. A document past one is refused with an error naming
/// the limit; nothing is allocated beyond them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportLimits {
    /// Longest document accepted, in bytes (default 64 MiB).
    pub max_json_bytes: usize,
    /// Most frames (default 1 000 000: over two hours at 120 fps).
    pub max_frames: usize,
    /// Most entries of `scores`, `combos`, `noteTime` and `noteInfos` each: notes and walls
    /// (default 200 000).
    pub max_notes: usize,
    /// Most entries of `dynamicHeight` (default 100 000).
    pub max_heights: usize,
    /// Longest string of `info`, in UTF-8 bytes (default 4096).
    pub max_string_bytes: usize,
    /// Most `info.modifiers` (default 64).
    pub max_modifiers: usize,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_json_bytes: 64 << 20,
            max_frames: 1_000_000,
            max_notes: 200_000,
            max_heights: 100_000,
            max_string_bytes: 4096,
            max_modifiers: 64,
        }
    }
}

/// Why a legacy document could not be imported. Each variant names the field it is about
/// (a path such as `frames[3].h.p.x`; `(document)` for the whole document).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The document is longer than [`ImportLimits::max_json_bytes`].
    #[error("legacy replay JSON: {size} bytes, over the limit of {limit}")]
    TooLarge {
        /// The document's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not one JSON document.
    #[error("legacy replay JSON: not a JSON document: {reason}")]
    Syntax {
        /// The field being read when it broke off, if any.
        field: String,
        /// serde_json's message, with the line and column.
        reason: String,
    },
    /// A field is missing, of the wrong type, out of range, or disagrees with another.
    #[error("legacy replay JSON: `{field}`: {reason}")]
    Invalid {
        /// The field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An array holds more items than its limit.
    #[error("legacy replay JSON: `{field}` has more than {limit} items")]
    OverLimit {
        /// The array.
        field: String,
        /// The limit it passed.
        limit: usize,
    },
}

impl ImportError {
    /// The field the error is about (`(document)` for the size and for a document that
    /// breaks off before any field).
    pub fn field(&self) -> &str {
        match self {
            ImportError::TooLarge { .. } => DOCUMENT,
            ImportError::Syntax { field, .. }
            | ImportError::Invalid { field, .. }
            | ImportError::OverLimit { field, .. } => field,
        }
    }

    fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ImportError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

const DOCUMENT: &str = "(document)";

/// Imports a legacy ScoreSaber replay JSON document as a BSOR v1 replay, by the rules of
/// `proto-spec/legacy-import.md`.
///
/// ```
/// let json = br#"{
///   "info": {"version": "1.0", "hash": "ABC", "difficulty": 9, "mode": "Standard",
///            "environment": "BigMirrorEnvironment", "modifiers": ["FS"],
///            "noteJumpStartBeatOffset": 0.0, "leftHanded": false, "height": 1.7},
///   "frames": [],
///   "scores": [115, -3], "combos": [1, 0], "noteTime": [1.0, 1.5],
///   "noteInfos": ["1001", "2110"], "dynamicHeight": []
/// }"#;
/// let replay = bsor_stream_core::legacy::import(json, &Default::default()).unwrap();
/// assert_eq!(replay.info.difficulty.as_str(), Some("ExpertPlus"));
/// assert_eq!(replay.notes.len(), 2);
/// assert_eq!(replay.info.score, 115);
/// ```
pub fn import(json: &[u8], limits: &ImportLimits) -> Result<Replay, ImportError> {
    if json.len() > limits.max_json_bytes {
        return Err(ImportError::TooLarge {
            size: json.len(),
            limit: limits.max_json_bytes,
        });
    }
    let doc = parse(json, limits)?;
    build(doc, limits)
}

// ---------------------------------------------------------------------------------------
// The document, as serde reads it.

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DocInfo {
    #[serde(default)]
    version: String,
    hash: String,
    difficulty: i32,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    environment: String,
    #[serde(default)]
    modifiers: Vec<String>,
    // Read for its type only: the jump distance also needs the map's BPM and note jump
    // speed, which the document does not hold.
    #[serde(default)]
    #[allow(dead_code)]
    note_jump_start_beat_offset: Option<Float>,
    #[serde(default)]
    left_handed: bool,
    #[serde(default)]
    height: Option<Float>,
}

/// An `f32` read from a JSON number: out of the `f32` range is an error, not infinity.
#[derive(Clone, Copy)]
struct Float(f32);

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        let f = v as f32;
        if f.is_finite() {
            Ok(Float(f))
        } else {
            Err(de::Error::custom(format!(
                "{v} is outside the range of a 32-bit float"
            )))
        }
    }
}

#[derive(Deserialize)]
struct DocVec {
    x: Float,
    y: Float,
    z: Float,
}

#[derive(Deserialize)]
struct DocQuat {
    x: Float,
    y: Float,
    z: Float,
    w: Float,
}

#[derive(Deserialize)]
struct DocPose {
    r: DocQuat,
    p: DocVec,
}

#[derive(Deserialize)]
struct DocFrame {
    h: DocPose,
    l: DocPose,
    r: DocPose,
    a: Float,
    i: i32,
}

#[derive(Deserialize)]
struct DocHeight {
    h: Float,
    a: Float,
}

struct Doc {
    info: DocInfo,
    frames: Vec<DocFrame>,
    scores: Vec<i32>,
    combos: Option<Vec<i32>>,
    note_time: Vec<Float>,
    note_infos: Vec<String>,
    dynamic_height: Vec<DocHeight>,
}

/// Which array passed its limit, and the limit: set by [`Bounded`] as it refuses, so that
/// the error can be told from a malformed one without reading its message.
type Tripped = Cell<Option<usize>>;

/// An array of at most `limit` items, refused at the first item past it.
struct Bounded<'a, T> {
    limit: usize,
    tripped: &'a Tripped,
    item: PhantomData<T>,
}

impl<'a, T> Bounded<'a, T> {
    fn new(limit: usize, tripped: &'a Tripped) -> Self {
        Bounded {
            limit,
            tripped,
            item: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Bounded<'_, T> {
    type Value = Vec<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Bounded<'_, T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an array of at most {} items", self.limit)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        // Grows with what arrives, never from a hint.
        let mut out = Vec::new();
        loop {
            if out.len() == self.limit {
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    self.tripped.set(Some(self.limit));
                    return Err(de::Error::custom(format_args!(
                        "more than {} items",
                        self.limit
                    )));
                }
                return Ok(out);
            }
            match seq.next_element()? {
                Some(item) => out.push(item),
                None => return Ok(out),
            }
        }
    }
}

/// Reads the top-level object: each array through [`Bounded`] with its limit.
struct DocSeed<'a> {
    limits: &'a ImportLimits,
    tripped: &'a Tripped,
}

impl<'de> DeserializeSeed<'de> for DocSeed<'_> {
    type Value = Doc;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocSeed<'_> {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a legacy replay object (info, frames, scores, noteTime, noteInfos, ...)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let l = self.limits;
        let t = self.tripped;
        let mut info = None;
        let mut frames = None;
        let mut scores = None;
        let mut combos = None;
        let mut note_time = None;
        let mut note_infos = None;
        let mut dynamic_height = None;
        fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, v: T) -> Result<(), E> {
            if slot.is_some() {
                return Err(E::duplicate_field(name));
            }
            *slot = Some(v);
            Ok(())
        }
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "info" => once(&mut info, "info", map.next_value()?)?,
                "frames" => once(
                    &mut frames,
                    "frames",
                    map.next_value_seed(Bounded::new(l.max_frames, t))?,
                )?,
                "scores" => once(
                    &mut scores,
                    "scores",
                    map.next_value_seed(Bounded::new(l.max_notes, t))?,
                )?,
                "combos" => once(
                    &mut combos,
                    "combos",
                    map.next_value_seed(Bounded::new(l.max_notes, t))?,
                )?,
                "noteTime" => once(
                    &mut note_time,
                    "noteTime",
                    map.next_value_seed(Bounded::new(l.max_notes, t))?,
                )?,
                "noteInfos" => once(
                    &mut note_infos,
                    "noteInfos",
                    map.next_value_seed(Bounded::new(l.max_notes, t))?,
                )?,
                "dynamicHeight" => once(
                    &mut dynamic_height,
                    "dynamicHeight",
                    map.next_value_seed(Bounded::new(l.max_heights, t))?,
                )?,
                // Fields this importer does not know are skipped, without being kept.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Doc {
            info: info.ok_or_else(|| de::Error::missing_field("info"))?,
            frames: frames.ok_or_else(|| de::Error::missing_field("frames"))?,
            scores: scores.ok_or_else(|| de::Error::missing_field("scores"))?,
            combos,
            note_time: note_time.ok_or_else(|| de::Error::missing_field("noteTime"))?,
            note_infos: note_infos.ok_or_else(|| de::Error::missing_field("noteInfos"))?,
            dynamic_height: dynamic_height.unwrap_or_default(),
        })
    }
}

fn parse(json: &[u8], limits: &ImportLimits) -> Result<Doc, ImportError> {
    let tripped = Tripped::new(None);
    let mut track = serde_path_to_error::Track::new();
    let mut de = serde_json::Deserializer::from_slice(json);
    let result = DocSeed {
        limits,
        tripped: &tripped,
    }
    .deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
    .and_then(|doc| de.end().map(|()| doc));
    match result {
        Ok(doc) => Ok(doc),
        Err(e) => {
            let path = track.path().to_string();
            let field = if path == "." {
                DOCUMENT.to_owned()
            } else {
                path
            };
            Err(if let Some(limit) = tripped.get() {
                ImportError::OverLimit { field, limit }
            } else if e.is_data() {
                ImportError::Invalid {
                    field,
                    reason: e.to_string(),
                }
            } else {
                ImportError::Syntax {
                    field,
                    reason: e.to_string(),
                }
            })
        }
    }
}

// ---------------------------------------------------------------------------------------
// The document to a replay.

/// The difficulty names BSOR writes, by the legacy number.
fn difficulty_name(d: i32) -> Option<&'static str> {
    Some(match d {
        1 => "Easy",
        3 => "Normal",
        5 => "Hard",
        7 => "Expert",
        9 => "ExpertPlus",
        _ => return None,
    })
}

/// The legacy score of a wall entry (walls come last in `scores`).
const WALL: i32 = -5;

fn string(field: &str, s: &str, limits: &ImportLimits) -> Result<BsorString, ImportError> {
    if s.len() > limits.max_string_bytes {
        return Err(ImportError::invalid(
            field,
            format!(
                "{} bytes, over the limit of {}",
                s.len(),
                limits.max_string_bytes
            ),
        ));
    }
    Ok(BsorString::new(s))
}

fn pose(p: &DocPose) -> Pose {
    Pose {
        position: Vec3 {
            x: p.p.x.0,
            y: p.p.y.0,
            z: p.p.z.0,
        },
        rotation: Quat {
            x: p.r.x.0,
            y: p.r.y.0,
            z: p.r.z.0,
            w: p.r.w.0,
        },
    }
}

/// A note's id from its `noteInfos` entry: four digits, lineIndex, lineLayer,
/// cutDirection and the legacy note type (0 red, 1 blue, 2 ghost, 3 bomb).
fn note_id(i: usize, info: &str) -> Result<(i32, i32), ImportError> {
    let field = || format!("noteInfos[{i}]");
    let b = info.as_bytes();
    if b.len() != 4 || !b.iter().all(u8::is_ascii_digit) {
        let shown: String = info.chars().take(16).collect();
        return Err(ImportError::invalid(
            field(),
            format!("{shown:?} is not four digits (lineIndex, lineLayer, cutDirection, type)"),
        ));
    }
    let d = |k: usize| i32::from(b[k] - b'0');
    let color_type = match d(3) {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => -1,
        t => {
            return Err(ImportError::invalid(
                field(),
                format!("note type {t} is none of 0 (red), 1 (blue), 2 (ghost), 3 (bomb)"),
            ))
        }
    };
    let id = NoteId {
        scoring_type: 0,
        line_index: d(0),
        note_line_layer: d(1),
        color_type,
        cut_direction: d(2),
    };
    Ok((id.join(), color_type))
}

/// The cut info of a good cut worth `score` (1 to 115) points: the score is split into
/// accuracy (up to 15), then before (up to 70), then after (the rest, up to 30), and the
/// ratings and the distance to the centre are set so that BSOR's cut score (bsor-v1.md 7.1)
/// gives back exactly those parts.
fn good_cut(score: i32, color_type: i32) -> CutInfo {
    let accuracy = score.min(15);
    let before = (score - accuracy).min(70);
    let after = score - accuracy - before;
    CutInfo {
        speed_ok: RawBool(1),
        direction_ok: RawBool(1),
        saber_type_ok: RawBool(1),
        was_cut_too_soon: RawBool(0),
        saber_type: if color_type == 1 { 1 } else { 0 },
        before_cut_rating: before as f32 / 70.0,
        after_cut_rating: after as f32 / 30.0,
        cut_distance_to_center: 0.3 * (15 - accuracy) as f32 / 15.0,
        ..CutInfo::default()
    }
}

fn build(doc: Doc, limits: &ImportLimits) -> Result<Replay, ImportError> {
    let di = &doc.info;
    let difficulty = difficulty_name(di.difficulty).ok_or_else(|| {
        ImportError::invalid(
            "info.difficulty",
            format!(
                "{} is not a difficulty (1 Easy, 3 Normal, 5 Hard, 7 Expert, 9 Expert+)",
                di.difficulty
            ),
        )
    })?;
    if di.modifiers.len() > limits.max_modifiers {
        return Err(ImportError::OverLimit {
            field: "info.modifiers".into(),
            limit: limits.max_modifiers,
        });
    }
    for (i, m) in di.modifiers.iter().enumerate() {
        if m.is_empty() || m.contains(',') {
            return Err(ImportError::invalid(
                format!("info.modifiers[{i}]"),
                format!("{m:?}: a modifier is a non-empty name without a comma"),
            ));
        }
    }
    let modifiers = di.modifiers.join(",");

    // Notes and walls: scores, noteTime (and combos, when present) run in parallel; the
    // walls' entries come last; noteInfos has an entry per note, or per entry.
    let n = doc.scores.len();
    if doc.note_time.len() != n {
        return Err(ImportError::invalid(
            "noteTime",
            format!("{} entries, but scores has {n}", doc.note_time.len()),
        ));
    }
    if let Some(c) = &doc.combos {
        if c.len() != n {
            return Err(ImportError::invalid(
                "combos",
                format!("{} entries, but scores has {n}", c.len()),
            ));
        }
        if let Some(i) = c.iter().position(|&c| c < 0) {
            return Err(ImportError::invalid(
                format!("combos[{i}]"),
                format!("{} is negative", c[i]),
            ));
        }
    }
    let note_count = doc.scores.iter().position(|&s| s == WALL).unwrap_or(n);
    if let Some(j) = doc.scores[note_count..].iter().position(|&s| s != WALL) {
        let i = note_count + j;
        return Err(ImportError::invalid(
            format!("scores[{i}]"),
            format!(
                "{} after a wall's -5 at scores[{note_count}] (walls come last)",
                doc.scores[i]
            ),
        ));
    }
    if doc.note_infos.len() != note_count && doc.note_infos.len() != n {
        return Err(ImportError::invalid(
            "noteInfos",
            format!(
                "{} entries, but scores has {note_count} notes and {} walls",
                doc.note_infos.len(),
                n - note_count
            ),
        ));
    }

    let mut notes = Vec::with_capacity(note_count);
    for i in 0..note_count {
        let (note_id, color_type) = note_id(i, &doc.note_infos[i])?;
        let score = doc.scores[i];
        let outcome = match score {
            1..=115 => NoteOutcome::Good(good_cut(score, color_type)),
            -2 => NoteOutcome::Bad(CutInfo::default()),
            -3 => NoteOutcome::Miss,
            -4 => NoteOutcome::Bomb,
            _ => {
                return Err(ImportError::invalid(
                    format!("scores[{i}]"),
                    format!(
                        "{score} is not a note's score (1 to 115 a good cut, -2 bad cut, \
                         -3 miss, -4 bomb; -5 walls come last)"
                    ),
                ))
            }
        };
        notes.push(NoteEvent {
            note_id,
            event_time: doc.note_time[i].0,
            spawn_time: 0.0,
            outcome,
        });
    }
    let walls = doc.note_time[note_count..]
        .iter()
        .map(|t| Wall {
            wall_id: 0,
            energy: 0.0,
            time: t.0,
            spawn_time: 0.0,
        })
        .collect();

    let frames = doc
        .frames
        .iter()
        .map(|f| Frame {
            time: f.a.0,
            fps: f.i,
            head: pose(&f.h),
            left_hand: pose(&f.l),
            right_hand: pose(&f.r),
        })
        .collect();
    let heights = doc
        .dynamic_height
        .iter()
        .map(|h| Height {
            height: h.h.0,
            time: h.a.0,
        })
        .collect();

    let info = Info {
        version: string("info.version", &di.version, limits)?,
        hash: string("info.hash", &di.hash, limits)?,
        difficulty: BsorString::new(difficulty),
        mode: string(
            "info.mode",
            di.mode.as_deref().unwrap_or("Standard"),
            limits,
        )?,
        environment: string("info.environment", &di.environment, limits)?,
        modifiers: string("info.modifiers", &modifiers, limits)?,
        left_handed: RawBool::from(di.left_handed),
        height: di.height.map_or(0.0, |h| h.0),
        ..Info::default()
    };
    let mut replay = Replay {
        info,
        frames,
        notes,
        walls,
        heights,
        ..Replay::default()
    };
    // At most max_notes × 115 × 8 points: within i32 for any limit up to 2.3 million notes;
    // saturated past that.
    replay.info.score = i32::try_from(replay_score(&replay)).unwrap_or(i32::MAX);
    Ok(replay)
}

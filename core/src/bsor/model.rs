//! The typed model of a BSOR v1 replay.
//!
//! Every type holds exactly what is on disk, so that writing a parsed replay gives back the
//! same bytes. Where the file format is looser than a Rust type would be, the model keeps the
//! raw value: a bool is a [`RawBool`] (any byte), a string is a [`BsorString`] (its length
//! field and its bytes, which need not agree or be UTF-8), and floats are plain `f32`s that
//! are never touched by arithmetic, so NaN payloads and negative zeros survive.
//!
//! `Serialize` gives the JSON export shape: camelCase names as in the BSOR spec, non-finite
//! floats as the strings `"NaN"`, `"Infinity"` and `"-Infinity"`.

use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;

use super::json::{f32 as json_f32, F};

/// A bool as stored on disk: one byte. `0` is false, anything else true; the byte itself is
/// kept so that files holding values other than 0 and 1 are rewritten exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawBool(pub u8);

impl RawBool {
    /// The value as the game reads it: any nonzero byte is true.
    pub fn get(self) -> bool {
        self.0 != 0
    }
}

impl From<bool> for RawBool {
    fn from(b: bool) -> Self {
        RawBool(u8::from(b))
    }
}

impl Serialize for RawBool {
    /// `true`/`false` for the bytes 1 and 0; the byte as a number otherwise, so the export
    /// does not hide a quirk.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            0 => s.serialize_bool(false),
            1 => s.serialize_bool(true),
            b => s.serialize_u8(b),
        }
    }
}

/// A string field as stored on disk: a little-endian `int` length field, then bytes.
///
/// Normally the length field is the number of UTF-8 bytes. Older mods wrote the number of
/// UTF-16 code units instead, which is smaller whenever the text holds non-ASCII characters;
/// the parser then recovers the real extent of the string (see `proto-spec/bsor-v1.md`,
/// "Legacy string lengths") and keeps the length field as it was, so the file is rewritten
/// byte for byte.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsorString {
    /// The bytes of the string, normally UTF-8.
    pub bytes: Vec<u8>,
    /// The length field as it was on disk.
    pub length_field: i32,
}

impl BsorString {
    /// A well-formed string: its length field is its UTF-8 byte count.
    ///
    /// Strings longer than `i32::MAX` bytes cannot be represented; their length field
    /// saturates, and such a string is refused by the parser's limits anyway.
    pub fn new(s: &str) -> Self {
        BsorString {
            bytes: s.as_bytes().to_vec(),
            length_field: i32::try_from(s.len()).unwrap_or(i32::MAX),
        }
    }

    /// The text, if the bytes are UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.bytes).ok()
    }

    /// The text, with invalid UTF-8 replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// True when the length field does not equal the byte count (a legacy UTF-16 count).
    pub fn has_legacy_length(&self) -> bool {
        usize::try_from(self.length_field).ok() != Some(self.bytes.len())
    }
}

impl From<&str> for BsorString {
    fn from(s: &str) -> Self {
        BsorString::new(s)
    }
}

impl std::fmt::Display for BsorString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.bytes))
    }
}

impl Serialize for BsorString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(&self.bytes))
    }
}

/// The info block (section 0): 23 fields, in file order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    /// Version of the mod that recorded the replay.
    pub version: BsorString,
    /// Version of the game.
    pub game_version: BsorString,
    /// Unix time at which the play started, as text.
    pub timestamp: BsorString,
    /// The player's platform id.
    #[serde(rename = "playerID")]
    pub player_id: BsorString,
    /// The player's name on the platform.
    pub player_name: BsorString,
    /// `steam`, `oculus`, ...
    pub platform: BsorString,
    /// Tracking system (OpenVR, Oculus, ...).
    pub tracking_system: BsorString,
    /// Headset model.
    pub hmd: BsorString,
    /// Controller model.
    pub controller: BsorString,
    /// Map hash.
    pub hash: BsorString,
    /// Song name.
    pub song_name: BsorString,
    /// Mapper name.
    pub mapper: BsorString,
    /// Difficulty name (Easy ... ExpertPlus).
    pub difficulty: BsorString,
    /// Total unmodified score.
    pub score: i32,
    /// Game mode (Standard, OneSaber, ...).
    pub mode: BsorString,
    /// Environment name.
    pub environment: BsorString,
    /// Comma-separated modifiers (FS, GN, ...).
    pub modifiers: BsorString,
    /// Note jump distance.
    #[serde(with = "json_f32")]
    pub jump_distance: f32,
    /// Left-handed play.
    pub left_handed: RawBool,
    /// Static player height.
    #[serde(with = "json_f32")]
    pub height: f32,
    /// Song start time (practice mode).
    #[serde(with = "json_f32")]
    pub start_time: f32,
    /// Song time of the fail, 0 if the player did not fail.
    #[serde(with = "json_f32")]
    pub fail_time: f32,
    /// Song speed (practice mode).
    #[serde(with = "json_f32")]
    pub speed: f32,
}

/// A position.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Vec3 {
    /// x
    pub x: f32,
    /// y
    pub y: f32,
    /// z
    pub z: f32,
}

/// A rotation quaternion, as stored: not necessarily unit length (replays hold placeholders
/// such as (-1,-1,-1,-1) and zeros).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Quat {
    /// x
    pub x: f32,
    /// y
    pub y: f32,
    /// z
    pub z: f32,
    /// w
    pub w: f32,
}

impl Serialize for Vec3 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Vec3", 3)?;
        st.serialize_field("x", &F(self.x))?;
        st.serialize_field("y", &F(self.y))?;
        st.serialize_field("z", &F(self.z))?;
        st.end()
    }
}

impl Serialize for Quat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Quat", 4)?;
        st.serialize_field("x", &F(self.x))?;
        st.serialize_field("y", &F(self.y))?;
        st.serialize_field("z", &F(self.z))?;
        st.serialize_field("w", &F(self.w))?;
        st.end()
    }
}

/// A tracked device's position and rotation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pose {
    /// Position in metres.
    pub position: Vec3,
    /// Rotation.
    pub rotation: Quat,
}

/// One frame (section 1): 92 bytes on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Frame {
    /// Song time in seconds.
    #[serde(with = "json_f32")]
    pub time: f32,
    /// The player's frames per second, as the game reported it.
    pub fps: i32,
    /// Head pose.
    pub head: Pose,
    /// Left hand pose.
    pub left_hand: Pose,
    /// Right hand pose.
    pub right_hand: Pose,
}

/// The cut info of a good or bad cut: 72 bytes on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CutInfo {
    /// The saber was fast enough.
    #[serde(rename = "speedOK")]
    pub speed_ok: RawBool,
    /// The cut went in the note's direction.
    #[serde(rename = "directionOK")]
    pub direction_ok: RawBool,
    /// The right saber cut the note.
    #[serde(rename = "saberTypeOK")]
    pub saber_type_ok: RawBool,
    /// The note was cut too soon.
    pub was_cut_too_soon: RawBool,
    /// Saber speed.
    #[serde(with = "json_f32")]
    pub saber_speed: f32,
    /// Saber direction.
    pub saber_dir: Vec3,
    /// Which saber (0 left, 1 right).
    pub saber_type: i32,
    /// Time deviation.
    #[serde(with = "json_f32")]
    pub time_deviation: f32,
    /// Cut direction deviation in degrees.
    #[serde(with = "json_f32")]
    pub cut_dir_deviation: f32,
    /// Cut point.
    pub cut_point: Vec3,
    /// Cut plane normal.
    pub cut_normal: Vec3,
    /// Distance of the cut from the note's centre.
    #[serde(with = "json_f32")]
    pub cut_distance_to_center: f32,
    /// Cut angle.
    #[serde(with = "json_f32")]
    pub cut_angle: f32,
    /// Rating of the swing before the cut, 0..1 (1 gives 70 points).
    #[serde(with = "json_f32")]
    pub before_cut_rating: f32,
    /// Rating of the swing after the cut, 0..1 (1 gives 30 points).
    #[serde(with = "json_f32")]
    pub after_cut_rating: f32,
}

/// An event type the format does not define (anything but 0 to 3), kept as read.
///
/// Such an event has no cut info on disk. The type cannot hold 0 to 3, so a replay built
/// from the model always writes what it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnknownEventType(i32);

impl UnknownEventType {
    /// `None` for 0 to 3, which are the defined types.
    pub fn new(raw: i32) -> Option<Self> {
        (!(0..=3).contains(&raw)).then_some(UnknownEventType(raw))
    }

    /// The raw event type.
    pub fn get(self) -> i32 {
        self.0
    }
}

/// What happened to a note, with the cut info that good and bad cuts carry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NoteOutcome {
    /// Event type 0: a good cut.
    Good(CutInfo),
    /// Event type 1: a bad cut (wrong colour or direction).
    Bad(CutInfo),
    /// Event type 2: a missed note.
    Miss,
    /// Event type 3: a bomb was hit.
    Bomb,
    /// Any other event type, without cut info.
    Unknown(UnknownEventType),
}

impl NoteOutcome {
    /// The event type as stored on disk.
    pub fn event_type(&self) -> i32 {
        match self {
            NoteOutcome::Good(_) => 0,
            NoteOutcome::Bad(_) => 1,
            NoteOutcome::Miss => 2,
            NoteOutcome::Bomb => 3,
            NoteOutcome::Unknown(t) => t.get(),
        }
    }

    /// The cut info, for good and bad cuts.
    pub fn cut(&self) -> Option<&CutInfo> {
        match self {
            NoteOutcome::Good(c) | NoteOutcome::Bad(c) => Some(c),
            _ => None,
        }
    }
}

/// A note event (section 2): 16 bytes, plus 72 of cut info for good and bad cuts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoteEvent {
    /// The note's id: see [`super::NoteId`] to split it.
    pub note_id: i32,
    /// Song time of the event.
    pub event_time: f32,
    /// Song time at which the note spawned.
    pub spawn_time: f32,
    /// What happened.
    pub outcome: NoteOutcome,
}

impl Serialize for NoteEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let cut = self.outcome.cut();
        let mut st = s.serialize_struct("NoteEvent", 4 + usize::from(cut.is_some()))?;
        st.serialize_field("noteID", &self.note_id)?;
        st.serialize_field("eventTime", &F(self.event_time))?;
        st.serialize_field("spawnTime", &F(self.spawn_time))?;
        st.serialize_field("eventType", &self.outcome.event_type())?;
        if let Some(cut) = cut {
            st.serialize_field("noteCutInfo", cut)?;
        }
        st.end()
    }
}

/// A wall event (section 3): 16 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Wall {
    /// The wall's id: see [`super::WallId`] to split it.
    #[serde(rename = "wallID")]
    pub wall_id: i32,
    /// Energy at the end of the event.
    #[serde(with = "json_f32")]
    pub energy: f32,
    /// Song time of the event.
    #[serde(with = "json_f32")]
    pub time: f32,
    /// Song time at which the wall spawned.
    #[serde(with = "json_f32")]
    pub spawn_time: f32,
}

/// An automatic height change (section 4): 8 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Height {
    /// The new height.
    #[serde(with = "json_f32")]
    pub height: f32,
    /// Song time.
    #[serde(with = "json_f32")]
    pub time: f32,
}

/// A pause (section 5): 12 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pause {
    /// Duration of the pause in seconds.
    pub duration: i64,
    /// Song time at which the pause started.
    #[serde(with = "json_f32")]
    pub time: f32,
}

/// Controller offsets (optional section 6): 56 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerOffsets {
    /// Left controller offset.
    pub left: Pose,
    /// Right controller offset.
    pub right: Pose,
}

/// A whole BSOR v1 replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    /// Section 0.
    pub info: Info,
    /// Section 1.
    pub frames: Vec<Frame>,
    /// Section 2.
    pub notes: Vec<NoteEvent>,
    /// Section 3.
    pub walls: Vec<Wall>,
    /// Section 4.
    pub heights: Vec<Height>,
    /// Section 5.
    pub pauses: Vec<Pause>,
    /// Optional section 6.
    pub controller_offsets: Option<ControllerOffsets>,
    /// Optional section 7; `Some(vec![])` is a present but empty section.
    #[serde(serialize_with = "super::json::opt_bytes")]
    pub user_data: Option<Vec<u8>>,
    /// Bytes after the last section the parser knows, kept as they were.
    #[serde(serialize_with = "super::json::bytes")]
    pub trailing: Vec<u8>,
}

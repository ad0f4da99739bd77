//! A replay at a glance: what `bsor-stream info` prints.

use serde::Serialize;

use super::ids::NoteOutcomeKind;
use super::model::Replay;

/// Frames per second as the game reported them in each frame's `fps` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FpsStats {
    /// The median (the lower middle value for an even count).
    pub median: i32,
    /// The lowest.
    pub min: i32,
    /// The highest.
    pub max: i32,
}

/// Note events per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NoteCounts {
    /// Good cuts.
    pub good: usize,
    /// Bad cuts.
    pub bad: usize,
    /// Misses.
    pub miss: usize,
    /// Bomb hits.
    pub bomb: usize,
    /// Undefined event types.
    pub unknown: usize,
}

/// A summary of a replay. Serializes to the JSON of `bsor-stream info --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Player name.
    pub player_name: String,
    /// Player platform id.
    #[serde(rename = "playerID")]
    pub player_id: String,
    /// Platform.
    pub platform: String,
    /// Headset.
    pub hmd: String,
    /// Controllers.
    pub controller: String,
    /// Tracking system.
    pub tracking_system: String,
    /// Version of the recording mod.
    pub mod_version: String,
    /// Game version.
    pub game_version: String,
    /// Song name.
    pub song_name: String,
    /// Mapper.
    pub mapper: String,
    /// Map hash.
    pub hash: String,
    /// Difficulty.
    pub difficulty: String,
    /// Mode.
    pub mode: String,
    /// Environment.
    pub environment: String,
    /// Modifiers.
    pub modifiers: String,
    /// Score from the info block.
    pub score: i32,
    /// Song time of the fail, 0 if none.
    pub fail_time: f64,
    /// Last frame's time minus the first's; 0 with fewer than two frames.
    pub duration_seconds: f64,
    /// Number of frames.
    pub frames: usize,
    /// The frames' `fps` field; `None` without frames.
    pub fps: Option<FpsStats>,
    /// All note events, whatever their type.
    pub notes: usize,
    /// Note events per type.
    pub note_event_types: NoteCounts,
    /// Wall events.
    pub walls: usize,
    /// Height events.
    pub heights: usize,
    /// Pauses.
    pub pauses: usize,
    /// Section 6 is present.
    pub controller_offsets: bool,
    /// Length of section 7, `None` when it is absent.
    pub user_data_bytes: Option<usize>,
    /// Bytes after the last known section.
    pub trailing_bytes: usize,
    /// Info fields whose length field is a legacy (UTF-16) count.
    pub legacy_length_fields: Vec<&'static str>,
}

impl Summary {
    /// Summarizes a replay.
    pub fn of(r: &Replay) -> Summary {
        let i = &r.info;
        let mut fps: Vec<i32> = r.frames.iter().map(|f| f.fps).collect();
        fps.sort_unstable();
        let fps = match (fps.first(), fps.last()) {
            (Some(&min), Some(&max)) => Some(FpsStats {
                median: fps[(fps.len() - 1) / 2],
                min,
                max,
            }),
            _ => None,
        };
        let duration_seconds = match (r.frames.first(), r.frames.last()) {
            (Some(a), Some(b)) if r.frames.len() >= 2 => f64::from(b.time) - f64::from(a.time),
            _ => 0.0,
        };
        let mut counts = NoteCounts::default();
        for n in &r.notes {
            match n.kind() {
                NoteOutcomeKind::Good => counts.good += 1,
                NoteOutcomeKind::Bad => counts.bad += 1,
                NoteOutcomeKind::Miss => counts.miss += 1,
                NoteOutcomeKind::Bomb => counts.bomb += 1,
                NoteOutcomeKind::Unknown => counts.unknown += 1,
            }
        }
        let legacy_length_fields = [
            ("version", &i.version),
            ("gameVersion", &i.game_version),
            ("timestamp", &i.timestamp),
            ("playerID", &i.player_id),
            ("playerName", &i.player_name),
            ("platform", &i.platform),
            ("trackingSystem", &i.tracking_system),
            ("hmd", &i.hmd),
            ("controller", &i.controller),
            ("hash", &i.hash),
            ("songName", &i.song_name),
            ("mapper", &i.mapper),
            ("difficulty", &i.difficulty),
            ("mode", &i.mode),
            ("environment", &i.environment),
            ("modifiers", &i.modifiers),
        ]
        .into_iter()
        .filter(|(_, s)| s.has_legacy_length())
        .map(|(name, _)| name)
        .collect();
        Summary {
            player_name: i.player_name.to_string_lossy(),
            player_id: i.player_id.to_string_lossy(),
            platform: i.platform.to_string_lossy(),
            hmd: i.hmd.to_string_lossy(),
            controller: i.controller.to_string_lossy(),
            tracking_system: i.tracking_system.to_string_lossy(),
            mod_version: i.version.to_string_lossy(),
            game_version: i.game_version.to_string_lossy(),
            song_name: i.song_name.to_string_lossy(),
            mapper: i.mapper.to_string_lossy(),
            hash: i.hash.to_string_lossy(),
            difficulty: i.difficulty.to_string_lossy(),
            mode: i.mode.to_string_lossy(),
            environment: i.environment.to_string_lossy(),
            modifiers: i.modifiers.to_string_lossy(),
            score: i.score,
            fail_time: f64::from(i.fail_time),
            duration_seconds,
            frames: r.frames.len(),
            fps,
            notes: r.notes.len(),
            note_event_types: counts,
            walls: r.walls.len(),
            heights: r.heights.len(),
            pauses: r.pauses.len(),
            controller_offsets: r.controller_offsets.is_some(),
            user_data_bytes: r.user_data.as_ref().map(Vec::len),
            trailing_bytes: r.trailing.len(),
            legacy_length_fields,
        }
    }
}

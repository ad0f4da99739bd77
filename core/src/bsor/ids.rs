//! What note and wall ids encode, and the score of a cut.

use serde::Serialize;

use super::model::{CutInfo, NoteEvent, NoteOutcome, Replay, Wall};

/// The game's scoring type of a note (BSOR stores the game's value + 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ScoringType {
    /// Ids written before the scoring type was added to them (stored 0).
    Legacy,
    /// Game value -1 (stored 1).
    Ignore,
    /// Game value 0 (stored 2): bombs and other notes that give no score.
    NoScore,
    /// Game value 1 (stored 3): an ordinary note.
    Normal,
    /// Game value 2 (stored 4): the head of an arc.
    SliderHead,
    /// Game value 3 (stored 5): the tail of an arc.
    SliderTail,
    /// Game value 4 (stored 6): the head of a chain.
    BurstSliderHead,
    /// Game value 5 (stored 7): a link of a chain.
    BurstSliderElement,
    /// Any other stored value.
    Other(i32),
}

impl ScoringType {
    fn from_stored(v: i32) -> Self {
        match v {
            0 => ScoringType::Legacy,
            1 => ScoringType::Ignore,
            2 => ScoringType::NoScore,
            3 => ScoringType::Normal,
            4 => ScoringType::SliderHead,
            5 => ScoringType::SliderTail,
            6 => ScoringType::BurstSliderHead,
            7 => ScoringType::BurstSliderElement,
            v => ScoringType::Other(v),
        }
    }
}

/// A note's colour: its `colorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NoteColor {
    /// colorType -1: a bomb.
    None,
    /// colorType 0: red (left saber).
    Red,
    /// colorType 1: blue (right saber).
    Blue,
    /// Any other value.
    Other(i32),
}

/// A note's cut direction: its `cutDirection`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CutDirection {
    /// 0
    Up,
    /// 1
    Down,
    /// 2
    Left,
    /// 3
    Right,
    /// 4
    UpLeft,
    /// 5
    UpRight,
    /// 6
    DownLeft,
    /// 7
    DownRight,
    /// 8: a dot note.
    Any,
    /// 9: bombs.
    None,
}

impl CutDirection {
    fn from_digit(d: i32) -> Self {
        use CutDirection::*;
        [
            Up, Down, Left, Right, UpLeft, UpRight, DownLeft, DownRight, Any, None,
        ][d.rem_euclid(10) as usize]
    }
}

/// The parts of a noteID: `scoringType*10000 + lineIndex*1000 + noteLineLayer*100 +
/// colorType*10 + cutDirection`.
///
/// colorType is -1 for bombs, so the parts are not plain decimal digits: the split takes
/// cutDirection in 0..=9 and colorType in -1..=8, which makes it unique (bomb id 20999 is
/// scoringType 2, lineIndex 1, layer 0, colorType -1, cutDirection 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NoteId {
    /// The stored scoring type (game value + 2; 0 in ids from before it was added).
    pub scoring_type: i32,
    /// Column, 0 to 3 on standard maps.
    pub line_index: i32,
    /// Row, 0 to 2 on standard maps.
    pub note_line_layer: i32,
    /// -1 bomb, 0 red, 1 blue.
    pub color_type: i32,
    /// 0 to 9: see [`CutDirection`].
    pub cut_direction: i32,
}

impl NoteId {
    /// Splits a noteID.
    pub fn split(id: i32) -> NoteId {
        let id = i64::from(id);
        let cut_direction = id.rem_euclid(10);
        let rest = (id - cut_direction) / 10;
        let color_type = (rest + 1).rem_euclid(10) - 1;
        let rest = (rest - color_type) / 10;
        let note_line_layer = rest.rem_euclid(10);
        let rest = (rest - note_line_layer) / 10;
        let line_index = rest.rem_euclid(10);
        let scoring_type = (rest - line_index) / 10;
        // Every part is within i32: each is a digit or a quotient of an i32.
        let n = |v: i64| v as i32;
        NoteId {
            scoring_type: n(scoring_type),
            line_index: n(line_index),
            note_line_layer: n(note_line_layer),
            color_type: n(color_type),
            cut_direction: n(cut_direction),
        }
    }

    /// Puts the parts back together (the inverse of [`split`](NoteId::split), wrapping on
    /// overflow).
    pub fn join(&self) -> i32 {
        self.scoring_type
            .wrapping_mul(10000)
            .wrapping_add(self.line_index.wrapping_mul(1000))
            .wrapping_add(self.note_line_layer.wrapping_mul(100))
            .wrapping_add(self.color_type.wrapping_mul(10))
            .wrapping_add(self.cut_direction)
    }

    /// The scoring type.
    pub fn scoring(&self) -> ScoringType {
        ScoringType::from_stored(self.scoring_type)
    }

    /// The colour.
    pub fn color(&self) -> NoteColor {
        match self.color_type {
            -1 => NoteColor::None,
            0 => NoteColor::Red,
            1 => NoteColor::Blue,
            c => NoteColor::Other(c),
        }
    }

    /// The cut direction.
    pub fn direction(&self) -> CutDirection {
        CutDirection::from_digit(self.cut_direction)
    }
}

/// The parts of a wallID: `lineIndex*100 + obstacleType*10 + width`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WallId {
    /// Column of the wall's left edge.
    pub line_index: i32,
    /// 0 full height, 1 crouch.
    pub obstacle_type: i32,
    /// Width in columns.
    pub width: i32,
}

impl WallId {
    /// Splits a wallID.
    pub fn split(id: i32) -> WallId {
        WallId {
            line_index: id.div_euclid(100),
            obstacle_type: id.rem_euclid(100) / 10,
            width: id.rem_euclid(10),
        }
    }
}

impl Wall {
    /// This wall's id, split.
    pub fn id(&self) -> WallId {
        WallId::split(self.wall_id)
    }
}

/// The kind of a note event, without its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum NoteOutcomeKind {
    /// A good cut.
    Good,
    /// A bad cut.
    Bad,
    /// A miss.
    Miss,
    /// A bomb hit.
    Bomb,
    /// An undefined event type.
    Unknown,
}

/// The points of one cut, as the game gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CutScore {
    /// 0 to 70, for the swing before the cut.
    pub before: i32,
    /// 0 to 30, for the swing after the cut.
    pub after: i32,
    /// 0 to 15, for how close to the centre the cut was.
    pub accuracy: i32,
}

impl CutScore {
    /// The sum.
    pub fn total(&self) -> i32 {
        self.before + self.after + self.accuracy
    }
}

/// `Mathf.Clamp01` as the game computes it; NaN gives 0 (the game's result for NaN is
/// undefined).
fn clamp01(v: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(0.0, 1.0)
    }
}

/// `Mathf.RoundToInt`: round half to even, in `f32` as the game does.
fn round(v: f32) -> i32 {
    v.round_ties_even() as i32
}

impl CutInfo {
    /// The score of this cut as an ordinary note: `round(70·clamp01(beforeCutRating))`,
    /// `round(30·clamp01(afterCutRating))` and
    /// `round(15·(1 − clamp01(cutDistanceToCenter / 0.3)))`, as in BeatLeader's reference
    /// decoder.
    pub fn score(&self) -> CutScore {
        CutScore {
            before: round(70.0 * clamp01(self.before_cut_rating)),
            after: round(30.0 * clamp01(self.after_cut_rating)),
            accuracy: round(15.0 * (1.0 - clamp01(self.cut_distance_to_center / 0.3))),
        }
    }
}

impl NoteEvent {
    /// This note's id, split.
    pub fn id(&self) -> NoteId {
        NoteId::split(self.note_id)
    }

    /// What kind of event this is.
    pub fn kind(&self) -> NoteOutcomeKind {
        match self.outcome {
            NoteOutcome::Good(_) => NoteOutcomeKind::Good,
            NoteOutcome::Bad(_) => NoteOutcomeKind::Bad,
            NoteOutcome::Miss => NoteOutcomeKind::Miss,
            NoteOutcome::Bomb => NoteOutcomeKind::Bomb,
            NoteOutcome::Unknown(_) => NoteOutcomeKind::Unknown,
        }
    }

    /// The points of a good cut, with the scoring type's fixed parts: an arc head gets the
    /// full 30 after the cut, an arc tail the full 70 before it, a chain head no points
    /// after it, a chain link a fixed 20 (counted as accuracy), and a note that gives no
    /// score nothing. `None` for anything but a good cut.
    pub fn score(&self) -> Option<CutScore> {
        let NoteOutcome::Good(cut) = &self.outcome else {
            return None;
        };
        let s = cut.score();
        Some(match self.id().scoring() {
            ScoringType::SliderHead => CutScore { after: 30, ..s },
            ScoringType::SliderTail => CutScore { before: 70, ..s },
            ScoringType::BurstSliderHead => CutScore { after: 0, ..s },
            ScoringType::BurstSliderElement => CutScore {
                before: 0,
                after: 0,
                accuracy: 20,
            },
            ScoringType::Ignore | ScoringType::NoScore => CutScore {
                before: 0,
                after: 0,
                accuracy: 0,
            },
            ScoringType::Legacy | ScoringType::Normal | ScoringType::Other(_) => s,
        })
    }
}

/// The total score of a replay recomputed from its note and wall events, with the combo
/// multiplier (1, 2, 4, 8; a bad cut, miss, bomb or wall halves it), as BeatLeader's
/// reference `ScoreCalculator` does. Events are taken in time order, notes before walls at
/// equal times.
pub fn replay_score(r: &Replay) -> i64 {
    let mut multiplier: i64 = 1;
    let mut progress: i64 = 0;
    let mut total: i64 = 0;
    let (mut n, mut w) = (0, 0);
    let decrease = |multiplier: &mut i64, progress: &mut i64| {
        *progress = 0;
        if *multiplier > 1 {
            *multiplier /= 2;
        }
    };
    loop {
        let note = r.notes.get(n);
        let wall = r.walls.get(w);
        let take_note = match (note, wall) {
            (None, None) => return total,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a.event_time <= b.time,
        };
        if !take_note {
            w += 1;
            decrease(&mut multiplier, &mut progress);
            continue;
        }
        n += 1;
        let Some(note) = note else { continue };
        match note.outcome {
            NoteOutcome::Good(_) => {
                if multiplier < 8 {
                    progress += 1;
                    if progress >= multiplier * 2 {
                        multiplier *= 2;
                        progress = 0;
                    }
                }
                total += i64::from(note.score().map_or(0, |s| s.total())) * multiplier;
            }
            NoteOutcome::Unknown(_) => {}
            _ => decrease(&mut multiplier, &mut progress),
        }
    }
}

/// What a player's HUD shows at a song time: the score with the combo multiplier, the
/// combo (good cuts since the last break), misses (bad cuts and missed notes) and bombs hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScoreAt {
    /// The score so far.
    pub score: i64,
    /// Good cuts since the last bad cut, miss, bomb or wall.
    pub combo: u32,
    /// Bad cuts and missed notes.
    pub misses: u32,
    /// Bombs hit.
    pub bombs: u32,
}

/// The HUD at song time `t` from the events with a time at or before `t`, in time order
/// (notes before walls at equal times; an event whose time is NaN never counts), with the
/// multiplier rules of [`replay_score`]. At the end of a replay whose events are in time
/// order its score is [`replay_score`]'s.
pub fn score_at(r: &Replay, t: f64) -> ScoreAt {
    let due = |time: f32| f64::from(time) <= t;
    let mut notes: Vec<&NoteEvent> = r.notes.iter().filter(|n| due(n.event_time)).collect();
    notes.sort_by(|a, b| a.event_time.total_cmp(&b.event_time));
    let mut walls: Vec<f32> = r.walls.iter().map(|w| w.time).filter(|&w| due(w)).collect();
    walls.sort_by(f32::total_cmp);
    let mut s = ScoreAt::default();
    let (mut multiplier, mut progress): (i64, i64) = (1, 0);
    let (mut n, mut w) = (0, 0);
    loop {
        let take_note = match (notes.get(n), walls.get(w)) {
            (None, None) => return s,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(&b)) => a.event_time <= b,
        };
        let broke = if take_note {
            let note = notes[n];
            n += 1;
            match note.outcome {
                NoteOutcome::Good(_) => {
                    if multiplier < 8 {
                        progress += 1;
                        if progress >= multiplier * 2 {
                            multiplier *= 2;
                            progress = 0;
                        }
                    }
                    s.score += i64::from(note.score().map_or(0, |c| c.total())) * multiplier;
                    s.combo += 1;
                    false
                }
                NoteOutcome::Unknown(_) => false,
                NoteOutcome::Bomb => {
                    s.bombs += 1;
                    true
                }
                NoteOutcome::Bad(_) | NoteOutcome::Miss => {
                    s.misses += 1;
                    true
                }
            }
        } else {
            w += 1;
            true
        };
        if broke {
            s.combo = 0;
            progress = 0;
            if multiplier > 1 {
                multiplier /= 2;
            }
        }
    }
}

#[cfg(test)]
mod score_at_tests {
    use super::*;

    #[test]
    fn at_the_end_it_is_the_replay_score_and_it_grows_with_time() {
        let r = crate::synth::replay(crate::synth::Settings {
            seed: 3,
            seconds: 30.0,
            fps: 30,
        });
        let end = score_at(&r, 1e9);
        assert_eq!(end.score, replay_score(&r));
        assert!(end.misses > 0, "{end:?}");
        assert_eq!(score_at(&r, -1.0), ScoreAt::default());
        let mut last = 0;
        let mut broken = false;
        for k in 0..60 {
            let now = score_at(&r, f64::from(k) * 0.5);
            assert!(now.score >= last);
            last = now.score;
            broken |= now.combo == 0 && now.misses + now.bombs > 0;
        }
        assert!(broken, "a break resets the combo somewhere");
    }
}

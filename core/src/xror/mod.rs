//! XROR (Extended Reality Open Recording, the format of the BOXRR-23 data set) read into a
//! BSOR [`Replay`], as MetaGuard's reference converter (`xror.py`, `fromBSOR`) lays Beat
//! Saber replays out: a BSON document whose `frames` are an fpzip-compressed array of rows
//! (time, then head, left hand, right hand × x, y, z, qx, qy, qz, qw) and whose `events` are
//! per type (`gc` good cuts, `bc` bad cuts, `m` misses, `b` bombs, `wh` wall hits, `h` height
//! changes, `p` pauses, optionally `f` frame rates), each with its attribute names, an
//! fpzip array of float rows (time first) and an array of other values per row.
//!
//! What XROR does not carry, and what this reader puts in its place (the reference
//! converter's own choices, so that its BSOR output and this reader's agree):
//! - frame rates, unless the recording has `f` events: 0;
//! - a good cut's `speedOK`, `directionOK`, `saberTypeOK`, `wasCutTooSoon`: true, true,
//!   true, false (the converter keeps only good cuts' other fields);
//! - an Oculus recording's bad cuts' cut info: zeros (the converter drops it);
//! - the order of note events at equal times, unless `order` is recorded: notes are sorted
//!   by time, good cuts, bad cuts, misses and bombs in that order at equal times;
//! - info fields that were zero, false or empty (the converter omits falsy values): 0,
//!   false or "";
//! - the timestamp's form: XROR holds a date in milliseconds, BSOR the Unix seconds as text;
//! - controller offsets, user data and any bytes after the BSOR's sections: none.
//!
//! Nothing here panics on input: a malformed document gives an [`XrorError`] naming the
//! field and, where known, the byte offset.

mod fpzip;

use std::fmt;

use bson::{RawArray, RawBsonRef, RawDocument};

pub use fpzip::{decompress as fpzip_decompress, Array as FpzipArray, FpzipError};

use crate::bsor::{
    BsorString, CutInfo, Frame, Height, Info, NoteEvent, NoteOutcome, Pause, Pose, Quat, RawBool,
    Replay, Vec3, Wall,
};

/// A malformed XROR recording: what is wrong, in which field, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XrorError {
    /// What is wrong.
    pub what: String,
    /// The field, as a path (`info.software.app.version`, `events[gc].floatData`).
    pub field: String,
    /// Byte offset from the start of the file, when known.
    pub offset: Option<u64>,
}

impl XrorError {
    fn new(field: impl Into<String>, what: impl Into<String>) -> Self {
        XrorError {
            what: what.into(),
            field: field.into(),
            offset: None,
        }
    }

    /// The part of the file: the field path's first part (`info`, `frames`, `events`).
    pub fn section(&self) -> &str {
        self.field.split(['.', '[']).next().unwrap_or("")
    }

    /// The byte offset, when known.
    pub fn offset(&self) -> Option<u64> {
        self.offset
    }
}

impl fmt::Display for XrorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in field {}", self.what, self.field)?;
        if let Some(o) = self.offset {
            write!(f, ", at byte {o}")?;
        }
        Ok(())
    }
}

impl std::error::Error for XrorError {}

/// True when `bytes` looks like a BSON document (its length field is its length, it ends
/// in a zero byte): how readers tell XROR from BSOR and `.bsors`.
pub fn looks_like_xror(bytes: &[u8]) -> bool {
    bytes.len() >= 5
        && bytes
            .first_chunk::<4>()
            .map(|h| i32::from_le_bytes(*h) as i64)
            == Some(bytes.len() as i64)
        && bytes.last() == Some(&0)
}

fn offset_in(file: &[u8], part: &[u8]) -> u64 {
    (part.as_ptr() as usize).saturating_sub(file.as_ptr() as usize) as u64
}

fn doc<'a>(
    d: &'a RawDocument,
    key: &str,
    path: &str,
) -> Result<Option<&'a RawDocument>, XrorError> {
    match d.get(key) {
        Ok(Some(RawBsonRef::Document(x))) => Ok(Some(x)),
        Ok(None) => Ok(None),
        Ok(Some(_)) => Err(XrorError::new(format!("{path}.{key}"), "not a document")),
        Err(e) => Err(XrorError::new(format!("{path}.{key}"), e.to_string())),
    }
}

/// A text field: a string, or a number written as text (ids may be integers).
fn text(d: Option<&RawDocument>, key: &str, path: &str) -> Result<String, XrorError> {
    let Some(d) = d else { return Ok(String::new()) };
    match d.get(key) {
        Ok(Some(RawBsonRef::String(s))) => Ok(s.to_owned()),
        Ok(Some(RawBsonRef::Int32(v))) => Ok(v.to_string()),
        Ok(Some(RawBsonRef::Int64(v))) => Ok(v.to_string()),
        Ok(None) => Ok(String::new()),
        Ok(Some(_)) => Err(XrorError::new(format!("{path}.{key}"), "not a string")),
        Err(e) => Err(XrorError::new(format!("{path}.{key}"), e.to_string())),
    }
}

fn number(v: RawBsonRef<'_>) -> Option<f64> {
    match v {
        RawBsonRef::Double(x) => Some(x),
        RawBsonRef::Int32(x) => Some(f64::from(x)),
        RawBsonRef::Int64(x) => Some(x as f64),
        RawBsonRef::Boolean(b) => Some(f64::from(u8::from(b))),
        _ => None,
    }
}

fn num(d: Option<&RawDocument>, key: &str, path: &str) -> Result<f64, XrorError> {
    let Some(d) = d else { return Ok(0.0) };
    match d.get(key) {
        Ok(Some(v)) => {
            number(v).ok_or_else(|| XrorError::new(format!("{path}.{key}"), "not a number"))
        }
        Ok(None) => Ok(0.0),
        Err(e) => Err(XrorError::new(format!("{path}.{key}"), e.to_string())),
    }
}

fn array<'a>(d: &'a RawDocument, key: &str, path: &str) -> Result<Option<&'a RawArray>, XrorError> {
    match d.get(key) {
        Ok(Some(RawBsonRef::Array(a))) => Ok(Some(a)),
        Ok(None) => Ok(None),
        Ok(Some(_)) => Err(XrorError::new(format!("{path}.{key}"), "not an array")),
        Err(e) => Err(XrorError::new(format!("{path}.{key}"), e.to_string())),
    }
}

fn items<'a>(a: &'a RawArray, path: &str) -> Result<Vec<RawBsonRef<'a>>, XrorError> {
    a.into_iter()
        .map(|r| r.map_err(|e| XrorError::new(path, e.to_string())))
        .collect()
}

/// An fpzip-compressed 2-D array: rows of `width` floats.
fn floats(
    file: &[u8],
    d: &RawDocument,
    key: &str,
    path: &str,
) -> Result<Option<(Vec<f32>, usize)>, XrorError> {
    let bin = match d.get(key) {
        Ok(Some(RawBsonRef::Binary(b))) => b.bytes,
        Ok(None) => return Ok(None),
        Ok(Some(_)) => return Err(XrorError::new(path, "not binary data")),
        Err(e) => return Err(XrorError::new(path, e.to_string())),
    };
    let at = offset_in(file, bin);
    let a = fpzip::decompress(bin).map_err(|e| XrorError {
        what: e.to_string(),
        field: path.to_owned(),
        offset: Some(at + e.offset),
    })?;
    if a.nz != 1 || a.nf != 1 || a.nx == 0 {
        return Err(XrorError {
            what: format!(
                "an fpzip array of {}×{}×{}×{} where rows (nx × ny × 1 × 1) are expected",
                a.nx, a.ny, a.nz, a.nf
            ),
            field: path.to_owned(),
            offset: Some(at),
        });
    }
    Ok(Some((a.values, a.nx)))
}

/// One event type's occurrences, each a map from attribute name to value.
struct Events {
    names: Vec<String>,
    rows: Vec<Vec<f64>>,
}

impl Events {
    fn get(&self, row: &[f64], name: &str) -> Option<f64> {
        self.names
            .iter()
            .position(|n| n == name)
            .and_then(|i| row.get(i).copied())
    }
}

fn events(file: &[u8], e: &RawDocument, path: &str) -> Result<Events, XrorError> {
    let mut names = vec!["time".to_owned()];
    if let Some(attr) = array(e, "attr", path)? {
        for v in items(attr, &format!("{path}.attr"))? {
            match v {
                RawBsonRef::String(s) => names.push(s.to_owned()),
                _ => {
                    return Err(XrorError::new(
                        format!("{path}.attr"),
                        "a name that is not a string",
                    ))
                }
            }
        }
    }
    let Some((values, width)) = floats(file, e, "floatData", &format!("{path}.floatData"))? else {
        return Ok(Events {
            names,
            rows: Vec::new(),
        });
    };
    let other = match array(e, "otherData", path)? {
        Some(a) => items(a, &format!("{path}.otherData"))?,
        None => Vec::new(),
    };
    let mut rows = Vec::new();
    let mut next_other = other.iter();
    for (i, row) in values.chunks_exact(width).enumerate() {
        // The reference writer pads arrays fpzip would not take with rows of -1.
        if row.first() == Some(&-1.0) {
            continue;
        }
        let mut r: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        if !other.is_empty() {
            let o = next_other.next().ok_or_else(|| {
                XrorError::new(
                    format!("{path}.otherData"),
                    format!("no entry for occurrence {i}"),
                )
            })?;
            let RawBsonRef::Array(o) = o else {
                return Err(XrorError::new(
                    format!("{path}.otherData[{i}]"),
                    "not an array",
                ));
            };
            for v in items(o, &format!("{path}.otherData[{i}]"))? {
                r.push(number(v).ok_or_else(|| {
                    XrorError::new(
                        format!("{path}.otherData[{i}]"),
                        "a value that is not a number",
                    )
                })?);
            }
        }
        rows.push(r);
    }
    Ok(Events { names, rows })
}

/// Reads an XROR recording of a Beat Saber play into a replay.
pub fn parse(bytes: &[u8]) -> Result<Replay, XrorError> {
    let root = RawDocument::from_bytes(bytes).map_err(|e| XrorError {
        what: e.to_string(),
        field: "document".into(),
        offset: Some(0),
    })?;
    let info_doc = doc(root, "info", "")?.ok_or_else(|| XrorError::new("info", "missing"))?;
    let p = "info";
    let software = doc(info_doc, "software", p)?;
    let app = match software {
        Some(s) => doc(s, "app", "info.software")?,
        None => None,
    };
    let extension = match app
        .map(|a| array(a, "extensions", "info.software.app"))
        .transpose()?
        .flatten()
    {
        Some(a) => match items(a, "info.software.app.extensions")?.first() {
            Some(RawBsonRef::Document(d)) => Some(*d),
            _ => None,
        },
        None => None,
    };
    let activity = match software {
        Some(s) => doc(s, "activity", "info.software")?,
        None => None,
    };
    let environment = match software {
        Some(s) => doc(s, "environment", "info.software")?,
        None => None,
    };
    let user = doc(info_doc, "user", p)?;
    let devices = match doc(info_doc, "hardware", p)? {
        Some(h) => match array(h, "devices", "info.hardware")? {
            Some(a) => items(a, "info.hardware.devices")?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let device_name = |i: usize| -> Result<String, XrorError> {
        match devices.get(i) {
            Some(RawBsonRef::Document(d)) => {
                text(Some(d), "name", &format!("info.hardware.devices[{i}]"))
            }
            _ => Ok(String::new()),
        }
    };
    let timestamp = match info_doc.get("timestamp") {
        Ok(Some(RawBsonRef::DateTime(t))) => (t.timestamp_millis().div_euclid(1000)).to_string(),
        Ok(Some(v)) => number(v)
            .map(|v| (v as i64).to_string())
            .unwrap_or_default(),
        _ => String::new(),
    };
    let a = "info.software.activity";
    let s = |v: String| BsorString::new(&v);
    let info = Info {
        version: s(text(
            extension,
            "version",
            "info.software.app.extensions[0]",
        )?),
        game_version: s(text(app, "version", "info.software.app")?),
        timestamp: s(timestamp),
        player_id: s(text(user, "id", "info.user")?),
        player_name: s(text(user, "name", "info.user")?),
        platform: s(text(software, "runtime", "info.software")?),
        tracking_system: s(text(software, "api", "info.software")?),
        hmd: s(device_name(0)?),
        controller: s(device_name(2)?),
        hash: s(text(activity, "songHash", a)?),
        song_name: s(text(activity, "name", a)?),
        mapper: s(text(activity, "mapper", a)?),
        difficulty: s(text(activity, "difficulty", a)?),
        score: num(activity, "score", a)? as i32,
        mode: s(text(activity, "mode", a)?),
        environment: s(text(environment, "name", "info.software.environment")?),
        modifiers: s(text(activity, "modifiers", a)?),
        jump_distance: num(activity, "jumpDistance", a)? as f32,
        left_handed: RawBool(u8::from(num(activity, "leftHanded", a)? != 0.0)),
        height: num(activity, "height", a)? as f32,
        start_time: num(activity, "startTime", a)? as f32,
        fail_time: num(activity, "failTime", a)? as f32,
        speed: num(activity, "speed", a)? as f32,
    };
    let oculus = info.platform.bytes == b"oculus";

    // Events by type id.
    let mut by_id: Vec<(String, Events)> = Vec::new();
    if let Some(list) = array(root, "events", "")? {
        for (i, e) in items(list, "events")?.into_iter().enumerate() {
            let RawBsonRef::Document(e) = e else {
                return Err(XrorError::new(format!("events[{i}]"), "not a document"));
            };
            let id = text(Some(e), "id", &format!("events[{i}]"))?;
            let path = format!("events[{id}]");
            by_id.push((id, events(bytes, e, &path)?));
        }
    }
    let find = |id: &str| by_id.iter().find(|(k, _)| k == id).map(|(_, e)| e);

    let (values, width) = floats(bytes, root, "frames", "frames")?
        .ok_or_else(|| XrorError::new("frames", "missing"))?;
    if width < 22 {
        return Err(XrorError::new(
            "frames",
            format!("rows of {width} values where time and 21 pose values are needed"),
        ));
    }
    let fps = find("f");
    let pose = |r: &[f32]| Pose {
        position: Vec3 {
            x: r[0],
            y: r[1],
            z: r[2],
        },
        rotation: Quat {
            x: r[3],
            y: r[4],
            z: r[5],
            w: r[6],
        },
    };
    let frames: Vec<Frame> = values
        .chunks_exact(width)
        .enumerate()
        .map(|(i, r)| Frame {
            time: r[0],
            fps: fps
                .and_then(|f| f.rows.get(i).and_then(|row| f.get(row, "fps")))
                .map_or(0, |v| v as i32),
            head: pose(&r[1..8]),
            left_hand: pose(&r[8..15]),
            right_hand: pose(&r[15..22]),
        })
        .collect();

    // Note events: good cuts, bad cuts, misses, bombs; sorted by `order` or by time.
    let mut notes: Vec<(f64, NoteEvent)> = Vec::new();
    for (id, kind) in [("gc", 0), ("bc", 1), ("m", 2), ("b", 3)] {
        let Some(ev) = find(id) else { continue };
        for row in &ev.rows {
            let g = |n: &str| ev.get(row, n).unwrap_or(0.0);
            let has = |n: &str| ev.get(row, n).is_some();
            let f = |n: &str| g(n) as f32;
            let cut = || CutInfo {
                speed_ok: RawBool(if has("speedOK") {
                    u8::from(g("speedOK") != 0.0)
                } else {
                    u8::from(kind == 0)
                }),
                direction_ok: RawBool(if has("directionOK") {
                    u8::from(g("directionOK") != 0.0)
                } else {
                    u8::from(kind == 0)
                }),
                saber_type_ok: RawBool(if has("saberTypeOK") {
                    u8::from(g("saberTypeOK") != 0.0)
                } else {
                    u8::from(kind == 0)
                }),
                was_cut_too_soon: RawBool(u8::from(g("wasCutTooSoon") != 0.0)),
                saber_speed: f("saberSpeed"),
                saber_dir: Vec3 {
                    x: f("saberDirX"),
                    y: f("saberDirY"),
                    z: f("saberDirZ"),
                },
                saber_type: g("saberType") as i32,
                time_deviation: f("timeDeviation"),
                cut_dir_deviation: f("cutDirDeviation"),
                cut_point: Vec3 {
                    x: f("cutPointX"),
                    y: f("cutPointY"),
                    z: f("cutPointZ"),
                },
                cut_normal: Vec3 {
                    x: f("cutNormalX"),
                    y: f("cutNormalY"),
                    z: f("cutNormalZ"),
                },
                cut_distance_to_center: f("cutDistanceToCenter"),
                cut_angle: f("cutAngle"),
                before_cut_rating: f("beforeCutRating"),
                after_cut_rating: f("afterCutRating"),
            };
            let outcome = match kind {
                0 => NoteOutcome::Good(cut()),
                1 if oculus && !has("saberSpeed") => NoteOutcome::Bad(CutInfo::default()),
                1 => NoteOutcome::Bad(cut()),
                2 => NoteOutcome::Miss,
                _ => NoteOutcome::Bomb,
            };
            let key = if has("order") { g("order") } else { g("time") };
            notes.push((
                key,
                NoteEvent {
                    note_id: g("noteID") as i32,
                    event_time: f("time"),
                    spawn_time: f("spawnTime"),
                    outcome,
                },
            ));
        }
    }
    // Stable: equal keys keep the type order above, as the reference converter's sort does.
    notes.sort_by(|a, b| a.0.total_cmp(&b.0));

    let rows = |id: &str| find(id).map(|e| (e, e.rows.as_slice()));
    let walls = rows("wh").map_or(Vec::new(), |(e, rs)| {
        rs.iter()
            .map(|r| Wall {
                wall_id: e.get(r, "wallID").unwrap_or(0.0) as i32,
                energy: e.get(r, "energy").unwrap_or(0.0) as f32,
                time: e.get(r, "time").unwrap_or(0.0) as f32,
                spawn_time: e.get(r, "spawnTime").unwrap_or(0.0) as f32,
            })
            .collect()
    });
    let heights = rows("h").map_or(Vec::new(), |(e, rs)| {
        rs.iter()
            .map(|r| Height {
                height: e.get(r, "height").unwrap_or(0.0) as f32,
                time: e.get(r, "time").unwrap_or(0.0) as f32,
            })
            .collect()
    });
    let pauses = rows("p").map_or(Vec::new(), |(e, rs)| {
        rs.iter()
            .map(|r| Pause {
                duration: e.get(r, "duration").unwrap_or(0.0) as i64,
                time: e.get(r, "time").unwrap_or(0.0) as f32,
            })
            .collect()
    });
    Ok(Replay {
        info,
        frames,
        notes: notes.into_iter().map(|(_, n)| n).collect(),
        walls,
        heights,
        pauses,
        controller_offsets: None,
        user_data: None,
        trailing: Vec::new(),
    })
}

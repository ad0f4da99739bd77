//! A replay rebuilt from the arrays (never from source bytes): what `to_bsor` and `encode`
//! write.

use bsor_stream_core::bsor::{
    BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, NoteId, NoteOutcome,
    Pause, Pose, Quat, RawBool, Replay, UnknownEventType, Vec3, Wall, WallId,
};
use numpy::{PyReadonlyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::columns::POSE_FLOATS;

fn item<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(key)?
        .ok_or_else(|| PyKeyError::new_err(format!("missing {key:?}")))
}

fn dict<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyDict>> {
    Ok(item(d, key)?.cast_into::<PyDict>()?)
}

/// A column as a Vec, of exactly `len` values when `len` is given.
fn col<T: numpy::Element + Copy>(
    d: &Bound<'_, PyDict>,
    table: &str,
    key: &str,
    len: Option<usize>,
) -> PyResult<Vec<T>> {
    let a: PyReadonlyArray1<'_, T> = item(d, key)?.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{table}[{key:?}] must be a 1-D array of {}",
            std::any::type_name::<T>()
        ))
    })?;
    let v = a.as_array().to_vec();
    if let Some(n) = len {
        if v.len() != n {
            return Err(PyValueError::new_err(format!(
                "{table}[{key:?}] has {} values where the table has {n}",
                v.len()
            )));
        }
    }
    Ok(v)
}

fn string(
    info: &Bound<'_, PyDict>,
    lengths: &Bound<'_, PyDict>,
    key: &str,
) -> PyResult<BsorString> {
    let v = item(info, key)?;
    let bytes = if let Ok(s) = v.cast::<PyString>() {
        s.to_str()?.as_bytes().to_vec()
    } else if let Ok(b) = v.cast::<PyBytes>() {
        b.as_bytes().to_vec()
    } else {
        return Err(PyTypeError::new_err(format!(
            "info[{key:?}] must be str or bytes"
        )));
    };
    // A legacy length field is kept while the string keeps the byte count it was read with.
    let kept = match lengths.get_item(key)? {
        Some(t) => {
            let (field, len): (i32, usize) = t.extract()?;
            (len == bytes.len()).then_some(field)
        }
        None => None,
    };
    let length_field = kept.unwrap_or_else(|| i32::try_from(bytes.len()).unwrap_or(i32::MAX));
    Ok(BsorString {
        bytes,
        length_field,
    })
}

fn info_from(info: &Bound<'_, PyDict>, lengths: &Bound<'_, PyDict>) -> PyResult<Info> {
    let s = |k: &str| string(info, lengths, k);
    let f = |k: &str| -> PyResult<f32> { item(info, k)?.extract::<f32>() };
    let left: Bound<'_, PyAny> = item(info, "leftHanded")?;
    let left_handed = RawBool(
        left.extract::<u8>()
            .or_else(|_| left.extract::<bool>().map(u8::from))?,
    );
    Ok(Info {
        version: s("version")?,
        game_version: s("gameVersion")?,
        timestamp: s("timestamp")?,
        player_id: s("playerID")?,
        player_name: s("playerName")?,
        platform: s("platform")?,
        tracking_system: s("trackingSystem")?,
        hmd: s("hmd")?,
        controller: s("controller")?,
        hash: s("hash")?,
        song_name: s("songName")?,
        mapper: s("mapper")?,
        difficulty: s("difficulty")?,
        score: item(info, "score")?.extract()?,
        mode: s("mode")?,
        environment: s("environment")?,
        modifiers: s("modifiers")?,
        jump_distance: f("jumpDistance")?,
        left_handed,
        height: f("height")?,
        start_time: f("startTime")?,
        fail_time: f("failTime")?,
        speed: f("speed")?,
    })
}

fn pose(p: &[f32]) -> Pose {
    Pose {
        position: Vec3 {
            x: p[0],
            y: p[1],
            z: p[2],
        },
        rotation: Quat {
            x: p[3],
            y: p[4],
            z: p[5],
            w: p[6],
        },
    }
}

fn frames_from(d: &Bound<'_, PyDict>) -> PyResult<Vec<Frame>> {
    let time: Vec<f32> = col(d, "frames", "time", None)?;
    let n = time.len();
    let fps: Vec<i32> = col(d, "frames", "fps", Some(n))?;
    let poses: PyReadonlyArrayDyn<'_, f32> = item(d, "poses")?
        .extract()
        .map_err(|_| PyTypeError::new_err("frames[\"poses\"] must be a float32 array"))?;
    if poses.shape() != [n, 3, 7] {
        return Err(PyValueError::new_err(format!(
            "frames[\"poses\"] has shape {:?} where ({n}, 3, 7) is needed",
            poses.shape()
        )));
    }
    let poses = poses.as_array();
    let flat: Vec<f32> = poses.iter().copied().collect();
    Ok(flat
        .chunks_exact(POSE_FLOATS)
        .zip(time.iter().zip(&fps))
        .map(|(p, (&time, &fps))| Frame {
            time,
            fps,
            head: pose(&p[0..7]),
            left_hand: pose(&p[7..14]),
            right_hand: pose(&p[14..21]),
        })
        .collect())
}

/// `read`: the note IDs as loaded, when known, to tell a changed ID from changed parts.
fn notes_from(d: &Bound<'_, PyDict>, read: Option<Vec<i32>>) -> PyResult<Vec<NoteEvent>> {
    let t = "notes";
    let note_id: Vec<i32> = col(d, t, "note_id", None)?;
    let n = Some(note_id.len());
    let read = read.filter(|r| r.len() == note_id.len());
    let i32s = |k: &str| col::<i32>(d, t, k, n);
    let f32s = |k: &str| col::<f32>(d, t, k, n);
    let u8s = |k: &str| col::<u8>(d, t, k, n);
    let (event_time, spawn_time, event_type) = (
        f32s("event_time")?,
        f32s("spawn_time")?,
        i32s("event_type")?,
    );
    let parts = [
        i32s("scoring_type")?,
        i32s("line")?,
        i32s("layer")?,
        i32s("color")?,
        i32s("cut_direction")?,
    ];
    let flags = [
        u8s("speed_ok")?,
        u8s("direction_ok")?,
        u8s("saber_type_ok")?,
        u8s("was_cut_too_soon")?,
    ];
    let saber_type = i32s("saber_type")?;
    let names = [
        "saber_speed",
        "saber_dir_x",
        "saber_dir_y",
        "saber_dir_z",
        "time_deviation",
        "cut_dir_deviation",
        "cut_point_x",
        "cut_point_y",
        "cut_point_z",
        "cut_normal_x",
        "cut_normal_y",
        "cut_normal_z",
        "cut_distance_to_center",
        "cut_angle",
        "before_cut_rating",
        "after_cut_rating",
    ];
    let mut fl = Vec::with_capacity(names.len());
    for k in names {
        fl.push(f32s(k)?);
    }
    let mut out = Vec::with_capacity(note_id.len());
    for i in 0..note_id.len() {
        // The id as it is if it was changed (or its parts were not); else the parts, joined.
        let split = NoteId::split(note_id[i]);
        let id_changed = read.as_ref().is_some_and(|r| r[i] != note_id[i]);
        let now = NoteId {
            scoring_type: parts[0][i],
            line_index: parts[1][i],
            note_line_layer: parts[2][i],
            color_type: parts[3][i],
            cut_direction: parts[4][i],
        };
        let id = if id_changed || split == now {
            note_id[i]
        } else {
            now.join()
        };
        let v3 = |a: usize| Vec3 {
            x: fl[a][i],
            y: fl[a + 1][i],
            z: fl[a + 2][i],
        };
        let cut = || CutInfo {
            speed_ok: RawBool(flags[0][i]),
            direction_ok: RawBool(flags[1][i]),
            saber_type_ok: RawBool(flags[2][i]),
            was_cut_too_soon: RawBool(flags[3][i]),
            saber_speed: fl[0][i],
            saber_dir: v3(1),
            saber_type: saber_type[i],
            time_deviation: fl[4][i],
            cut_dir_deviation: fl[5][i],
            cut_point: v3(6),
            cut_normal: v3(9),
            cut_distance_to_center: fl[12][i],
            cut_angle: fl[13][i],
            before_cut_rating: fl[14][i],
            after_cut_rating: fl[15][i],
        };
        let outcome = match event_type[i] {
            0 => NoteOutcome::Good(cut()),
            1 => NoteOutcome::Bad(cut()),
            2 => NoteOutcome::Miss,
            3 => NoteOutcome::Bomb,
            other => match UnknownEventType::new(other) {
                Some(u) => NoteOutcome::Unknown(u),
                None => NoteOutcome::Miss,
            },
        };
        out.push(NoteEvent {
            note_id: id,
            event_time: event_time[i],
            spawn_time: spawn_time[i],
            outcome,
        });
    }
    Ok(out)
}

/// The replay a dict describes (the keys `load` gives; `frames` may be None only for a
/// replay without frames).
pub(crate) fn replay_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Replay> {
    let lengths = match d.get_item("length_fields")? {
        Some(l) if !l.is_none() => l.cast_into::<PyDict>()?,
        _ => PyDict::new(d.py()),
    };
    let info = info_from(&dict(d, "info")?, &lengths)?;
    let frames_obj = item(d, "frames")?;
    let frames = if frames_obj.is_none() {
        return Err(PyValueError::new_err(
            "this replay was loaded without frames (load_events): load it with load() to write it",
        ));
    } else {
        frames_from(&frames_obj.cast_into::<PyDict>()?)?
    };
    let read = match d.get_item("note_id_read")? {
        Some(a) if !a.is_none() => Some(
            a.extract::<PyReadonlyArray1<'_, i32>>()?
                .as_array()
                .to_vec(),
        ),
        _ => None,
    };
    let notes = notes_from(&dict(d, "notes")?, read)?;
    let w = dict(d, "walls")?;
    let mut wall_id: Vec<i32> = col(&w, "walls", "wall_id", None)?;
    let n = Some(wall_id.len());
    // As for notes: the ID as it is if it was changed (or its parts were not), else the
    // parts joined (`line·100 + obstacle_type·10 + width`).
    if w.contains("line")? {
        let parts = [
            col::<i32>(&w, "walls", "line", n)?,
            col::<i32>(&w, "walls", "obstacle_type", n)?,
            col::<i32>(&w, "walls", "width", n)?,
        ];
        let read = match d.get_item("wall_id_read")? {
            Some(a) if !a.is_none() => Some(
                a.extract::<PyReadonlyArray1<'_, i32>>()?
                    .as_array()
                    .to_vec(),
            ),
            _ => None,
        }
        .filter(|r| r.len() == wall_id.len());
        for (i, id) in wall_id.iter_mut().enumerate() {
            let split = WallId::split(*id);
            let now = (parts[0][i], parts[1][i], parts[2][i]);
            let changed = read.as_ref().is_some_and(|r| r[i] != *id);
            if !changed && (split.line_index, split.obstacle_type, split.width) != now {
                *id = now
                    .0
                    .wrapping_mul(100)
                    .wrapping_add(now.1.wrapping_mul(10))
                    .wrapping_add(now.2);
            }
        }
    }
    let energy: Vec<f32> = col(&w, "walls", "energy", n)?;
    let wtime: Vec<f32> = col(&w, "walls", "time", n)?;
    let wspawn: Vec<f32> = col(&w, "walls", "spawn_time", n)?;
    let walls = (0..wall_id.len())
        .map(|i| Wall {
            wall_id: wall_id[i],
            energy: energy[i],
            time: wtime[i],
            spawn_time: wspawn[i],
        })
        .collect();
    let h = dict(d, "heights")?;
    let height: Vec<f32> = col(&h, "heights", "height", None)?;
    let htime: Vec<f32> = col(&h, "heights", "time", Some(height.len()))?;
    let heights = height
        .iter()
        .zip(&htime)
        .map(|(&height, &time)| Height { height, time })
        .collect();
    let p = dict(d, "pauses")?;
    let duration: Vec<i64> = col(&p, "pauses", "duration", None)?;
    let ptime: Vec<f32> = col(&p, "pauses", "time", Some(duration.len()))?;
    let pauses = duration
        .iter()
        .zip(&ptime)
        .map(|(&duration, &time)| Pause { duration, time })
        .collect();
    let offsets = item(d, "controller_offsets")?;
    let controller_offsets = if offsets.is_none() {
        None
    } else {
        let a: PyReadonlyArrayDyn<'_, f32> = offsets.extract().map_err(|_| {
            PyTypeError::new_err("controller_offsets must be a float32 array of shape (2, 7)")
        })?;
        if a.shape() != [2, 7] {
            return Err(PyValueError::new_err(
                "controller_offsets must be a float32 array of shape (2, 7)",
            ));
        }
        let v: Vec<f32> = a.as_array().iter().copied().collect();
        Some(ControllerOffsets {
            left: pose(&v[..7]),
            right: pose(&v[7..]),
        })
    };
    let user = item(d, "user_data")?;
    let user_data = if user.is_none() {
        None
    } else {
        Some(user.cast::<PyBytes>()?.as_bytes().to_vec())
    };
    let trailing = match d.get_item("trailing")? {
        Some(t) if !t.is_none() => t.cast::<PyBytes>()?.as_bytes().to_vec(),
        _ => Vec::new(),
    };
    Ok(Replay {
        info,
        frames,
        notes,
        walls,
        heights,
        pauses,
        controller_offsets,
        user_data,
        trailing,
    })
}

//! The measurements: every coder on every replay, timed by stage as `bench` times (wall
//! clock around each step, once per replay), and the keyframe-interval sweep.
//!
//! The rate–distortion curves are two one-dimensional sweeps of the custom profile
//! (proto-spec/format.md section 3, profile 3): the position step from 0.05 to 5 mm with
//! rotations at fine's grid, and the rotation step from 0.005° to 1° with positions at
//! fine's step; the keyframe-interval sweep shows what the intervals cost.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bsor_stream::bsor::{self, Frame, Replay};
use bsor_stream::stream::{accuracy, CustomSteps, Profile, Settings, StreamEncoder};
use bsor_stream::transcode;

use super::{
    butter, progress, Entry, Errors, FileRow, Histogram, Report, Stages, StepPoint, SweepPoint,
};
use crate::commands::{read_all, Failure};

/// The profiles, by name.
pub const PROFILES: [(Profile, &str); 3] = [
    (Profile::Lossless, "lossless"),
    (Profile::Fine, "fine"),
    (Profile::Compact, "compact"),
];

/// A setting's name, how it is made from a profile, and the baseline's keyframe interval in
/// seconds (a keyframe every that many seconds' worth of frames).
pub type Setting = (&'static str, fn(Profile) -> Settings, f64);

/// The two settings of each profile.
pub const SETTINGS: [Setting; 2] = [
    ("live", Settings::live, 1.0),
    ("archive", Settings::archive, 10.0),
];

/// The position steps of the sweep, in millimetres (rotations at fine's grid).
pub const POSITION_STEPS_MM: [f64; 7] = [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0];

/// The rotation steps of the sweep, in degrees (positions at fine's step).
pub const ROTATION_STEPS_DEG: [f64; 8] = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

/// Fine's grid, which the sweep keeps for the quantity it does not vary.
const FINE_STEP_MM: f64 = 0.1153;
const FINE_M: u32 = 3600;

/// The step sweep's grids: (sweep name, custom steps).
fn step_grid() -> Result<Vec<(&'static str, CustomSteps)>, String> {
    let mut out = Vec::new();
    for mm in POSITION_STEPS_MM {
        let c = CustomSteps::new((mm / 1000.0) as f32, FINE_M).map_err(|e| e.to_string())?;
        out.push(("position", c));
    }
    for deg in ROTATION_STEPS_DEG {
        let c = CustomSteps::from_mm_deg(FINE_STEP_MM, deg).map_err(|e| e.to_string())?;
        out.push(("rotation", c));
    }
    Ok(out)
}

/// The general compressors, by name, in the page's order.
pub const COMPRESSORS: [&str; 4] = ["zstd-3", "zstd-19-long", "xz-9e", "brotli-11"];

fn compress(name: &str, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use zstd::zstd_safe::CParameter;
    match name {
        "zstd-3" => zstd::bulk::compress(bytes, 3),
        "zstd-19-long" => {
            // As `zstd -19 --long`: long-distance matching with a 128 MiB window.
            let mut c = zstd::bulk::Compressor::new(19)?;
            c.set_parameter(CParameter::EnableLongDistanceMatching(true))?;
            c.set_parameter(CParameter::WindowLog(27))?;
            c.compress(bytes)
        }
        "xz-9e" => liblzma::encode_all(bytes, 9 | liblzma::stream::PRESET_EXTREME),
        _ => {
            let mut out = Vec::new();
            brotli::CompressorReader::new(bytes, 4096, 11, 24).read_to_end(&mut out)?;
            Ok(out)
        }
    }
}

fn decompress(name: &str, packed: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
    match name {
        "zstd-3" => zstd::bulk::decompress(packed, len),
        "zstd-19-long" => {
            let mut d = zstd::bulk::Decompressor::new()?;
            d.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(27))?;
            d.decompress(packed, len)
        }
        "xz-9e" => liblzma::decode_all(packed),
        _ => {
            let mut out = Vec::with_capacity(len);
            brotli::Decompressor::new(packed, 4096).read_to_end(&mut out)?;
            Ok(out)
        }
    }
}

/// The events, optional sections and info of a replay as BSOR bytes (frames left out).
fn events_bytes(r: &Replay) -> Vec<u8> {
    bsor::to_vec(&Replay {
        frames: Vec::new(),
        ..r.clone()
    })
    .unwrap_or_default()
}

/// Errors of `back` against `r`, with the errors added to the histograms if given. Fails
/// when the events, frame times or frame count differ: every coder keeps them exact.
fn errors(
    r: &Replay,
    back: &Replay,
    what: &str,
    mut hist: Option<(&mut Histogram, &mut Histogram)>,
) -> Result<Errors, String> {
    if back.frames.len() != r.frames.len() {
        return Err(format!(
            "{what}: {} frames of {}",
            back.frames.len(),
            r.frames.len()
        ));
    }
    if events_bytes(r) != events_bytes(back) {
        return Err(format!("{what}: the events are not exact"));
    }
    let mut e = Errors::default();
    let poses = |f: &Frame| [f.head, f.left_hand, f.right_hand];
    for (o, d) in r.frames.iter().zip(&back.frames) {
        if o.time.to_bits() != d.time.to_bits() || o.fps != d.fps {
            return Err(format!("{what}: frame times are not exact"));
        }
        for (po, pd) in poses(o).iter().zip(&poses(d)) {
            if let Some(x) = accuracy::position_error_mm(&po.position, &pd.position) {
                e.max_position_mm = e.max_position_mm.max(x);
                e.sums.0 += x;
                e.sums.1 += 1;
                if let Some((p, _)) = hist.as_mut() {
                    p.add(x);
                }
            }
            if let Some(x) = accuracy::rotation_error_deg(&po.rotation, &pd.rotation) {
                e.max_rotation_deg = e.max_rotation_deg.max(x);
                e.sums.2 += x;
                e.sums.3 += 1;
                if let Some((_, q)) = hist.as_mut() {
                    q.add(x);
                }
            }
        }
    }
    e.add(&Errors::default());
    Ok(e)
}

/// One replay's measurement of one coder.
struct One {
    bytes: u64,
    encode: Stages,
    decode: Stages,
    error: Errors,
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// The stream format: parse, frames (predict and code in one pass), the rest (events,
/// trailer, index), then decode and write BSOR.
fn stream(
    bytes: &[u8],
    settings: Settings,
    what: &str,
    hist: Option<(&mut Histogram, &mut Histogram)>,
) -> Result<One, String> {
    let t = Instant::now();
    let r = bsor::parse(bytes).map_err(|e| e.to_string())?;
    let parse = secs(t);
    let t = Instant::now();
    let mut frames_only = StreamEncoder::new(r.info.clone(), settings);
    for f in &r.frames {
        frames_only.push_frame(f);
    }
    std::hint::black_box(frames_only.take_output());
    let code = secs(t);
    let t = Instant::now();
    let out = transcode::encode_replay(&r, settings);
    let all = secs(t);
    let t = Instant::now();
    let (back, rec) = transcode::decode_replay(&out).map_err(|e| format!("{what}: {e}"))?;
    let decode = secs(t);
    let t = Instant::now();
    std::hint::black_box(bsor::to_vec(&back).map_err(|e| e.to_string())?);
    let write = secs(t);
    if !rec.complete {
        return Err(format!("{what}: the stream did not decode completely"));
    }
    Ok(One {
        bytes: out.len() as u64,
        encode: Stages {
            parse,
            code,
            compress: (all - code).max(0.0),
            ..Stages::default()
        },
        decode: Stages {
            code: decode,
            write,
            ..Stages::default()
        },
        error: errors(&r, &back, what, hist)?,
    })
}

fn baseline(
    bytes: &[u8],
    seconds: f64,
    what: &str,
    hist: Option<(&mut Histogram, &mut Histogram)>,
) -> Result<One, String> {
    let t = Instant::now();
    let r = bsor::parse(bytes).map_err(|e| e.to_string())?;
    let parse = secs(t);
    let n = keyframe_frames(&r, seconds);
    let t = Instant::now();
    let (out, times) = butter::encode(&r, n)?;
    let write = (secs(t) - times.predict - times.compress).max(0.0);
    let t = Instant::now();
    let back = butter::decode(&out).map_err(|e| format!("{what}: {e}"))?;
    let decode = secs(t);
    let t = Instant::now();
    std::hint::black_box(bsor::to_vec(&back).map_err(|e| e.to_string())?);
    let write_back = secs(t);
    Ok(One {
        bytes: out.len() as u64,
        encode: Stages {
            parse,
            predict: times.predict,
            compress: times.compress,
            write,
            ..Stages::default()
        },
        decode: Stages {
            code: decode,
            write: write_back,
            ..Stages::default()
        },
        error: errors(&r, &back, what, hist)?,
    })
}

/// Frames in `seconds` of the replay at its mean frame rate (at least 1).
fn keyframe_frames(r: &Replay, seconds: f64) -> usize {
    let span = match (r.frames.first(), r.frames.last()) {
        (Some(a), Some(b)) => f64::from(b.time - a.time),
        _ => 0.0,
    };
    if span.is_finite() && span > 0.0 {
        ((r.frames.len() as f64 - 1.0) / span * seconds)
            .round()
            .max(1.0) as usize
    } else {
        90
    }
}

fn general(name: &str, bytes: &[u8]) -> Result<One, String> {
    let t = Instant::now();
    let packed = compress(name, bytes).map_err(|e| format!("{name}: {e}"))?;
    let c = secs(t);
    let t = Instant::now();
    let back = decompress(name, &packed, bytes.len()).map_err(|e| format!("{name}: {e}"))?;
    let d = secs(t);
    if back != bytes {
        return Err(format!("{name}: did not round-trip"));
    }
    Ok(One {
        bytes: packed.len() as u64,
        encode: Stages {
            compress: c,
            ..Stages::default()
        },
        decode: Stages {
            compress: d,
            ..Stages::default()
        },
        error: Errors::default(),
    })
}

fn bsor_itself(bytes: &[u8]) -> Result<One, String> {
    let t = Instant::now();
    let r = bsor::parse(bytes).map_err(|e| e.to_string())?;
    let parse = secs(t);
    let t = Instant::now();
    let out = bsor::to_vec(&r).map_err(|e| e.to_string())?;
    let write = secs(t);
    Ok(One {
        bytes: out.len() as u64,
        encode: Stages {
            write,
            ..Stages::default()
        },
        decode: Stages {
            parse,
            ..Stages::default()
        },
        error: Errors::default(),
    })
}

/// The two histograms (position, rotation) at the start of `h`.
fn pick(h: &mut [Histogram]) -> Option<(&mut Histogram, &mut Histogram)> {
    match h {
        [a, b, ..] => Some((a, b)),
        _ => None,
    }
}

fn fail(path: &Path, e: String) -> Failure {
    Failure(format!("{}: {e}", path.display()))
}

/// Measures every coder on every file and runs the sweep over `sweep` (keyframe seconds).
pub fn measure(files: &[PathBuf], sweep: &[f32]) -> Result<Report, Failure> {
    let mut names: Vec<(String, &'static str)> = vec![("bsor".into(), "bsor")];
    names.extend(COMPRESSORS.iter().map(|c| (c.to_string(), "compressor")));
    for (_, p) in PROFILES {
        for (s, _, _) in SETTINGS {
            names.push((format!("{p}-{s}"), "stream"));
        }
    }
    for (s, _, _) in SETTINGS {
        names.push((format!("butter-{s}"), "baseline"));
    }
    let mut entries: Vec<Entry> = names
        .iter()
        .map(|(n, kind)| Entry {
            name: n.clone(),
            kind,
            ..Entry::default()
        })
        .collect();
    let mut points: Vec<SweepPoint> = Vec::new();
    for &ks in sweep {
        for (curve, _, _) in SETTINGS {
            for (_, profile) in PROFILES {
                points.push(SweepPoint {
                    curve,
                    profile,
                    keyframe_seconds: ks,
                    bytes: 0,
                    ratio: 0.0,
                    error: Errors::default(),
                });
            }
        }
    }
    let mut steps: Vec<StepPoint> = Vec::new();
    for (which, c) in step_grid().map_err(Failure)? {
        for (curve, _, _) in SETTINGS {
            let (bp, _) = c.bounds();
            steps.push(StepPoint {
                sweep: which,
                curve,
                position_step_mm: f64::from(c.position_step()) * 1000.0,
                rotation_step_deg: c.rotation_step_deg(),
                rotation_steps: c.rotation_steps(),
                bound_position_mm: bp,
                bound_rotation_deg: 72.0 / f64::from(c.rotation_steps()),
                bytes: 0,
                ratio: 0.0,
                error: Errors::default(),
            });
        }
    }
    let mut hists = vec![
        Histogram::new("fine", "position", 0.1),
        Histogram::new("fine", "rotation", 0.02),
        Histogram::new("compact", "position", 1.0),
        Histogram::new("compact", "rotation", 0.2),
        Histogram::new("butter", "position", 1.0),
        Histogram::new("butter", "rotation", butter::ROTATION_BOUND_DEG),
    ];
    let mut rows = Vec::new();
    let mut bsor_total = 0u64;
    let bar = progress((files.len() * (entries.len() + points.len() + steps.len())) as u64);
    for path in files {
        let bytes = read_all(path)?;
        bsor_total += bytes.len() as u64;
        let mut row = FileRow {
            file: path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into(),
            ),
            bsor_bytes: bytes.len() as u64,
            bytes: Default::default(),
        };
        for entry in entries.iter_mut() {
            let name = entry.name.clone();
            bar.set_message(format!("{} {name}", row.file));
            let (pair_a, pair_b) = hists.split_at_mut(2);
            let (pair_b, pair_c) = pair_b.split_at_mut(2);
            let one = match entry.kind {
                "bsor" => bsor_itself(&bytes),
                "compressor" => general(&name, &bytes),
                "baseline" => {
                    let (label, _, seconds) = SETTINGS
                        .iter()
                        .find(|(s, _, _)| name.ends_with(s))
                        .copied()
                        .unwrap_or(SETTINGS[1]);
                    let h = (label == "archive").then(|| pick(pair_c)).flatten();
                    baseline(&bytes, seconds, &name, h)
                }
                _ => {
                    let (profile, pname) = PROFILES
                        .iter()
                        .find(|(_, p)| name.starts_with(p))
                        .copied()
                        .unwrap_or(PROFILES[0]);
                    let (label, make, _) = SETTINGS
                        .iter()
                        .find(|(s, _, _)| name.ends_with(s))
                        .copied()
                        .unwrap_or(SETTINGS[1]);
                    let h = match (pname, label) {
                        ("fine", "archive") => pick(pair_a),
                        ("compact", "archive") => pick(pair_b),
                        _ => None,
                    };
                    stream(&bytes, make(profile), &name, h)
                }
            }
            .map_err(|e| fail(path, e))?;
            entry.bytes += one.bytes;
            entry.encode.add(&one.encode);
            entry.decode.add(&one.decode);
            entry.error.add(&one.error);
            row.bytes.insert(name, one.bytes);
            bar.inc(1);
        }
        bar.set_message(format!("{} sweep", row.file));
        for p in points.iter_mut() {
            let (profile, _) = PROFILES
                .iter()
                .find(|(_, n)| *n == p.profile)
                .copied()
                .unwrap_or(PROFILES[0]);
            let make = SETTINGS
                .iter()
                .find(|(s, _, _)| *s == p.curve)
                .map_or(SETTINGS[1].1, |s| s.1);
            let settings = Settings {
                keyframe_seconds: p.keyframe_seconds,
                ..make(profile)
            };
            let what = format!(
                "sweep {} {} keyframe {} s",
                p.profile, p.curve, p.keyframe_seconds
            );
            let one = stream(&bytes, settings, &what, None).map_err(|e| fail(path, e))?;
            p.bytes += one.bytes;
            p.error.add(&one.error);
            bar.inc(1);
        }
        bar.set_message(format!("{} steps", row.file));
        for p in steps.iter_mut() {
            let c = CustomSteps::new((p.position_step_mm / 1000.0) as f32, p.rotation_steps)
                .map_err(|e| fail(path, e.to_string()))?;
            let make = SETTINGS
                .iter()
                .find(|(s, _, _)| *s == p.curve)
                .map_or(SETTINGS[1].1, |s| s.1);
            let what = format!(
                "steps {} {} mm {:.4}° {}",
                p.sweep, p.position_step_mm, p.rotation_step_deg, p.curve
            );
            // `errors` fails the run unless the events, times and fps are exact.
            let one =
                stream(&bytes, make(Profile::Custom(c)), &what, None).map_err(|e| fail(path, e))?;
            if one.error.max_position_mm > p.bound_position_mm
                || one.error.max_rotation_deg > p.bound_rotation_deg
            {
                return Err(fail(path, format!("{what}: over the grid's bounds")));
            }
            p.bytes += one.bytes;
            p.error.add(&one.error);
            bar.inc(1);
        }
        rows.push(row);
    }
    bar.finish_and_clear();
    let b = bsor_total.max(1) as f64;
    for e in entries.iter_mut() {
        e.ratio = e.bytes as f64 / b;
        e.encode_mb_s = b / 1e6 / e.encode.total().max(1e-9);
        e.decode_mb_s = b / 1e6 / e.decode.total().max(1e-9);
    }
    for p in points.iter_mut() {
        p.ratio = p.bytes as f64 / b;
    }
    for p in steps.iter_mut() {
        p.ratio = p.bytes as f64 / b;
    }
    Ok(Report {
        command: String::new(),
        machine: super::Machine {
            cpu: String::new(),
            cores: 0,
            os: String::new(),
        },
        seconds: 0.0,
        bsor_bytes: bsor_total,
        entries,
        files: rows,
        sweep: points,
        steps,
        histograms: hists,
    })
}

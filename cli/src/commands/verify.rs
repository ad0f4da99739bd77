//! `verify` and `bench`: what the stream format keeps and costs, file by file.

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use bsor_stream::bsor::{self, Replay};
use bsor_stream::stream::{accuracy, CustomSteps, Profile, Settings, StreamDecoder};
use bsor_stream::transcode;
use serde::Serialize;

use super::{json_err, read_all, stdout_err, Failure, Outcome};

const PROFILES: [Profile; 3] = [Profile::Lossless, Profile::Fine, Profile::Compact];

/// The bounds a profile promises: (position mm, rotation degrees).
fn bounds(p: Profile) -> (f64, f64) {
    match p {
        Profile::Lossless => (0.0, 0.0),
        Profile::Fine => (0.1, 0.02),
        Profile::Compact => (1.0, 0.2),
        Profile::Custom(c) => {
            let (mm, _) = c.bounds();
            (mm, 72.0 / f64::from(c.rotation_steps()))
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Verdict {
    file: String,
    profile: String,
    bsor_bytes: usize,
    stream_bytes: usize,
    ratio: f64,
    exact: bool,
    max_position_error_mm: f64,
    mean_position_error_mm: f64,
    max_rotation_error_deg: f64,
    mean_rotation_error_deg: f64,
    events_exact: bool,
    times_exact: bool,
    ok: bool,
}

/// The events, optional sections and info of a replay as bytes (frames left out).
fn events_bytes(r: &Replay) -> Vec<u8> {
    bsor::to_vec(&Replay {
        frames: Vec::new(),
        ..r.clone()
    })
    .unwrap_or_default()
}

fn check(
    name: &str,
    bytes: &[u8],
    r: &Replay,
    profile: Profile,
    settings: Settings,
) -> Result<Verdict, String> {
    let stream = transcode::encode_replay(r, settings);
    let (back, rec) = transcode::decode_replay(&stream).map_err(|e| e.to_string())?;
    let exact = bsor::to_vec(&back).map(|b| b == bytes).unwrap_or(false);
    let (mut max_p, mut sum_p, mut n_p) = (0f64, 0f64, 0u64);
    let (mut max_r, mut sum_r, mut n_r) = (0f64, 0f64, 0u64);
    let mut times_exact = back.frames.len() == r.frames.len();
    for (o, d) in r.frames.iter().zip(&back.frames) {
        times_exact &= o.time.to_bits() == d.time.to_bits() && o.fps == d.fps;
        for (po, pd) in [
            (&o.head, &d.head),
            (&o.left_hand, &d.left_hand),
            (&o.right_hand, &d.right_hand),
        ] {
            if let Some(e) = accuracy::position_error_mm(&po.position, &pd.position) {
                max_p = max_p.max(e);
                sum_p += e;
                n_p += 1;
            }
            if let Some(e) = accuracy::rotation_error_deg(&po.rotation, &pd.rotation) {
                max_r = max_r.max(e);
                sum_r += e;
                n_r += 1;
            }
        }
    }
    let events_exact = rec.complete && events_bytes(r) == events_bytes(&back);
    let (bp, br) = bounds(profile);
    let ok = events_exact
        && times_exact
        && if profile == Profile::Lossless {
            exact
        } else {
            max_p <= bp && max_r <= br
        };
    Ok(Verdict {
        file: name.to_string(),
        profile: profile.to_string(),
        bsor_bytes: bytes.len(),
        stream_bytes: stream.len(),
        ratio: stream.len() as f64 / bytes.len().max(1) as f64,
        exact,
        max_position_error_mm: max_p,
        mean_position_error_mm: sum_p / n_p.max(1) as f64,
        max_rotation_error_deg: max_r,
        mean_rotation_error_deg: sum_r / n_r.max(1) as f64,
        events_exact,
        times_exact,
        ok,
    })
}

/// `verify FILE... [--archive] [--json] [--position-step-mm MM --rotation-step-deg DEG]`:
/// the three profiles, and the custom one if its steps are given.
pub fn verify(
    files: &[PathBuf],
    archive: bool,
    json: bool,
    custom: Option<CustomSteps>,
) -> Result<Outcome, Failure> {
    let profiles: Vec<Profile> = PROFILES
        .into_iter()
        .chain(custom.map(Profile::Custom))
        .collect();
    let mut verdicts = Vec::new();
    for path in files {
        let bytes = read_all(path)?;
        let r = bsor::parse(&bytes).map_err(|e| Failure::from((path.as_path(), e)))?;
        for &profile in &profiles {
            let settings = if archive {
                Settings::archive(profile)
            } else {
                Settings::live(profile)
            };
            let v = check(&path.display().to_string(), &bytes, &r, profile, settings)
                .map_err(|e| Failure::from((path.as_path(), e)))?;
            verdicts.push(v);
        }
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        serde_json::to_writer(&mut out, &verdicts).map_err(json_err)?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        for v in &verdicts {
            writeln!(
                out,
                "{} {:8} {:>9} -> {:>9} bytes ({:5.1}%)  exact {:5}  pos max {:.4} mm mean {:.4}  rot max {:.4}° mean {:.4}  events {}  times {}  {}",
                v.file, v.profile, v.bsor_bytes, v.stream_bytes, v.ratio * 100.0, v.exact,
                v.max_position_error_mm, v.mean_position_error_mm, v.max_rotation_error_deg,
                v.mean_rotation_error_deg, v.events_exact, v.times_exact,
                if v.ok { "OK" } else { "FAIL" }
            )
            .map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(if verdicts.iter().all(|v| v.ok) {
        Outcome::Done
    } else {
        Outcome::Failed
    })
}

#[derive(Serialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
struct Sizes {
    stream_bytes: u64,
    frame_bytes: u64,
    encode_seconds: f64,
    decode_seconds: f64,
}

#[derive(Serialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
struct BenchRow {
    file: String,
    bsor_bytes: u64,
    bsor_frame_bytes: u64,
    zstd19_bytes: u64,
    /// `profile/live` and `profile/archive` → sizes and times.
    streams: std::collections::BTreeMap<String, Sizes>,
}

/// The BSOR files of `paths`: files as given, folders' `.bsor` files sorted by name.
pub(crate) fn bsor_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Failure> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inner: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| (p.as_path(), e))?
                .flatten()
                .map(|e| e.path())
                .filter(|f| f.extension().is_some_and(|x| x == "bsor"))
                .collect();
            inner.sort();
            files.extend(inner);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

fn measure(path: &Path, bytes: &[u8]) -> Result<BenchRow, Failure> {
    let r = bsor::parse(bytes).map_err(|e| Failure::from((path, e)))?;
    let mut row = BenchRow {
        file: path.display().to_string(),
        bsor_bytes: bytes.len() as u64,
        bsor_frame_bytes: (r.frames.len() * bsor::FRAME_SIZE) as u64,
        zstd19_bytes: zstd::bulk::compress(bytes, 19).map_or(0, |c| c.len() as u64),
        ..BenchRow::default()
    };
    for profile in PROFILES {
        for (label, settings) in [
            ("live", Settings::live(profile)),
            ("archive", Settings::archive(profile)),
        ] {
            let t = Instant::now();
            let parsed = bsor::parse(bytes).map_err(|e| Failure::from((path, e)))?;
            let stream = transcode::encode_replay(&parsed, settings);
            let encode_seconds = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let (back, _) = transcode::decode_replay(&stream).map_err(|e| (path, e))?;
            let rebuilt = bsor::to_vec(&back).map_err(|e| (path, e))?;
            let decode_seconds = t.elapsed().as_secs_f64();
            std::hint::black_box(rebuilt);
            let mut d = StreamDecoder::events_only();
            d.push(&stream);
            d.finish();
            while let Ok(Some(_)) = d.next_item() {}
            row.streams.insert(
                format!("{profile}/{label}"),
                Sizes {
                    stream_bytes: stream.len() as u64,
                    frame_bytes: d.stats().frame_bytes,
                    encode_seconds,
                    decode_seconds,
                },
            );
        }
    }
    Ok(row)
}

fn add(total: &mut BenchRow, row: &BenchRow) {
    total.bsor_bytes += row.bsor_bytes;
    total.bsor_frame_bytes += row.bsor_frame_bytes;
    total.zstd19_bytes += row.zstd19_bytes;
    for (k, s) in &row.streams {
        let t = total.streams.entry(k.clone()).or_default();
        t.stream_bytes += s.stream_bytes;
        t.frame_bytes += s.frame_bytes;
        t.encode_seconds += s.encode_seconds;
        t.decode_seconds += s.decode_seconds;
    }
}

fn print_row(out: &mut impl Write, row: &BenchRow) -> io::Result<()> {
    let b = row.bsor_bytes.max(1) as f64;
    writeln!(
        out,
        "{}: BSOR {} bytes; zstd -19 {} ({:.1}%)",
        row.file,
        row.bsor_bytes,
        row.zstd19_bytes,
        row.zstd19_bytes as f64 / b * 100.0
    )?;
    writeln!(
        out,
        "  {:18} {:>10} {:>7} {:>12} {:>10} {:>10}",
        "profile/settings", "bytes", "ratio", "frames-only", "enc MB/s", "dec MB/s"
    )?;
    for (k, s) in &row.streams {
        writeln!(
            out,
            "  {:18} {:>10} {:>6.1}% {:>11.1}% {:>10.0} {:>10.0}",
            k,
            s.stream_bytes,
            s.stream_bytes as f64 / b * 100.0,
            s.frame_bytes as f64 / row.bsor_frame_bytes.max(1) as f64 * 100.0,
            b / 1e6 / s.encode_seconds.max(1e-9),
            b / 1e6 / s.decode_seconds.max(1e-9),
        )?;
    }
    Ok(())
}

/// `bench FILE|DIR... [--json]`.
pub fn bench(paths: &[PathBuf], json: bool) -> Result<Outcome, Failure> {
    let files = bsor_files(paths)?;
    let mut rows = Vec::new();
    let mut total = BenchRow {
        file: "total".into(),
        ..BenchRow::default()
    };
    let progress = files.len() > 3 && io::stderr().is_terminal();
    for (i, f) in files.iter().enumerate() {
        if progress {
            eprint!("\r[{}/{}] {}", i + 1, files.len(), f.display());
        }
        let bytes = read_all(f)?;
        let row = measure(f, &bytes)?;
        add(&mut total, &row);
        rows.push(row);
    }
    if progress {
        eprintln!();
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let v = serde_json::json!({ "files": rows, "total": total });
        serde_json::to_writer(&mut out, &v).map_err(json_err)?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        for row in rows.iter().chain(std::iter::once(&total)) {
            print_row(&mut out, row).map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(Outcome::Done)
}

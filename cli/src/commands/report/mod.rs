//! `bench FILE|DIR... --report DIR`: sizes, errors and speeds of every profile against BSOR,
//! general compressors and a `.butter`-style baseline, as a self-contained HTML page with
//! SVG plots (and `report.json` with the same numbers, with `--json`).
//!
//! Everything is measured in one run on the same replays. The page is written to
//! `DIR/index.html`, each plot also to `DIR/*.svg`; nothing is written anywhere else.

pub mod butter;
/// Where the corpus is, for the unit tests (the integration tests' helper).
#[cfg(test)]
#[path = "../../../../core/tests/common/mod.rs"]
mod common;
mod html;
mod plot;
mod sweep;

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{stdout_err, Failure, Outcome};

/// Sizes and errors of one coder (a profile under a setting, a compressor or the baseline)
/// over all the replays.
#[derive(Serialize, Clone, Default, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// `fine-live`, `zstd-19-long`, `butter-archive`, ...
    pub name: String,
    /// `stream`, `compressor` or `baseline`.
    pub kind: &'static str,
    /// Bytes over all replays.
    pub bytes: u64,
    /// `bytes` as a share of the BSOR bytes.
    pub ratio: f64,
    /// Errors (zero for exact coders).
    pub error: Errors,
    /// Seconds spent, by stage.
    pub encode: Stages,
    /// Seconds spent decoding, by stage.
    pub decode: Stages,
    /// BSOR megabytes per second of encoding (all stages).
    pub encode_mb_s: f64,
    /// BSOR megabytes per second of decoding (all stages).
    pub decode_mb_s: f64,
}

/// Seconds by stage. Predict and code are one pass in the library (each residual is range
/// coded as it is predicted), so for the stream format they show as one stage, `code`.
#[derive(Serialize, Clone, Copy, Default, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Stages {
    /// Parsing BSOR (encode).
    pub parse: f64,
    /// Quantizing and predicting (the baseline's keyframes and deltas).
    pub predict: f64,
    /// Coding frames (stream format: prediction and range coding, one pass); decoding.
    pub code: f64,
    /// General-purpose compression or decompression (events, chunks, whole files).
    pub compress: f64,
    /// Writing the output (decode: BSOR bytes).
    pub write: f64,
}

impl Stages {
    fn total(&self) -> f64 {
        self.parse + self.predict + self.code + self.compress + self.write
    }

    fn add(&mut self, o: &Stages) {
        self.parse += o.parse;
        self.predict += o.predict;
        self.code += o.code;
        self.compress += o.compress;
        self.write += o.write;
    }
}

/// Pose errors over every frame of every replay.
#[derive(Serialize, Clone, Copy, Default, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Errors {
    /// Largest position error, millimetres.
    pub max_position_mm: f64,
    /// Mean position error, millimetres.
    pub mean_position_mm: f64,
    /// Largest rotation error, degrees.
    pub max_rotation_deg: f64,
    /// Mean rotation error, degrees.
    pub mean_rotation_deg: f64,
    #[serde(skip)]
    sums: (f64, u64, f64, u64),
}

impl Errors {
    fn add(&mut self, o: &Errors) {
        self.max_position_mm = self.max_position_mm.max(o.max_position_mm);
        self.max_rotation_deg = self.max_rotation_deg.max(o.max_rotation_deg);
        self.sums.0 += o.sums.0;
        self.sums.1 += o.sums.1;
        self.sums.2 += o.sums.2;
        self.sums.3 += o.sums.3;
        self.mean_position_mm = self.sums.0 / self.sums.1.max(1) as f64;
        self.mean_rotation_deg = self.sums.2 / self.sums.3.max(1) as f64;
    }
}

/// One replay's sizes.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct FileRow {
    /// The file's name.
    pub file: String,
    /// Its BSOR bytes.
    pub bsor_bytes: u64,
    /// Entry name → bytes.
    pub bytes: BTreeMap<String, u64>,
}

/// One point of the quantization-step sweep (the custom profile, format.md section 3).
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct StepPoint {
    /// `position` (the position step varies, rotations at fine's grid) or `rotation`.
    pub sweep: &'static str,
    /// `live` or `archive`.
    pub curve: &'static str,
    /// Position step in millimetres.
    pub position_step_mm: f64,
    /// Rotation step in degrees (the grid angle `√2/M` rad).
    pub rotation_step_deg: f64,
    /// The header's `M`.
    pub rotation_steps: u32,
    /// The bounds the grid promises: position mm, rotation degrees.
    pub bound_position_mm: f64,
    /// See `bound_position_mm`.
    pub bound_rotation_deg: f64,
    /// Bytes over all replays.
    pub bytes: u64,
    /// Share of BSOR.
    pub ratio: f64,
    /// Measured errors.
    pub error: Errors,
}

/// One point of the keyframe-interval sweep.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct SweepPoint {
    /// `live` or `archive`.
    pub curve: &'static str,
    /// `lossless`, `fine` or `compact`.
    pub profile: &'static str,
    /// Seconds between keyframes.
    pub keyframe_seconds: f32,
    /// Bytes over all replays.
    pub bytes: u64,
    /// Share of BSOR.
    pub ratio: f64,
    /// Measured errors.
    pub error: Errors,
}

/// A histogram of errors.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Histogram {
    /// `fine`, `compact` or `butter`.
    pub coder: &'static str,
    /// `position` (mm) or `rotation` (degrees).
    pub quantity: &'static str,
    /// Width of a bin; bin `i` holds errors in `[i·w, (i+1)·w)`, the last also what is above.
    pub bin_width: f64,
    /// Poses per bin.
    pub counts: Vec<u64>,
}

impl Histogram {
    fn new(coder: &'static str, quantity: &'static str, top: f64) -> Self {
        Histogram {
            coder,
            quantity,
            bin_width: top / BINS as f64,
            counts: vec![0; BINS],
        }
    }

    fn add(&mut self, e: f64) {
        let i = (e / self.bin_width) as usize;
        self.counts[i.min(BINS - 1)] += 1;
    }
}

const BINS: usize = 40;

/// The machine the report ran on.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// CPU model (from /proc/cpuinfo where there is one).
    pub cpu: String,
    /// Cores this process may use.
    pub cores: usize,
    /// Operating system and architecture.
    pub os: String,
}

fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    Machine {
        cpu,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        os: format!("{os} ({})", std::env::consts::ARCH),
    }
}

/// Everything the page shows.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The command line that made it.
    pub command: String,
    /// Where it ran.
    pub machine: Machine,
    /// Seconds the whole run took.
    pub seconds: f64,
    /// BSOR bytes over all replays.
    pub bsor_bytes: u64,
    /// Every coder over all replays, in the page's order.
    pub entries: Vec<Entry>,
    /// Sizes per replay.
    pub files: Vec<FileRow>,
    /// The keyframe-interval sweep.
    pub sweep: Vec<SweepPoint>,
    /// The quantization-step sweep.
    pub steps: Vec<StepPoint>,
    /// Error histograms of the lossy coders (archive settings).
    pub histograms: Vec<Histogram>,
}

/// What `bench --report` was asked for.
pub struct Options<'a> {
    /// BSOR files or folders.
    pub paths: &'a [PathBuf],
    /// Where the page goes.
    pub dir: &'a Path,
    /// Also write `report.json`.
    pub json: bool,
    /// Keyframe intervals (seconds) of the sweep.
    pub sweep: &'a [f32],
}

/// `bench FILE|DIR... --report DIR [--json] [--sweep S,...]`.
pub fn run(opts: &Options) -> Result<Outcome, Failure> {
    if opts.sweep.is_empty()
        || opts.sweep.len() > 32
        || opts.sweep.iter().any(|s| !s.is_finite() || *s <= 0.0)
    {
        return Err(Failure(
            "--sweep: 1 to 32 keyframe intervals, each a number of seconds above 0".into(),
        ));
    }
    let started = std::time::Instant::now();
    let files = super::verify::bsor_files(opts.paths)?;
    if files.is_empty() {
        return Err(Failure("no .bsor files given".into()));
    }
    let mut report = sweep::measure(&files, opts.sweep)?;
    report.command = std::env::args().collect::<Vec<_>>().join(" ");
    report.machine = machine();
    report.seconds = started.elapsed().as_secs_f64();
    let dir = opts.dir;
    std::fs::create_dir_all(dir).map_err(|e| (dir, e))?;
    let plots = html::plots(&report);
    for (name, svg) in &plots {
        let path = dir.join(format!("{name}.svg"));
        std::fs::write(&path, svg).map_err(|e| (path.as_path(), e))?;
    }
    let page = dir.join("index.html");
    std::fs::write(&page, html::page(&report, &plots)).map_err(|e| (page.as_path(), e))?;
    let mut out = io::stdout().lock();
    if opts.json {
        let path = dir.join("report.json");
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure(format!("writing JSON: {e}")))?;
        std::fs::write(&path, text).map_err(|e| (path.as_path(), e))?;
        writeln!(out, "{}", path.display()).map_err(stdout_err)?;
    }
    writeln!(out, "{}", page.display()).map_err(stdout_err)?;
    Ok(Outcome::Done)
}

/// A progress bar on stderr when it is a terminal, hidden otherwise.
fn progress(len: u64) -> indicatif::ProgressBar {
    if io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(len),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    }
}

//! `bsor-stream`: the command-line tool. It only parses arguments, reads and writes files
//! and prints; everything it does is in the library.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bsor_stream::bsor::{self, Summary};
use bsor_stream::synth;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "bsor-stream",
    version,
    about = "Beat Saber BSOR replays: inspect, export, synthesize"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Summarize a replay: player, song, score, duration, frame rate, counts per section.
    Info {
        /// A classic BSOR replay.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write the whole replay as JSON to stdout (non-finite floats as "NaN", "Infinity",
    /// "-Infinity"; user data and trailing bytes as hex).
    Export {
        /// A classic BSOR replay.
        file: PathBuf,
    },
    /// Write a synthetic replay (smooth motion, notes, bombs, walls, heights, a pause).
    Synth {
        /// Where to write it.
        #[arg(short, long, default_value = "synthetic.bsor")]
        output: PathBuf,
        /// Song length in seconds.
        #[arg(long, default_value_t = 60.0)]
        seconds: f32,
        /// Frames per second.
        #[arg(long, default_value_t = 90)]
        fps: u32,
        /// Seed of the generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// An error for the one line on stderr: what failed, and the cause. A closed stdout (as
/// with `| head`) is not an error worth a message.
struct Failure(String);

fn stdout_err(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure(String::new())
    } else {
        Failure(format!("writing to stdout: {e}"))
    }
}

fn json_err(e: serde_json::Error) -> Failure {
    match e.io_error_kind() {
        Some(kind) => stdout_err(kind.into()),
        None => Failure(format!("writing JSON: {e}")),
    }
}

impl<E: std::fmt::Display> From<(&Path, E)> for Failure {
    fn from((path, e): (&Path, E)) -> Self {
        Failure(format!("{}: {e}", path.display()))
    }
}

fn read_replay(path: &Path) -> Result<bsor::Replay, Failure> {
    let bytes = std::fs::read(path).map_err(|e| (path, e))?;
    bsor::parse(&bytes).map_err(|e| Failure::from((path, e)))
}

fn print_info(s: &Summary, out: &mut impl Write) -> io::Result<()> {
    let or_none = |v: &str| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.to_string()
        }
    };
    writeln!(
        out,
        "player      {} ({}, id {})",
        s.player_name, s.platform, s.player_id
    )?;
    writeln!(
        out,
        "headset     {}; controllers {}; tracking {}",
        s.hmd, s.controller, s.tracking_system
    )?;
    writeln!(
        out,
        "song        {} by {} [{}]",
        s.song_name, s.mapper, s.hash
    )?;
    writeln!(out, "difficulty  {} / {}", s.difficulty, s.mode)?;
    writeln!(out, "modifiers   {}", or_none(&s.modifiers))?;
    write!(out, "score       {}", s.score)?;
    if s.fail_time != 0.0 {
        write!(out, " (failed at {:.2} s)", s.fail_time)?;
    }
    writeln!(out)?;
    write!(
        out,
        "duration    {:.2} s, {} frames",
        s.duration_seconds, s.frames
    )?;
    if let Some(f) = s.fps {
        write!(
            out,
            ", fps median {} (min {}, max {})",
            f.median, f.min, f.max
        )?;
    }
    writeln!(out)?;
    let t = s.note_event_types;
    write!(
        out,
        "notes       {} (good {}, bad {}, miss {}, bomb {}",
        s.notes, t.good, t.bad, t.miss, t.bomb
    )?;
    if t.unknown > 0 {
        write!(out, ", unknown type {}", t.unknown)?;
    }
    writeln!(out, ")")?;
    writeln!(
        out,
        "events      {} walls, {} height changes, {} pauses",
        s.walls, s.heights, s.pauses
    )?;
    let user_data = s
        .user_data_bytes
        .map_or("absent".to_string(), |n| format!("{n} bytes"));
    writeln!(
        out,
        "optional    controller offsets {}; user data {}; trailing bytes {}",
        if s.controller_offsets {
            "present"
        } else {
            "absent"
        },
        user_data,
        s.trailing_bytes
    )?;
    writeln!(
        out,
        "recorded    mod {}, game {}",
        s.mod_version, s.game_version
    )?;
    if !s.legacy_length_fields.is_empty() {
        writeln!(
            out,
            "quirks      legacy string lengths in {}",
            s.legacy_length_fields.join(", ")
        )?;
    }
    Ok(())
}

fn run(cli: Cli) -> Result<(), Failure> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match cli.command {
        Command::Info { file, json } => {
            let summary = Summary::of(&read_replay(&file)?);
            if json {
                serde_json::to_writer(&mut out, &summary).map_err(json_err)?;
                writeln!(out).map_err(stdout_err)?;
            } else {
                print_info(&summary, &mut out).map_err(stdout_err)?;
            }
        }
        Command::Export { file } => {
            let replay = read_replay(&file)?;
            serde_json::to_writer(&mut out, &replay).map_err(json_err)?;
            writeln!(out).map_err(stdout_err)?;
        }
        Command::Synth {
            output,
            seconds,
            fps,
            seed,
        } => {
            let replay = synth::replay(synth::Settings { seed, seconds, fps });
            let bytes = bsor::to_vec(&replay).map_err(|e| (output.as_path(), e))?;
            std::fs::write(&output, &bytes).map_err(|e| (output.as_path(), e))?;
            writeln!(
                out,
                "wrote {} ({} bytes, {} frames, {} note events)",
                output.display(),
                bytes.len(),
                replay.frames.len(),
                replay.notes.len()
            )
            .map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) if msg.is_empty() => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("bsor-stream: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

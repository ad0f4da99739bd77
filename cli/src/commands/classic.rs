//! `info`, `export` and `synth`.

use std::io::{self, Write};
use std::path::Path;

use bsor_stream::bsor::{self, Summary};
use bsor_stream::synth as synthesis;

use super::{json_err, load_replay, stdout_err, Failure, Outcome};

// Long: a flat list of printed fields, one line each.
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

/// `info FILE [--json] [--at SECONDS]...`.
pub fn info(file: &Path, json: bool, at: &[f64]) -> Result<Outcome, Failure> {
    let (replay, recovery, bytes) = load_replay(file)?;
    let summary = Summary::of(&replay);
    let hud: Vec<(f64, bsor::ScoreAt)> = at
        .iter()
        .map(|&t| (t, bsor::score_at(&replay, t)))
        .collect();
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        let mut v = serde_json::to_value(&summary).map_err(json_err)?;
        if let (Some(rec), Some(obj)) = (&recovery, v.as_object_mut()) {
            let header = bsor_stream::stream::StreamHeader::parse_prefix(&bytes)
                .ok()
                .flatten();
            let profile = header.map(|h| h.settings.profile.to_string());
            obj.insert("profile".into(), profile.into());
            obj.insert("chunks".into(), rec.stats.chunks.into());
            obj.insert("keyframes".into(), rec.stats.keyframes.into());
            obj.insert("streamBytes".into(), bytes.len().into());
            obj.insert("complete".into(), rec.complete.into());
        }
        if let (false, Some(obj)) = (hud.is_empty(), v.as_object_mut()) {
            let list = hud
                .iter()
                .map(|(t, s)| {
                    let mut e = serde_json::to_value(s).unwrap_or_default();
                    if let Some(o) = e.as_object_mut() {
                        o.insert("t".into(), (*t).into());
                    }
                    e
                })
                .collect::<Vec<_>>();
            obj.insert("at".into(), list.into());
        }
        serde_json::to_writer(&mut out, &v).map_err(json_err)?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        print_info(&summary, &mut out).map_err(stdout_err)?;
        if let Some(rec) = &recovery {
            writeln!(
                out,
                "stream      {} bytes, {} chunks, {} keyframes{}",
                bytes.len(),
                rec.stats.chunks,
                rec.stats.keyframes,
                if rec.complete {
                    ""
                } else {
                    ", INCOMPLETE (damaged or truncated)"
                }
            )
            .map_err(stdout_err)?;
        }
        for (t, s) in &hud {
            writeln!(
                out,
                "at          {t} s: score {} combo {} misses {} bombs {}",
                s.score, s.combo, s.misses, s.bombs
            )
            .map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(Outcome::Done)
}

/// `export FILE`.
pub fn export(file: &Path) -> Result<Outcome, Failure> {
    let (replay, _, _) = load_replay(file)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    serde_json::to_writer(&mut out, &replay).map_err(json_err)?;
    writeln!(out).map_err(stdout_err)?;
    out.flush().map_err(stdout_err)?;
    Ok(Outcome::Done)
}

/// `synth -o FILE`.
pub fn synth(
    output: &Path,
    seconds: f32,
    fps: u32,
    seed: u64,
    notes_per_second: f32,
) -> Result<Outcome, Failure> {
    let replay = synthesis::dense(synthesis::Settings { seed, seconds, fps }, notes_per_second);
    let bytes = bsor::to_vec(&replay).map_err(|e| (output, e))?;
    std::fs::write(output, &bytes).map_err(|e| (output, e))?;
    println!(
        "wrote {} ({} bytes, {} frames, {} note events)",
        output.display(),
        bytes.len(),
        replay.frames.len(),
        replay.notes.len()
    );
    Ok(Outcome::Done)
}

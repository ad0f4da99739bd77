//! `bsor-stream-load`: drives a relay on 127.0.0.1 with publishers and many viewers over real sockets and
//! reports frame latency, what arrived, and the relay's CPU and memory.
//!
//! A benchmark tool of the project (package `bsor-stream-tools`), kept out of the user's
//! `bsor-stream` binary.
//! The relay is `bsor-stream serve` (the binary next to this one) in its own process: started here on port 0 (a fresh one
//! per scenario, so each has its own peak memory), or given with `--relay ADDR` (and
//! `--relay-pid PID` to read its memory and CPU from `/proc`). The publishers and viewers
//! share one tokio runtime in this process. A viewer parses only frame headers and chunk
//! headers: it records when each chunk arrived, by sequence number. The frames each chunk
//! carries, and when the publisher's capture clock reached each of them, are known here
//! from decoding the synthetic replay's stream once, so a frame's latency is the arrival of
//! its chunk minus the time its capture was due.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsor_stream::integrity::fingerprint::eval::percentile;
use bsor_stream::net::wire::ViewMode;
use bsor_stream_tools::bench::{
    check_open_files, cpu_seconds, exit_code, memory_kb, publisher, sample_memory, song,
    start_relay, viewer, Failure, RelayOptions, Seen, Song, TempDir, Watch,
};

/// Load on a relay over 127.0.0.1: one session with 1000 viewers and 100 sessions of 10,
/// publishing a synthetic replay live; prints frame latency, skips, relay memory and CPU.
#[derive(clap::Parser, Debug)]
#[command(name = "bsor-stream-load", version)]
struct LoadArgs {
    /// A running relay's TCP address (`bsor-stream serve`); by default one is started here,
    /// in its own process, for each scenario. Several, comma-separated (relays of one
    /// cluster, `serve --cluster`): the publishers send to the first, the viewers are spread
    /// over all of them in turn.
    #[arg(long)]
    relay: Option<String>,
    /// The process id of the relay given with --relay, to read its memory and CPU.
    #[arg(long, requires = "relay")]
    relay_pid: Option<u32>,
    /// A token the relay given with --relay accepts for any session.
    #[arg(long, default_value = "load-token")]
    token: String,
    /// Which scenarios: `one` (one session, --viewers viewers), `many` (--sessions
    /// sessions of --session-viewers viewers), or `both`.
    #[arg(long, default_value = "both")]
    scenario: String,
    /// Viewers of the single session.
    #[arg(long, default_value_t = 1000)]
    viewers: usize,
    /// Sessions of the `many` scenario.
    #[arg(long, default_value_t = 100)]
    sessions: usize,
    /// Viewers of each session in the `many` scenario.
    #[arg(long, default_value_t = 10)]
    session_viewers: usize,
    /// Seconds of the synthetic song (90 frames per second, live settings).
    #[arg(long, default_value_t = 30.0)]
    seconds: f32,
    /// Times the song's speed at which the publishers send.
    #[arg(long, default_value_t = 1.0)]
    speed: f32,
}

/// At most this many connections in all, whatever the flags say.
const MAX_CONNECTIONS: usize = 5000;

/// One scenario: `sessions` sessions of `viewers` viewers each.
// Long: one scenario from start to report, step by step (relay, viewers, publishers, sampling, collection); its parts share a dozen locals.
fn scenario(
    args: &LoadArgs,
    name: &str,
    sessions: usize,
    viewers: usize,
    song: &Arc<Song>,
) -> Result<bool, Failure> {
    let connections = sessions * (viewers + 1);
    if connections > MAX_CONNECTIONS {
        return Err(Failure(format!(
            "{connections} connections: over the load tool's bound of {MAX_CONNECTIONS}"
        )));
    }
    // This process holds one socket per connection; a relay started here holds as many.
    check_open_files(connections)?;
    let mut started;
    let (addr, pid) = match &args.relay {
        Some(a) => {
            started = None;
            (a.clone(), args.relay_pid)
        }
        None => {
            let dir = TempDir::new("bsor-stream-load")?;
            let tokens = dir.path().join("tokens");
            std::fs::write(&tokens, format!("{}\n", args.token))
                .map_err(|e| (tokens.as_path(), e))?;
            // Every client comes from 127.0.0.1: past the default per-address cap.
            let options = RelayOptions {
                max_per_address: Some(connections + 16),
                ..RelayOptions::default()
            };
            let r = start_relay(&tokens, &options)?;
            let out = (r.addr.clone(), Some(r.child.id()));
            // The relay is dropped (ended) before its directory.
            started = Some((r, dir));
            out
        }
    };
    let song_secs = song.send_at.last().copied().unwrap_or(0.0);
    println!(
        "== {name}: {sessions} session(s) x {viewers} viewer(s), {:.0} s song at {}x \
         ({} chunks, {} frames), relay {addr}{}",
        song_secs,
        args.speed,
        song.chunks.len(),
        song.total_frames,
        if started.is_some() {
            " (started here)"
        } else {
            ""
        }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))?;
    let epoch = Instant::now();
    let cpu_before = pid.and_then(|p| cpu_seconds(&p.to_string()));
    let self_before = cpu_seconds("self");
    let sampled_peak = Arc::new(AtomicU64::new(0));
    let result = runtime.block_on(async {
        // Every viewer connects and is greeted before the song starts.
        let deadline = Instant::now() + Duration::from_secs_f64(song_secs + 60.0);
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watchers = Vec::with_capacity(sessions * viewers);
        let relays: Vec<&str> = addr.split(',').collect();
        // Names of this run's own: a relay given with --relay (a cluster above all) keeps
        // the sessions of earlier runs, and refuses their names again.
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64 % 1_000_000_000);
        for s in 0..sessions {
            for v in 0..viewers {
                let watch = Watch {
                    addr: relays[(s * viewers + v) % relays.len()].to_string(),
                    websocket: false,
                    session: format!("load-{run}-{s}"),
                    mode: ViewMode::Live,
                };
                watchers.push(tokio::spawn(viewer(
                    watch,
                    epoch,
                    ready_tx.clone(),
                    deadline,
                )));
            }
        }
        drop(ready_tx);
        let mut greeted = 0;
        let connect_by = Instant::now() + Duration::from_secs(30);
        while greeted < sessions * viewers {
            match tokio::time::timeout_at(connect_by.into(), ready_rx.recv()).await {
                Ok(Some(())) => greeted += 1,
                _ => break,
            }
        }
        if greeted < sessions * viewers {
            return Err(Failure(format!(
                "only {greeted} of {} viewers were greeted within 30 s",
                sessions * viewers
            )));
        }
        // The subscriptions are in; the publishers start spread over one flush interval.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let start = Instant::now() + Duration::from_millis(300);
        let spread = song.flush_ms / 1000.0 / sessions as f64;
        let mut publishers = Vec::with_capacity(sessions);
        let mut starts = Vec::with_capacity(sessions);
        for s in 0..sessions {
            let at = start + Duration::from_secs_f64(spread * s as f64);
            starts.push((at - epoch).as_micros() as u64);
            publishers.push(tokio::spawn(publisher(
                relays[0].to_string(),
                format!("load-{run}-{s}"),
                args.token.clone(),
                song.clone(),
                at,
                epoch,
            )));
        }
        // The relay's memory, sampled while the song plays.
        let sampler = pid.map(|p| sample_memory(p, sampled_peak.clone()));
        let mut sent = Vec::with_capacity(sessions);
        for p in publishers {
            sent.push(p.await.map_err(|e| Failure(e.to_string()))??);
        }
        let mut seen = Vec::with_capacity(watchers.len());
        for w in watchers {
            seen.push(w.await.map_err(|e| Failure(e.to_string()))?);
        }
        if let Some(s) = sampler {
            s.abort();
        }
        Ok((starts, sent, seen))
    });
    let wall = epoch.elapsed().as_secs_f64();
    let cpu = match (cpu_before, pid.and_then(|p| cpu_seconds(&p.to_string()))) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let self_cpu = match (self_before, cpu_seconds("self")) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    if let Some((r, _)) = &mut started {
        if let Ok(Some(status)) = r.child.try_wait() {
            return Err(Failure(format!(
                "the relay exited during the run: {status}"
            )));
        }
    }
    let memory = pid
        .and_then(memory_kb)
        .map(|(rss, hwm)| (rss, hwm, sampled_peak.load(Ordering::Relaxed)));
    drop(runtime);
    drop(started);
    let (starts, sent, seen) = result?;
    report(
        song, sessions, viewers, &starts, &sent, &seen, wall, cpu, self_cpu, memory,
    )
}

// Long: a flat list of printed figures, one block per line of the report.
#[allow(clippy::too_many_arguments)]
fn report(
    song: &Song,
    sessions: usize,
    viewers: usize,
    starts: &[u64],
    sent: &[Vec<u64>],
    seen: &[Seen],
    wall: f64,
    cpu: Option<f64>,
    self_cpu: Option<f64>,
    memory: Option<(u64, u64, u64)>,
) -> Result<bool, Failure> {
    let mut frame_ms = Vec::new();
    let mut transit_ms = Vec::new();
    let (mut frames, mut skipped, mut chunks, mut ended, mut errors) = (0u64, 0u64, 0u64, 0, 0);
    let mut first_error = None;
    for (i, v) in seen.iter().enumerate() {
        let s = i / viewers;
        for &(seq, at) in &v.arrivals {
            let Some(times) = song.frames.get(seq as usize) else {
                continue;
            };
            chunks += 1;
            frames += times.len() as u64;
            let start = starts[s] as f64 / 1000.0;
            let arrival = at as f64 / 1000.0;
            for t in times {
                frame_ms.push(arrival - start - t * 1000.0);
            }
            if let Some(&sent_at) = sent[s].get(seq as usize) {
                transit_ms.push((at as f64 - sent_at as f64) / 1000.0);
            }
        }
        skipped += v.skipped;
        ended += usize::from(v.ended);
        if let Some(e) = &v.error {
            errors += 1;
            first_error.get_or_insert_with(|| e.clone());
        }
    }
    frame_ms.sort_by(f64::total_cmp);
    transit_ms.sort_by(f64::total_cmp);
    let expected_frames = song.total_frames * (sessions * viewers) as u64;
    let expected_chunks = song.chunks.len() as u64 * (sessions * viewers) as u64;
    let p99 = percentile(&frame_ms, 99.0);
    let target = song.flush_ms + 20.0;
    println!(
        "frame latency (capture -> arrival): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         (target p99 <= flush {:.0} ms + 20 ms: {})",
        percentile(&frame_ms, 50.0),
        p99,
        frame_ms.last().copied().unwrap_or(f64::NAN),
        song.flush_ms,
        if p99 <= target { "met" } else { "MISSED" }
    );
    println!(
        "chunk transit (publisher's send -> arrival): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&transit_ms, 50.0),
        percentile(&transit_ms, 99.0),
        transit_ms.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "received {frames} of {expected_frames} frames, {chunks} of {expected_chunks} chunks; \
         {skipped} chunks skipped; {ended} of {} viewers saw the end; {errors} errors{}",
        sessions * viewers,
        first_error.map_or(String::new(), |e| format!(" (first: {e})"))
    );
    let mut ok = p99 <= target && errors == 0;
    match memory {
        Some((rss, hwm, sampled)) => {
            println!(
                "relay memory: {:.1} MB resident at the end, {:.1} MB at most while the song \
                 played (sampled every 100 ms), {:.1} MB peak of the process's life (VmHWM){}",
                rss as f64 / 1024.0,
                sampled as f64 / 1024.0,
                hwm as f64 / 1024.0,
                if hwm < 200 * 1024 {
                    " (target < 200 MB: met)"
                } else {
                    " (target < 200 MB: MISSED)"
                }
            );
            ok &= hwm < 200 * 1024;
        }
        None => println!("relay memory: unknown (give --relay-pid)"),
    }
    if let Some(cpu) = cpu {
        println!(
            "relay CPU: {cpu:.2} s in {wall:.1} s ({:.0}% of one core)",
            100.0 * cpu / wall
        );
    }
    if let Some(c) = self_cpu {
        println!(
            "load tool CPU (publishers and viewers): {c:.2} s ({:.0}% of one core)",
            100.0 * c / wall
        );
    }
    Ok(ok)
}

fn main() -> std::process::ExitCode {
    use clap::Parser;
    exit_code("bsor-stream-load", load(&LoadArgs::parse()))
}

/// The scenarios, one after the other; false when a target was missed.
fn load(args: &LoadArgs) -> Result<bool, Failure> {
    if !(args.speed > 0.0 && args.speed <= 100.0) {
        return Err(Failure("--speed must be above 0 and at most 100".into()));
    }
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        return Err(Failure("--seconds must be above 0 and at most 600".into()));
    }
    let song = Arc::new(song(args.seconds, args.speed)?);
    let mut ok = true;
    let (one, many) = match args.scenario.as_str() {
        "one" => (true, false),
        "many" => (false, true),
        "both" => (true, true),
        s => {
            return Err(Failure(format!(
                "unknown scenario {s:?} (one, many or both)"
            )))
        }
    };
    if one {
        ok &= scenario(args, "one session", 1, args.viewers, &song)?;
    }
    if many {
        ok &= scenario(
            args,
            "many sessions",
            args.sessions,
            args.session_viewers,
            &song,
        )?;
    }
    Ok(ok)
}

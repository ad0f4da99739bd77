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
//!
//! Against relays of one cluster (`serve --cluster`), `--kill-pid` kills one of them
//! (SIGKILL) mid-song: the publishers and viewers then reconnect to the next relay of the
//! list, as `publish` and `watch` do, and the tool reports how long each took to resume and
//! fails unless every viewer got every chunk exactly once, in order. Given one of three NATS
//! nodes' process ids, it kills that node instead and reports how long every client waited
//! across the kill.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsor_stream::integrity::fingerprint::eval::percentile;
use bsor_stream::net::wire::ViewMode;
use bsor_stream_tools::bench::{
    check_open_files, cpu_seconds, exit_code, memory_kb, publisher_with, song, start_relay,
    viewer_with, Failure, Published, Reconnect, RelayOptions, Seen, Song, TempDir, Watch,
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
    /// The process ids of the relays given with --relay, in the same order (comma-separated;
    /// the first ones only, or all), to read their memory and CPU.
    #[arg(long, requires = "relay", value_delimiter = ',')]
    relay_pid: Vec<u32>,
    /// The process ids of the NATS servers the relays share (comma-separated), to read
    /// their memory and CPU too.
    #[arg(long, value_delimiter = ',')]
    nats_pid: Vec<u32>,
    /// Kill this relay with SIGKILL --kill-after seconds into the song: one of --relay-pid,
    /// with --scenario one or many. The publishers (on the first relay) and the viewers
    /// then reconnect to the next relay of --relay; the tool reports their resume times and
    /// exits 1 unless every viewer got every chunk exactly once, in order. One of
    /// --nats-pid (a cluster of three) kills that NATS node instead: clients stay where they
    /// are, and the tool reports how long they waited across the kill.
    #[arg(long, requires_all = ["relay_pid", "kill_after"])]
    kill_pid: Option<u32>,
    /// How viewers are spread over several relays: `viewer` (viewer i of all on relay i mod
    /// N: every relay follows every session) or `session` (all of session s's viewers on
    /// relay s mod N: each session followed by one relay at most).
    #[arg(long, default_value = "viewer")]
    spread: String,
    /// Seconds after the first publisher's start at which --kill-pid is killed (at most the
    /// song's length in the publishers' time minus one second).
    #[arg(long, requires = "kill_pid")]
    kill_after: Option<f64>,
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

/// A process whose memory and CPU the report gives: a relay or a NATS server.
struct Watched {
    label: String,
    pid: u32,
    is_relay: bool,
    /// Highest resident memory sampled (kB) and the last CPU time read (centiseconds):
    /// what is known of a process killed before the end.
    peak_kb: AtomicU64,
    cpu_cs: AtomicU64,
}

/// Samples each watched process's resident memory and CPU time every 100 ms until the
/// task is aborted.
fn sample(watched: Arc<Vec<Watched>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for w in watched.iter() {
                if let Some((rss, _)) = memory_kb(w.pid) {
                    w.peak_kb.fetch_max(rss, Ordering::Relaxed);
                }
                if let Some(c) = cpu_seconds(&w.pid.to_string()) {
                    w.cpu_cs
                        .store((c * 100.0).round() as u64, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Whether `pid` is a running `bsor-stream serve` or, with `nats`, a `nats-server` (its
/// command line), so that the kill never reaches a process that took a dead one's id.
fn is_killable(pid: u32, nats: bool) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let program = words
        .first()
        .and_then(|w| w.rsplit(|&b| b == b'/').next())
        .unwrap_or_default();
    if nats {
        return program.starts_with(b"nats-server");
    }
    program.starts_with(b"bsor-stream") && words.iter().any(|w| *w == b"serve")
}

/// SIGKILL to `pid` (through kill(1): the tools link no libc binding), after checking it is
/// still the relay or NATS server it was.
fn kill_process(pid: u32, nats: bool) -> Result<(), String> {
    if !is_killable(pid, nats) {
        return Err(format!("process {pid} is no longer the one to kill"));
    }
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .map_err(|e| format!("kill -KILL {pid}: {e}"))?;
    if !status.success() {
        return Err(format!("kill -KILL {pid}: {status}"));
    }
    Ok(())
}

/// The run's kill: which relay or NATS node, and when (seconds after the publishers' start).
struct Kill {
    pid: u32,
    /// The relay's address, or `NATS node` for one of --nats-pid.
    addr: String,
    after: f64,
    nats: bool,
}

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
    let (addr, pids) = match &args.relay {
        Some(a) => {
            started = None;
            (a.clone(), args.relay_pid.clone())
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
            let out = (r.addr.clone(), vec![r.child.id()]);
            // The relay is dropped (ended) before its directory.
            started = Some((r, dir));
            out
        }
    };
    let relays: Vec<String> = addr
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    if relays.is_empty() {
        return Err(Failure(format!("--relay {addr:?} names no relay")));
    }
    if pids.len() > relays.len() {
        return Err(Failure(format!(
            "{} relay process ids for {} relays",
            pids.len(),
            relays.len()
        )));
    }
    let kill = match (args.kill_pid, args.kill_after) {
        (Some(pid), Some(after)) if args.nats_pid.contains(&pid) => {
            if args.nats_pid.len() < 3 {
                return Err(Failure(
                    "--kill-pid of a NATS node needs a cluster of three in --nats-pid".into(),
                ));
            }
            if !is_killable(pid, true) {
                return Err(Failure(format!(
                    "--kill-pid {pid} is not a running nats-server"
                )));
            }
            Some(Kill {
                pid,
                addr: "NATS node".into(),
                after,
                nats: true,
            })
        }
        (Some(pid), Some(after)) => {
            let Some(i) = pids.iter().position(|&p| p == pid) else {
                return Err(Failure(format!(
                    "--kill-pid {pid} is neither one of the relays' --relay-pid nor of \
                     --nats-pid"
                )));
            };
            if relays.len() < 2 {
                return Err(Failure(
                    "--kill-pid needs at least two relays in --relay to move to".into(),
                ));
            }
            if !is_killable(pid, false) {
                return Err(Failure(format!(
                    "--kill-pid {pid} is not a running `bsor-stream serve`"
                )));
            }
            Some(Kill {
                pid,
                addr: relays[i].clone(),
                after,
                nats: false,
            })
        }
        _ => None,
    };
    let by_session = match args.spread.as_str() {
        "viewer" => false,
        "session" => true,
        s => {
            return Err(Failure(format!(
                "unknown --spread {s:?} (viewer or session)"
            )))
        }
    };
    let reconnect = if kill.is_some() {
        Reconnect::Next
    } else {
        Reconnect::Never
    };
    let watched: Arc<Vec<Watched>> = Arc::new(
        pids.iter()
            .zip(&relays)
            .map(|(&pid, a)| (format!("{a} (pid {pid})"), pid, true))
            .chain(
                args.nats_pid
                    .iter()
                    .map(|&pid| (format!("pid {pid}"), pid, false)),
            )
            .map(|(label, pid, is_relay)| Watched {
                label,
                pid,
                is_relay,
                peak_kb: AtomicU64::new(0),
                cpu_cs: AtomicU64::new(0),
            })
            .collect(),
    );
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
    let cpu_before: Vec<Option<f64>> = watched
        .iter()
        .map(|w| cpu_seconds(&w.pid.to_string()))
        .collect();
    let self_before = cpu_seconds("self");
    let result = runtime.block_on(async {
        // Every viewer connects and is greeted before the song starts.
        let deadline = Instant::now() + Duration::from_secs_f64(song_secs + 60.0);
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watchers = Vec::with_capacity(sessions * viewers);
        // A client that moves tries the relays in turn from its own: "B,C,A" for B.
        let from = |i: usize| match reconnect {
            Reconnect::Never => relays[i % relays.len()].clone(),
            Reconnect::Next => (0..relays.len())
                .map(|k| relays[(i + k) % relays.len()].as_str())
                .collect::<Vec<_>>()
                .join(","),
        };
        // Names of this run's own: a relay given with --relay (a cluster above all) keeps
        // the sessions of earlier runs, and refuses their names again.
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64 % 1_000_000_000);
        for s in 0..sessions {
            for v in 0..viewers {
                let watch = Watch {
                    addr: from(if by_session { s } else { s * viewers + v }),
                    websocket: false,
                    session: format!("load-{run}-{s}"),
                    mode: ViewMode::Live,
                };
                watchers.push(tokio::spawn(viewer_with(
                    watch,
                    reconnect,
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
            publishers.push(tokio::spawn(publisher_with(
                from(0),
                format!("load-{run}-{s}"),
                args.token.clone(),
                song.clone(),
                at,
                epoch,
                reconnect,
            )));
        }
        // The processes' memory and CPU, sampled while the song plays.
        let sampler = sample(watched.clone());
        let killer = kill.as_ref().map(|k| {
            let (pid, nats, at) = (k.pid, k.nats, start + Duration::from_secs_f64(k.after));
            tokio::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                let killed_at = epoch.elapsed().as_micros() as u64;
                kill_process(pid, nats).map(|()| killed_at)
            })
        });
        // A publisher that failed is reported with the rest, not in place of the report.
        let mut sent = Vec::with_capacity(sessions);
        for p in publishers {
            sent.push(p.await.map_err(|e| Failure(e.to_string()))?);
        }
        let mut seen = Vec::with_capacity(watchers.len());
        for w in watchers {
            seen.push(w.await.map_err(|e| Failure(e.to_string()))?);
        }
        let killed_at = match killer {
            Some(k) => Some(
                k.await
                    .map_err(|e| Failure(e.to_string()))?
                    .map_err(Failure)?,
            ),
            None => None,
        };
        sampler.abort();
        Ok((starts, sent, seen, killed_at))
    });
    let wall = epoch.elapsed().as_secs_f64();
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
    let processes: Vec<Process> = watched
        .iter()
        .zip(&cpu_before)
        .map(|(w, before)| {
            let now = memory_kb(w.pid);
            let cpu_now = cpu_seconds(&w.pid.to_string())
                .or(Some(w.cpu_cs.load(Ordering::Relaxed) as f64 / 100.0));
            Process {
                label: w.label.clone(),
                is_relay: w.is_relay,
                rss_kb: now.map(|m| m.0),
                hwm_kb: now.map(|m| m.1),
                sampled_kb: w.peak_kb.load(Ordering::Relaxed),
                cpu: before.zip(cpu_now).map(|(a, b)| b - a),
            }
        })
        .collect();
    drop(runtime);
    drop(started);
    let (starts, sent, seen, killed_at) = result?;
    let run = Run {
        song,
        relays: &relays,
        by_session,
        sessions,
        viewers,
        starts: &starts,
        sent: &sent,
        seen: &seen,
        wall,
        self_cpu,
    };
    let mut ok = report(&run, &processes);
    if let (Some(k), Some(at)) = (&kill, killed_at) {
        ok &= report_kill(&run, k, at);
    }
    Ok(ok)
}

/// A watched process's figures at the end of a run.
struct Process {
    label: String,
    is_relay: bool,
    /// Resident now and at the process's peak (`VmHWM`), kB: none once it is gone.
    rss_kb: Option<u64>,
    hwm_kb: Option<u64>,
    /// The highest resident memory sampled while the song played, kB.
    sampled_kb: u64,
    /// CPU seconds during the run (up to its last sample, for a process killed).
    cpu: Option<f64>,
}

/// What a scenario's run gave, for the report.
struct Run<'a> {
    song: &'a Song,
    /// The relays' addresses; viewer `i` connects to `relays[i % relays.len()]` first, or
    /// with `by_session`, to `relays[i / viewers % relays.len()]`.
    relays: &'a [String],
    by_session: bool,
    sessions: usize,
    viewers: usize,
    /// When each publisher started, microseconds after the epoch.
    starts: &'a [u64],
    sent: &'a [Published],
    seen: &'a [Seen],
    wall: f64,
    self_cpu: Option<f64>,
}

/// Where the spans of song time the frame latency is also given for begin (seconds).
const SONG_SPANS: [f64; 4] = [0.0, 2.0, 5.0, 10.0];

/// The figures every run gives; false when a target was missed.
fn report(run: &Run, processes: &[Process]) -> bool {
    let Run {
        song,
        relays,
        by_session,
        sessions,
        viewers,
        starts,
        sent,
        seen,
        wall,
        self_cpu,
    } = *run;
    let mut frame_ms = Vec::new();
    // The same by the frame's song time: where in the song the tail is (all sessions start
    // at once: a start-up burst shows in the first seconds).
    let mut by_time: Vec<Vec<f64>> = vec![Vec::new(); SONG_SPANS.len()];
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
                let ms = arrival - start - t * 1000.0;
                frame_ms.push(ms);
                let span = SONG_SPANS.iter().rposition(|&from| *t >= from).unwrap_or(0);
                by_time[span].push(ms);
            }
            if let Some(&sent_at) = sent[s].sent.get(seq as usize) {
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
    let spans: Vec<String> = by_time
        .iter_mut()
        .zip(
            SONG_SPANS
                .iter()
                .zip(SONG_SPANS.iter().skip(1).map(Some).chain([None])),
        )
        .filter(|(l, _)| !l.is_empty())
        .map(|(l, (from, to))| {
            l.sort_by(f64::total_cmp);
            let to = to.map_or("end".to_string(), |t| format!("{t} s"));
            format!("{from} s to {to}: {:.1} ms", percentile(l, 99.0))
        })
        .collect();
    println!(
        "frame latency p99 by the frame's song time: {}",
        spans.join(", ")
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
    // How long the relay took to answer each `Publish` against when its song started: a
    // chunk waits for that answer.
    let mut answered: Vec<f64> = sent
        .iter()
        .zip(starts)
        .filter_map(|(p, &start)| Some((p.connected_at? as f64 - start as f64) / 1000.0))
        .collect();
    answered.sort_by(f64::total_cmp);
    if !answered.is_empty() {
        println!(
            "publishers' Resume after their song's start (negative: before it): p50 {:.1} ms, \
             p99 {:.1} ms, max {:.1} ms",
            percentile(&answered, 50.0),
            percentile(&answered, 99.0),
            answered.last().copied().unwrap_or(f64::NAN)
        );
    }
    let failed: Vec<&String> = sent.iter().filter_map(|p| p.error.as_ref()).collect();
    if let Some(first) = failed.first() {
        println!(
            "publishers: {} of {sessions} failed (first: {first})",
            failed.len()
        );
    }
    if relays.len() > 1 {
        // By the relay each viewer connected to first: what one relay's viewers missed.
        // And their frame latency: the publishers' relay's own viewers against the others'.
        let mut got = vec![0u64; relays.len()];
        let mut of = vec![0u64; relays.len()];
        let mut latency = vec![Vec::new(); relays.len()];
        for (i, v) in seen.iter().enumerate() {
            let r = (if by_session { i / viewers } else { i }) % relays.len();
            got[r] += v.arrivals.len() as u64;
            of[r] += song.chunks.len() as u64;
            let start = starts[i / viewers] as f64 / 1000.0;
            for &(seq, at) in &v.arrivals {
                for t in song.frames.get(seq as usize).into_iter().flatten() {
                    latency[r].push(at as f64 / 1000.0 - start - t * 1000.0);
                }
            }
        }
        let each: Vec<String> = relays
            .iter()
            .zip(got.iter().zip(&of))
            .zip(latency)
            .map(|((r, (g, o)), mut l)| {
                l.sort_by(f64::total_cmp);
                format!(
                    "{r} {g} of {o}, p50 {:.1} ms, p99 {:.1} ms",
                    percentile(&l, 50.0),
                    percentile(&l, 99.0)
                )
            })
            .collect();
        println!(
            "each relay's viewers (by their first relay): chunks received, frame latency: {}",
            each.join("; ")
        );
    }
    let mut ok = p99 <= target && errors == 0 && failed.is_empty();
    if processes.is_empty() {
        println!("relay memory: unknown (give --relay-pid)");
    }
    for p in processes {
        let mb = |kb: u64| kb as f64 / 1024.0;
        let end = match (p.rss_kb, p.hwm_kb) {
            (Some(rss), Some(hwm)) => format!(
                "{:.1} MB resident at the end, {:.1} MB peak of the process's life (VmHWM)",
                mb(rss),
                mb(hwm)
            ),
            _ => "gone at the end".into(),
        };
        // A relay's target; a NATS server's memory is reported, not judged.
        let peak = p.hwm_kb.unwrap_or(p.sampled_kb);
        let verdict = if !p.is_relay {
            ""
        } else if peak < 200 * 1024 {
            " (target < 200 MB: met)"
        } else {
            " (target < 200 MB: MISSED)"
        };
        let (what, who) = (if p.is_relay { "relay" } else { "NATS" }, &p.label);
        println!(
            "{what} memory: {who}: {:.1} MB at most while the song played (sampled every 100 \
             ms), {end}{verdict}",
            mb(p.sampled_kb)
        );
        if p.is_relay {
            ok &= peak < 200 * 1024;
        }
        if let Some(cpu) = p.cpu {
            println!(
                "{what} CPU: {who}: {cpu:.2} s in {wall:.1} s ({:.0}% of one core)",
                100.0 * cpu / wall
            );
        }
    }
    if let Some(c) = self_cpu {
        println!(
            "load tool CPU (publishers and viewers): {c:.2} s ({:.0}% of one core)",
            100.0 * c / wall
        );
    }
    ok
}

/// p50 / p99 / max of `ms` (sorted here), or "none".
fn spread(mut ms: Vec<f64>) -> String {
    if ms.is_empty() {
        return "none".into();
    }
    ms.sort_by(f64::total_cmp);
    format!(
        "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&ms, 50.0),
        percentile(&ms, 99.0),
        ms.last().copied().unwrap_or(f64::NAN)
    )
}

/// Milliseconds from `a` to `b` (microseconds after the epoch).
fn ms(a: u64, b: u64) -> f64 {
    (b as f64 - a as f64) / 1000.0
}

/// A client's events (`(_, when)`, in order) around losing its connection at `lost_at`: when
/// one came after it, the time from the kill to it goes into `from_kill` and, if one came
/// before, the time from that to it into `gaps`. Whether one came after.
fn resumed(
    events: &[(impl Copy, u64)],
    lost_at: u64,
    killed_at: u64,
    from_kill: &mut Vec<f64>,
    gaps: &mut Vec<f64>,
) -> bool {
    let Some(&(_, at)) = events.iter().find(|e| e.1 > lost_at) else {
        return false;
    };
    from_kill.push(ms(killed_at, at));
    if let Some(&(_, b)) = events.iter().rev().find(|e| e.1 <= lost_at) {
        gaps.push(ms(b, at));
    }
    true
}

/// How the publishers and viewers came through the kill; false when a chunk was lost or
/// repeated, or a client did not resume.
fn report_kill(run: &Run, kill: &Kill, killed_at: u64) -> bool {
    println!(
        "kill: {}{} (pid {}) killed with SIGKILL {:.2} s after the first publisher's start",
        if kill.nats { "" } else { "relay " },
        kill.addr,
        kill.pid,
        ms(run.starts.first().copied().unwrap_or(0), killed_at) / 1000.0
    );
    // Every client, moved or not (a NATS node's loss moves none): its wait across the kill,
    // from its last event before to its first after.
    let (mut acks, mut chunks, mut unused) = (Vec::new(), Vec::new(), Vec::new());
    for p in run.sent {
        resumed(&p.acks, killed_at, killed_at, &mut unused, &mut acks);
    }
    for v in run.seen {
        resumed(&v.arrivals, killed_at, killed_at, &mut unused, &mut chunks);
    }
    println!(
        "across the kill, every client: publishers' last ack before -> first after: {}; \
         viewers' last chunk before -> first after: {}",
        spread(acks),
        spread(chunks)
    );
    // Publishers: from the kill, and from their last acknowledgement before it, to their
    // first acknowledgement after it.
    let (mut from_kill, mut from_last_ack) = (Vec::new(), Vec::new());
    let (mut moved, mut stuck, mut retried_p) = (0, 0, 0);
    for p in run.sent {
        if !p.lost_at.iter().any(|&t| t >= killed_at) {
            continue;
        }
        moved += 1;
        retried_p += usize::from(p.lost_at.iter().filter(|&&t| t >= killed_at).count() > 1);
        let lost_at = p.lost_at.iter().copied().find(|&t| t >= killed_at);
        let resumed = lost_at
            .is_some_and(|l| resumed(&p.acks, l, killed_at, &mut from_kill, &mut from_last_ack));
        stuck += usize::from(!resumed);
    }
    println!(
        "publishers: {moved} of {} lost their connection and moved ({retried_p} lost more \
         than one); kill -> first ack after: {}; last ack before -> first after: {}{}",
        run.sent.len(),
        spread(from_kill),
        spread(from_last_ack),
        if stuck > 0 {
            format!("; {stuck} never acknowledged after")
        } else {
            String::new()
        }
    );
    // Viewers: on the killed relay, from their last chunk before the loss to their first
    // after; and every viewer's sequence, 0 to the last, each once, in order.
    let last = run.song.chunks.len() as u32;
    let (mut gaps, mut from_kill_v) = (Vec::new(), Vec::new());
    let (mut moved_v, mut unresumed) = (0, 0);
    let (mut lost, mut repeated, mut disordered, mut unended) = (0u64, 0u64, 0u64, 0);
    let (mut late, mut late_chunks) = (0, 0u64);
    for v in run.seen {
        if let Some(&lost_at) = v.lost_at.iter().find(|&&t| t >= killed_at) {
            moved_v += 1;
            let resumed = resumed(&v.arrivals, lost_at, killed_at, &mut from_kill_v, &mut gaps);
            unresumed += usize::from(!resumed);
        }
        let mut got = vec![0u32; last as usize];
        // A viewer that started past chunk 0 (its relay attached it late: a live join at the
        // last keyframe group) is counted apart from one that lost chunks on the way.
        let first = v.arrivals.first().map_or(last, |a| a.0.min(last));
        if first > 0 {
            late += 1;
            late_chunks += u64::from(first);
        }
        let mut next = first;
        for &(seq, _) in &v.arrivals {
            match got.get_mut(seq as usize) {
                Some(n) => *n += 1,
                None => disordered += 1,
            }
            if seq != next {
                disordered += 1;
            }
            next = seq.wrapping_add(1);
        }
        lost += got[first as usize..].iter().filter(|&&n| n == 0).count() as u64;
        repeated += got
            .iter()
            .map(|&n| u64::from(n.saturating_sub(1)))
            .sum::<u64>();
        unended += usize::from(!v.ended);
    }
    let over_1s = gaps.iter().filter(|&&g| g > 1000.0).count();
    println!(
        "viewers: {moved_v} of {} lost their connection and moved; last chunk before -> first \
         after: {} ({over_1s} over 1 s); kill -> first chunk after: {}{}",
        run.seen.len(),
        spread(gaps),
        spread(from_kill_v),
        if unresumed > 0 {
            format!("; {unresumed} got nothing after")
        } else {
            String::new()
        }
    );
    // Why the viewers' connections were lost after the kill (the kill itself, then each
    // failed attempt), by message, the relay's address left out.
    let mut why: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    let mut retried = 0;
    for v in run.seen {
        let after: Vec<&String> = v
            .lost_at
            .iter()
            .zip(&v.lost_why)
            .filter(|(&at, _)| at >= killed_at)
            .map(|(_, w)| w)
            .collect();
        retried += usize::from(after.len() > 1);
        for w in after {
            let general = w.split_once(": ").map_or(w.as_str(), |(_, rest)| rest);
            *why.entry(general).or_default() += 1;
        }
    }
    if !why.is_empty() {
        let each: Vec<String> = why.iter().map(|(w, n)| format!("{n} x {w}")).collect();
        println!(
            "viewers' losses after the kill ({retried} viewers lost more than one \
             connection): {}",
            each.join("; ")
        );
    }
    let whole =
        lost == 0 && repeated == 0 && disordered == 0 && unended == 0 && stuck == 0 && late == 0;
    println!(
        "across the kill: {lost} chunks lost after a viewer's first, {repeated} repeated, \
         {disordered} out of order over all viewers (chunks 0 to {} each); {late} viewers \
         started late ({late_chunks} chunks before their first); {unended} viewers without \
         the end: {}",
        last.saturating_sub(1),
        if whole { "none lost (met)" } else { "MISSED" }
    );
    whole
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
    if let Some(after) = args.kill_after {
        let song_secs = song.send_at.last().copied().unwrap_or(0.0);
        if !(after > 0.0 && after <= song_secs - 1.0) {
            return Err(Failure(format!(
                "--kill-after must be above 0 and at most {:.1} s (the song lasts {song_secs:.1}                  s at this speed)",
                song_secs - 1.0
            )));
        }
        if args.scenario == "both" {
            return Err(Failure(
                "--kill-pid kills a relay in one scenario: give --scenario one or many".into(),
            ));
        }
    }
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

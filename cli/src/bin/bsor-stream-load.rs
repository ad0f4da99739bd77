//! `bsor-stream-load`: drives a relay on 127.0.0.1 with publishers and many viewers over real sockets and
//! reports frame latency, what arrived, and the relay's CPU and memory.
//!
//! A benchmark tool of the project, built beside the `bsor-stream` binary and kept out of it.
//! The relay is `bsor-stream serve` (the binary next to this one) in its own process: started here on port 0 (a fresh one
//! per scenario, so each has its own peak memory), or given with `--relay ADDR` (and
//! `--relay-pid PID` to read its memory and CPU from `/proc`). The publishers and viewers
//! share one tokio runtime in this process. A viewer parses only frame headers and chunk
//! headers: it records when each chunk arrived, by sequence number. The frames each chunk
//! carries, and when the publisher's capture clock reached each of them, are known here
//! from decoding the synthetic replay's stream once, so a frame's latency is the arrival of
//! its chunk minus the time its capture was due.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::ops::ControlFlow;

use bsor_stream::net::client::{ClientConfig, ClientEvent, Subscription};
use bsor_stream::net::wire::{EndReason, ViewMode};
use bsor_stream::net::{publisher, viewer};
use bsor_stream::stream::{ChunkHeader, Profile, Settings};
use bsor_stream::{bsor, synth, transcode};
use bytes::Bytes;

/// A failure, for the one line on stderr.
struct Failure(String);

impl<E: std::fmt::Display> From<(&std::path::Path, E)> for Failure {
    fn from((path, e): (&std::path::Path, E)) -> Self {
        Failure(format!("{}: {e}", path.display()))
    }
}

/// Load on a relay over 127.0.0.1: one session with 1000 viewers and 100 sessions of 10,
/// publishing a synthetic replay live; prints frame latency, skips, relay memory and CPU.
#[derive(clap::Parser, Debug)]
#[command(name = "bsor-stream-load", version)]
struct LoadArgs {
    /// A running relay's TCP address (`bsor-stream serve`); by default one is started here,
    /// in its own process, for each scenario.
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

/// The song every publisher sends: stream header, chunks, and when each frame is due.
struct Song {
    header: Bytes,
    chunks: Vec<Bytes>,
    /// When the publisher sends each chunk, in seconds from its start (the capture of its
    /// last frame: a recorder flushes a chunk once its last frame is in).
    send_at: Vec<f64>,
    /// For each chunk, when each of its frames was captured, in seconds from the start.
    frames: Vec<Vec<f64>>,
    total_frames: u64,
    flush_ms: f64,
}

fn song(seconds: f32, speed: f32) -> Result<Song, Failure> {
    let settings = Settings::live(Profile::Lossless);
    let replay = synth::replay(synth::Settings {
        seed: 7,
        seconds,
        fps: 90,
    });
    // Through BSOR bytes, as a recorder's replay would be.
    let bytes = bsor::to_vec(&replay).map_err(|e| Failure(e.to_string()))?;
    let replay = bsor::parse(&bytes).map_err(|e| Failure(e.to_string()))?;
    let stream = transcode::encode_replay(&replay, settings);
    let (header_len, spans) = transcode::chunk_frame_times(&stream)
        .ok_or_else(|| Failure("the synthetic stream has no header".into()))?;
    let header = Bytes::copy_from_slice(&stream[..header_len]);
    let chunks: Vec<Bytes> = spans
        .iter()
        .map(|(c, _)| Bytes::copy_from_slice(c.bytes(&stream)))
        .collect();
    let song_times: Vec<Vec<f32>> = spans.into_iter().map(|(_, t)| t).collect();
    let first_t = song_times.iter().flatten().copied().next().unwrap_or(0.0);
    let at = |t: f32| f64::from(((t - first_t) / speed).max(0.0));
    // A recorder sends a frame chunk when its last frame is captured (the encoder closes a
    // chunk on the frame after which the next would pass the flush interval), and the
    // event, trailer and index chunks right after the chunk before them.
    let mut send_at = Vec::with_capacity(chunks.len());
    let mut last = 0.0f64;
    for times in &song_times {
        if let Some(&end) = times.last() {
            last = last.max(at(end));
        }
        send_at.push(last);
    }
    let frames: Vec<Vec<f64>> = song_times
        .iter()
        .map(|t| t.iter().map(|&t| at(t)).collect())
        .collect();
    let total_frames = frames.iter().map(|f| f.len() as u64).sum();
    Ok(Song {
        header,
        chunks,
        send_at,
        frames,
        total_frames,
        flush_ms: f64::from(settings.flush_seconds) * 1000.0,
    })
}

/// What one viewer saw.
#[derive(Default)]
struct Seen {
    /// Chunk sequence numbers and their arrival, in microseconds after the epoch.
    arrivals: Vec<(u32, u64)>,
    skipped: u64,
    ended: bool,
    error: Option<String>,
}

/// Connects, subscribes (live) and reports on `ready` once the relay answered its Hello;
/// then records every chunk's arrival until End. The protocol is the library's client
/// session ([`viewer::watch`]), as `watch` runs it.
async fn viewer(
    addr: String,
    session: String,
    epoch: Instant,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
    deadline: Instant,
) -> Seen {
    let mut seen = Seen::default();
    let subscription = Subscription {
        session,
        mode: ViewMode::Live,
        wait_ms: 60_000,
    };
    let config = client_config();
    let on = |e: ClientEvent| {
        match e {
            ClientEvent::Established { .. } => {
                let _ = ready.send(());
            }
            ClientEvent::Chunk(body) => {
                let at = epoch.elapsed().as_micros() as u64;
                if let Some((h, _)) = ChunkHeader::parse_at(&body) {
                    seen.arrivals.push((h.seq, at));
                }
            }
            ClientEvent::Skipped { chunks, .. } => seen.skipped += u64::from(chunks),
            ClientEvent::End(reason) => seen.ended = reason == EndReason::Finished,
            // A load test counts a reconnection as an error, and stops that viewer.
            ClientEvent::Lost(e) => {
                seen.error.get_or_insert(e.to_string());
                return ControlFlow::Break(());
            }
            _ => {}
        }
        ControlFlow::Continue(())
    };
    let run = viewer::watch(&addr, false, subscription, config, on);
    let result = tokio::time::timeout_at(deadline.into(), run).await;
    match result {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            seen.error.get_or_insert(e.to_string());
        }
        Err(_) => {
            seen.error.get_or_insert("timed out".into());
        }
    }
    seen
}

fn client_config() -> ClientConfig {
    let mut c = ClientConfig::default();
    c.agent = concat!("bsor-stream-load ", env!("CARGO_PKG_VERSION")).into();
    c.max_retries = 0;
    c
}

/// Publishes the song on `session`, starting at `start`; returns when each chunk was handed
/// to the publisher (microseconds after the epoch). The protocol is the library's client
/// session, driven by the async publisher `publish` runs.
async fn publisher(
    addr: String,
    session: String,
    token: String,
    song: Arc<Song>,
    start: Instant,
    epoch: Instant,
) -> Result<Vec<u64>, Failure> {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&(epoch.elapsed().as_nanos() as u64).to_le_bytes());
    let target = publisher::Target {
        addr,
        websocket: false,
        session,
        token,
        key,
        buffer_bytes: 64 << 20,
        spill: None,
        retry_every: Duration::from_millis(500),
        max_retries: 0,
        finish_timeout: Duration::from_secs(5),
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn(publisher::publish(target, song.header.clone(), rx, |_| {}));
    let mut sent = Vec::with_capacity(song.chunks.len());
    for (chunk, at) in song.chunks.iter().zip(&song.send_at) {
        tokio::time::sleep_until((start + Duration::from_secs_f64(*at)).into()).await;
        let _ = tx.send(publisher::Input::Chunk(chunk.clone()));
        sent.push(epoch.elapsed().as_micros() as u64);
    }
    let _ = tx.send(publisher::Input::Finished);
    match run.await {
        Ok(Ok(())) => Ok(sent),
        Ok(Err(e)) => Err(Failure(format!("publisher: {e}"))),
        Err(e) => Err(Failure(format!("publisher: {e}"))),
    }
}

/// A relay process started for one scenario.
struct RelayProcess {
    child: Child,
    addr: String,
    /// Its stdout, kept open so that it may go on printing.
    _stdout: Option<BufReader<std::process::ChildStdout>>,
    _dir: TempDir,
}

/// A directory removed on drop (for the token file).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_relay(token: &str, n: usize) -> Result<RelayProcess, Failure> {
    let dir = std::env::temp_dir().join(format!("bsor-stream-load-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| (dir.as_path(), e))?;
    let dir = TempDir(dir);
    let tokens = dir.0.join("tokens");
    std::fs::write(&tokens, format!("{token}\n")).map_err(|e| (tokens.as_path(), e))?;
    let exe = std::env::current_exe().map_err(|e| Failure(format!("finding myself: {e}")))?;
    // The relay is the user's binary, built beside this one.
    let relay_exe = exe.with_file_name(format!("bsor-stream{}", std::env::consts::EXE_SUFFIX));
    let mut child = Command::new(&relay_exe)
        .args(["serve", "--tcp", "127.0.0.1:0", "--token-file"])
        .arg(&tokens)
        // Every client comes from 127.0.0.1: past the default per-address cap.
        .args(["--max-per-address", &(n + 16).to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // Its log would drown the report; how it ended is checked instead.
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Failure(format!("starting the relay {}: {e}", relay_exe.display())))?;
    let mut line = String::new();
    let mut stdout = child.stdout.take().map(BufReader::new);
    if let Some(out) = &mut stdout {
        let _ = out.read_line(&mut line);
    }
    let addr = line
        .trim()
        .strip_prefix("listening tcp=")
        .map(|a| a.split_whitespace().next().unwrap_or(a).to_string());
    let mut relay = RelayProcess {
        child,
        addr: String::new(),
        _stdout: stdout,
        _dir: dir,
    };
    match addr {
        Some(addr) => {
            relay.addr = addr;
            Ok(relay)
        }
        // Dropping `relay` ends the process.
        None => Err(Failure(format!("the relay said {line:?}, not its address"))),
    }
}

/// A process's resident memory now and at its peak (kB), from `/proc/PID/status`.
fn memory_kb(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// A process's CPU time (user + system, all threads), in seconds, from `/proc/PID/stat`
/// (in USER_HZ = 100 ticks a second, fixed by Linux's ABI).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3 on.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// The soft limit on open files, from `/proc/self/limits`.
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// One scenario: `sessions` sessions of `viewers` viewers each.
// Long: one scenario from start to report, step by step (relay, viewers, publishers, sampling, collection); its parts share a dozen locals.
fn scenario(
    args: &LoadArgs,
    name: &str,
    sessions: usize,
    viewers: usize,
    song: &Arc<Song>,
    n: usize,
) -> Result<bool, Failure> {
    let connections = sessions * (viewers + 1);
    if connections > MAX_CONNECTIONS {
        return Err(Failure(format!(
            "{connections} connections: over the load tool's bound of {MAX_CONNECTIONS}"
        )));
    }
    // This process holds one socket per connection; a relay started here holds as many.
    if let Some(limit) = open_file_limit() {
        if connections + 64 > limit {
            return Err(Failure(format!(
                "{connections} connections need more open files than the limit of {limit}: \
                 raise it with `ulimit -n {}`",
                connections + 1024
            )));
        }
    }
    let mut started;
    let (addr, pid) = match &args.relay {
        Some(a) => {
            started = None;
            (a.clone(), args.relay_pid)
        }
        None => {
            let r = start_relay(&args.token, n)?;
            let out = (r.addr.clone(), Some(r.child.id()));
            started = Some(r);
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
        for s in 0..sessions {
            for _ in 0..viewers {
                watchers.push(tokio::spawn(viewer(
                    addr.clone(),
                    format!("load-{s}"),
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
                addr.clone(),
                format!("load-{s}"),
                args.token.clone(),
                song.clone(),
                at,
                epoch,
            )));
        }
        // The relay's memory, sampled while the song plays.
        let sampler = pid.map(|p| {
            let peak = sampled_peak.clone();
            tokio::spawn(async move {
                loop {
                    if let Some((rss, _)) = memory_kb(p) {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        });
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
    if let Some(r) = &mut started {
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
    let p99 = percentile(&frame_ms, 0.99);
    let target = song.flush_ms + 20.0;
    println!(
        "frame latency (capture -> arrival): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         (target p99 <= flush {:.0} ms + 20 ms: {})",
        percentile(&frame_ms, 0.5),
        p99,
        frame_ms.last().copied().unwrap_or(f64::NAN),
        song.flush_ms,
        if p99 <= target { "met" } else { "MISSED" }
    );
    println!(
        "chunk transit (publisher's send -> arrival): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&transit_ms, 0.5),
        percentile(&transit_ms, 0.99),
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
    match load(&LoadArgs::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(Failure(msg)) => {
            eprintln!("bsor-stream-load: error: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
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
        ok &= scenario(args, "one session", 1, args.viewers, &song, 1)?;
    }
    if many {
        ok &= scenario(
            args,
            "many sessions",
            args.sessions,
            args.session_viewers,
            &song,
            2,
        )?;
    }
    Ok(ok)
}

//! What the benchmark tools share: the synthetic song and its paced publisher, a recording
//! viewer, the relay started as its own process (`bsor-stream serve`), a process's memory
//! and CPU time read from `/proc`, working folders, and how a run ends (its exit code).
//!
//! The tools' latencies are reported at percentiles of the library's nearest-rank
//! [`percentile`](bsor_stream::integrity::fingerprint::eval::percentile).

use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsor_stream::net::client::{ClientConfig, ClientEvent, Subscription};
use bsor_stream::net::wire::{EndReason, ViewMode};
use bsor_stream::net::{publisher, viewer};
use bsor_stream::stream::{ChunkHeader, Profile, Settings};
use bsor_stream::{bsor, synth, transcode};
use bytes::Bytes;

/// A failure, for the one line on stderr.
pub struct Failure(pub String);

impl<E: std::fmt::Display> From<(&Path, E)> for Failure {
    fn from((path, e): (&Path, E)) -> Self {
        Failure(format!("{}: {e}", path.display()))
    }
}

/// The exit code of a run: 0 when every target was met, 1 when one was missed or the run
/// failed (said in one line on stderr).
pub fn exit_code(tool: &str, result: Result<bool, Failure>) -> std::process::ExitCode {
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(Failure(msg)) => {
            eprintln!("{tool}: error: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The song every publisher sends: stream header, chunks, and when each frame is due.
pub struct Song {
    pub header: Bytes,
    pub chunks: Vec<Bytes>,
    /// When the publisher sends each chunk, in seconds from its start (the capture of its
    /// last frame: a recorder flushes a chunk once its last frame is in).
    pub send_at: Vec<f64>,
    /// For each chunk, when each of its frames was captured, in seconds from the start.
    pub frames: Vec<Vec<f64>>,
    pub total_frames: u64,
    pub flush_ms: f64,
    /// The whole stream as a recorder's finished file holds it (footer included): what
    /// `bsor-stream-hostile` writes as an archive.
    pub file: Bytes,
}

/// The synthetic replay of `seconds` at 90 fps, encoded with the live settings, its chunks
/// due at `speed` times the song's pace.
pub fn song(seconds: f32, speed: f32) -> Result<Song, Failure> {
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
        file: Bytes::from(stream),
    })
}

/// What one viewer saw.
#[derive(Default)]
pub struct Seen {
    /// Chunk sequence numbers and their arrival, in microseconds after the epoch.
    pub arrivals: Vec<(u32, u64)>,
    pub skipped: u64,
    pub ended: bool,
    pub error: Option<String>,
    /// When each connection was lost, in microseconds after the epoch (a viewer that
    /// reconnects: [`Reconnect::Next`]), and why.
    pub lost_at: Vec<u64>,
    pub lost_why: Vec<String>,
}

/// What a viewer or a publisher does when its connection is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconnect {
    /// Nothing: the loss is an error and that client stops (a benchmark of one relay).
    Never,
    /// Reconnect as `watch` and `publish` do, to the next address of its comma-separated
    /// list (relays of one cluster): a viewer asks for the chunk after its last one
    /// (`Subscribe.from`), a publisher resumes with its key.
    Next,
}

/// Where and how a viewer watches.
pub struct Watch {
    pub addr: String,
    pub websocket: bool,
    pub session: String,
    pub mode: ViewMode,
}

/// Connects, subscribes and reports on `ready` once the relay answered its Hello; then
/// records every chunk's arrival until End. The protocol is the library's client session
/// ([`viewer::watch`]), as `watch` runs it.
pub async fn viewer(
    watch: Watch,
    epoch: Instant,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
    deadline: Instant,
) -> Seen {
    viewer_with(watch, Reconnect::Never, epoch, ready, deadline).await
}

/// [`viewer()`], reconnecting or not as `reconnect` says. A viewer that reconnects reports on
/// `ready` once only (its first connection), and records when it lost each connection.
pub async fn viewer_with(
    watch: Watch,
    reconnect: Reconnect,
    epoch: Instant,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
    deadline: Instant,
) -> Seen {
    let mut seen = Seen::default();
    let subscription = Subscription {
        session: watch.session,
        mode: watch.mode,
        wait_ms: 60_000,
    };
    let config = match reconnect {
        Reconnect::Never => client_config(),
        // `watch`'s own: waits of 0.5, 1, 2, 4, then 5 s, up to 120 failures in a row.
        Reconnect::Next => {
            let mut c = ClientConfig::default();
            c.agent = client_config().agent;
            c
        }
    };
    let mut greeted = false;
    let on = |e: ClientEvent| {
        match e {
            ClientEvent::Established { .. } if !greeted => {
                greeted = true;
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
            ClientEvent::Lost(e) => {
                seen.lost_at.push(epoch.elapsed().as_micros() as u64);
                seen.lost_why.push(e.to_string());
                // A benchmark of one relay counts a reconnection as an error, and stops
                // that viewer.
                if reconnect == Reconnect::Never {
                    seen.error.get_or_insert(e.to_string());
                    return ControlFlow::Break(());
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    };
    let run = viewer::watch(&watch.addr, watch.websocket, subscription, config, on);
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

/// A client that never reconnects: a benchmark counts a lost connection as an error.
pub fn client_config() -> ClientConfig {
    let mut c = ClientConfig::default();
    c.agent = concat!("bsor-stream-bench ", env!("CARGO_PKG_VERSION")).into();
    c.max_retries = 0;
    c
}

/// Publishes the song on `session`, starting at `start`; returns when each chunk was handed
/// to the publisher (microseconds after the epoch). The protocol is the library's client
/// session, driven by the async publisher `publish` runs.
pub async fn publisher(
    addr: String,
    session: String,
    token: String,
    song: Arc<Song>,
    start: Instant,
    epoch: Instant,
) -> Result<Vec<u64>, Failure> {
    let run = publisher_with(addr, session, token, song, start, epoch, Reconnect::Never);
    let published = run.await;
    match published.error {
        Some(e) => Err(Failure(e)),
        None => Ok(published.sent),
    }
}

/// What one publisher did, in microseconds after the epoch.
#[derive(Default)]
pub struct Published {
    /// When each chunk was handed to the publisher.
    pub sent: Vec<u64>,
    /// Each acknowledgement: the chunks acknowledged so far in all, and when.
    pub acks: Vec<(u64, u64)>,
    /// When each connection was lost.
    pub lost_at: Vec<u64>,
    /// When the relay first answered its `Publish` (`Resume`): its chunks wait until then.
    pub connected_at: Option<u64>,
    /// Why it stopped before its `End` went out, if it did.
    pub error: Option<String>,
}

/// [`publisher()`], reconnecting or not as `reconnect` says (with [`Reconnect::Next`], as
/// `publish` does: waits of 0.5, 1, 2, 4, then 5 s, giving up after 10 failures in a row
/// and 60 s, and 10 s for the last acknowledgements), recording its acknowledgements and
/// losses, and why it failed if it did.
pub async fn publisher_with(
    addr: String,
    session: String,
    token: String,
    song: Arc<Song>,
    start: Instant,
    epoch: Instant,
    reconnect: Reconnect,
) -> Published {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&(epoch.elapsed().as_nanos() as u64).to_le_bytes());
    let (max_retries, retry_for, finish_timeout) = match reconnect {
        Reconnect::Never => (0, Duration::ZERO, Duration::from_secs(5)),
        Reconnect::Next => (10, Duration::from_secs(60), Duration::from_secs(10)),
    };
    let target = publisher::Target {
        addr,
        websocket: false,
        session,
        token,
        key,
        buffer_bytes: 64 << 20,
        spill: None,
        ca_file: None,
        retry_every: Duration::from_millis(500),
        max_retries,
        retry_for,
        finish_timeout,
    };
    let timeline = Arc::new(std::sync::Mutex::new(Published::default()));
    let log = timeline.clone();
    let on = move |p: publisher::Progress| {
        let at = epoch.elapsed().as_micros() as u64;
        // A poisoned lock only loses a figure; the run goes on.
        if let Ok(mut t) = log.lock() {
            match p {
                publisher::Progress::Acked(n) => t.acks.push((n, at)),
                publisher::Progress::Lost(_) => t.lost_at.push(at),
                publisher::Progress::Connected(_) => {
                    t.connected_at.get_or_insert(at);
                }
                _ => {}
            }
        }
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn(publisher::publish(target, song.header.clone(), rx, on));
    let mut sent = Vec::with_capacity(song.chunks.len());
    for (chunk, at) in song.chunks.iter().zip(&song.send_at) {
        tokio::time::sleep_until((start + Duration::from_secs_f64(*at)).into()).await;
        let _ = tx.send(publisher::Input::Chunk(chunk.clone()));
        sent.push(epoch.elapsed().as_micros() as u64);
    }
    let _ = tx.send(publisher::Input::Finished);
    let error = match run.await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("publisher: {e}")),
        Err(e) => Some(format!("publisher: {e}")),
    };
    let mut out = match timeline.lock() {
        Ok(mut t) => std::mem::take(&mut *t),
        Err(_) => Published::default(),
    };
    out.sent = sent;
    out.error = error;
    out
}

/// A directory removed on drop (token file, archive, relay log).
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A new empty directory under the system's temporary directory, named for `tool` and
    /// made with a name nobody can guess or take first.
    pub fn new(tool: &str) -> Result<TempDir, Failure> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{tool}-"))
            .tempdir()
            .map_err(|e| Failure(format!("{}: {e}", std::env::temp_dir().display())))?;
        Ok(TempDir(dir))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// The user's `bsor-stream` binary (package `bsor-stream-cli`), which the tools start as
/// the relay or the replay server they measure: the one built beside this tool (`cargo
/// build --release` builds both), an error saying how to build it when it is missing.
pub fn user_binary() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure(format!("finding myself: {e}")))?;
    let user = exe.with_file_name(format!("bsor-stream{}", std::env::consts::EXE_SUFFIX));
    if !user.is_file() {
        return Err(Failure(format!(
            "{} is missing: build it beside this tool, with `cargo build --release -p \
             bsor-stream-cli` for a release build",
            user.display()
        )));
    }
    Ok(user)
}

/// How to start a relay.
#[derive(Default)]
pub struct RelayOptions {
    /// Also serve WebSocket, on a port of its own.
    pub websocket: bool,
    /// Archive the sessions in this directory.
    pub archive: Option<PathBuf>,
    /// Keep the relay's log (its stderr) in this file; by default it is dropped.
    pub log: Option<PathBuf>,
    /// Connections allowed from one address (`serve --max-per-address`); by default the
    /// relay's own default.
    pub max_per_address: Option<usize>,
}

/// A relay process started for one scenario; ended (killed) on drop.
pub struct RelayProcess {
    pub child: Child,
    pub addr: String,
    /// The WebSocket address, when started with one.
    pub ws_addr: Option<String>,
    /// Its stdout, kept open so that it may go on printing.
    _stdout: Option<BufReader<std::process::ChildStdout>>,
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bsor-stream serve` (the binary next to this one) on 127.0.0.1 port 0 with the
/// token file `tokens` and the relay's default limits; returns once it printed its address.
pub fn start_relay(tokens: &Path, options: &RelayOptions) -> Result<RelayProcess, Failure> {
    start_relay_with(tokens, options, &[])
}

/// [`start_relay`] with more arguments for `serve` (the hostile tool's `--store DIR`).
pub fn start_relay_with(
    tokens: &Path,
    options: &RelayOptions,
    extra: &[String],
) -> Result<RelayProcess, Failure> {
    let relay_exe = user_binary()?;
    let mut command = Command::new(&relay_exe);
    command
        .args(["serve", "--tcp", "127.0.0.1:0", "--token-file"])
        .arg(tokens)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    if options.websocket {
        command.args(["--ws", "127.0.0.1:0"]);
    }
    if let Some(dir) = &options.archive {
        command.arg("--archive").arg(dir);
    }
    if let Some(n) = options.max_per_address {
        command.args(["--max-per-address", &n.to_string()]);
    }
    command.args(extra);
    match &options.log {
        Some(path) => {
            let file = std::fs::File::create(path).map_err(|e| (path.as_path(), e))?;
            command.stderr(file);
        }
        // Its log would drown the report; how it ended is checked instead.
        None => {
            command.stderr(Stdio::null());
        }
    }
    let mut child = command
        .spawn()
        .map_err(|e| Failure(format!("starting the relay {}: {e}", relay_exe.display())))?;
    let mut line = String::new();
    let mut stdout = child.stdout.take().map(BufReader::new);
    if let Some(out) = &mut stdout {
        let _ = out.read_line(&mut line);
    }
    let mut relay = RelayProcess {
        child,
        addr: String::new(),
        ws_addr: None,
        _stdout: stdout,
    };
    let Some(rest) = line.trim().strip_prefix("listening tcp=") else {
        // Dropping `relay` ends the process.
        return Err(Failure(format!("the relay said {line:?}, not its address")));
    };
    let mut words = rest.split_whitespace();
    relay.addr = words.next().unwrap_or_default().to_string();
    relay.ws_addr = words
        .find_map(|w| w.strip_prefix("ws="))
        .map(str::to_string);
    if options.websocket && relay.ws_addr.is_none() {
        return Err(Failure(format!("the relay said {line:?}, without ws=")));
    }
    Ok(relay)
}

/// A process's resident memory now and at its peak (kB), from `/proc/PID/status`.
pub fn memory_kb(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Samples a process's resident memory every 100 ms into `peak` (kB, the highest seen)
/// until the task is aborted.
pub fn sample_memory(pid: u32, peak: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Some((rss, _)) = memory_kb(pid) {
                peak.fetch_max(rss, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// A process's CPU time (user + system, all threads), in seconds, from `/proc/PID/stat`
/// (in USER_HZ = 100 ticks a second, fixed by Linux's ABI).
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3 on.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Checks that this process (and a relay started from it, which inherits the limit) may
/// open `connections` sockets and some files besides, from the soft limit in
/// `/proc/self/limits`.
pub fn check_open_files(connections: usize) -> Result<(), Failure> {
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        });
    match limit {
        Some(limit) if connections + 64 > limit => Err(Failure(format!(
            "{connections} connections need more open files than the limit of {limit}: \
             raise it with `ulimit -n {}`",
            connections + 1024
        ))),
        _ => Ok(()),
    }
}

//! `publish` and `watch` over TCP or WebSocket, and `demo`.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsor_stream::bsor;
use bsor_stream::net::archive::StreamWriter;
use std::ops::ControlFlow;

use bsor_stream::net::client::{ClientConfig, ClientEvent, Subscription};
use bsor_stream::net::wire::{EndReason, ViewMode};
use bsor_stream::net::{publisher, tcp, tls, viewer, ws};
use bsor_stream::stream::{Settings, StreamDecoder, StreamItem};
use bsor_stream::transcode;
use bytes::Bytes;

use super::{read_all, Failure, Outcome};

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))
}

/// What a publisher sends: the stream header, each chunk with the song time at which a
/// recorder has it, and the song time of the first frame.
struct Parts {
    header: Bytes,
    chunks: Vec<(f32, Bytes)>,
    first_t: f32,
}

/// The stream header and chunks of a `.bsors`, or of a `.bsor` encoded live. A frame chunk
/// is due when its last frame is captured (a recorder's encoder closes it then); event,
/// trailer and index chunks go out with the frame chunk before them.
fn stream_parts(file: &Path, settings: Settings) -> Result<Parts, Failure> {
    parts_of(read_all(file)?, file, settings)
}

/// [`stream_parts`] of a file's bytes (`file` names it in errors).
fn parts_of(bytes: Vec<u8>, file: &Path, settings: Settings) -> Result<Parts, Failure> {
    let stream = if super::is_stream(&bytes) {
        bytes
    } else {
        let r = bsor::parse(&bytes).map_err(|e| Failure::from((file, e)))?;
        transcode::encode_replay(&r, settings)
    };
    let (header_len, spans) = transcode::chunk_frame_times(&stream)
        .ok_or_else(|| Failure(format!("{}: no stream header", file.display())))?;
    let first_t = spans
        .iter()
        .flat_map(|(_, t)| t.iter().copied())
        .find(|t| t.is_finite())
        .unwrap_or(0.0);
    let mut due = first_t;
    let chunks = spans
        .iter()
        .map(|(c, times)| {
            if let Some(&t) = times.iter().rev().find(|t| t.is_finite()) {
                due = due.max(t);
            }
            (due, Bytes::copy_from_slice(c.bytes(&stream)))
        })
        .collect();
    Ok(Parts {
        header: Bytes::copy_from_slice(&stream[..header_len]),
        chunks,
        first_t,
    })
}

/// Where `publish` takes its token from.
pub enum TokenSource {
    /// The first line of a file (surrounding whitespace trimmed).
    File(std::path::PathBuf),
    /// An environment variable.
    Env(String),
    /// The command line, where every user of the machine sees it.
    Arg(String),
}

/// The token, read from where the user said; an empty one is an error naming its source.
pub fn read_token(source: TokenSource) -> Result<String, Failure> {
    let (token, from) = match source {
        TokenSource::File(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| (path.as_path(), e))?;
            let line = text.lines().next().unwrap_or("").trim().to_string();
            (line, format!("the first line of {}", path.display()))
        }
        TokenSource::Env(var) => match std::env::var(&var) {
            Ok(t) => (t.trim().to_string(), format!("${var}")),
            Err(e) => return Err(Failure(format!("--token-env {var}: {e}"))),
        },
        TokenSource::Arg(t) => {
            eprintln!(
                "bsor-stream: warning: --token shows the token in the process list to every \
                 user of this machine; use --token-file or --token-env"
            );
            (t, "--token".to_string())
        }
    };
    if token.is_empty() {
        return Err(Failure(format!("no token in {from}")));
    }
    Ok(token)
}

/// Where `publish` and `watch` reach the relay.
pub struct RelayAt<'a> {
    /// `HOST:PORT` (or a URL with `websocket`).
    pub addr: &'a str,
    /// Over WebSocket.
    pub websocket: bool,
    /// Over TLS, trusting this PEM file's certificates only.
    pub ca_file: Option<&'a Path>,
}

/// `publish FILE --to ADDR --session NAME (--token-file F | --token-env V) [--speed X]`:
/// sends the song as a recorder would, paced at X times the song's speed (0: as fast as possible), and resumes
/// after a lost connection.
pub fn publish(
    file: &Path,
    relay: &RelayAt<'_>,
    session: &str,
    token: &str,
    speed: f32,
    settings: Settings,
    key: Option<&Path>,
) -> Result<Outcome, Failure> {
    let parts = match key {
        None => stream_parts(file, settings)?,
        Some(key) => {
            // Signed as it is encoded (a `.bsors` is sent as it is: `sign` it first).
            let bytes = read_all(file)?;
            if super::is_stream(&bytes) {
                return Err(Failure(format!(
                    "{}: --key signs a .bsor; sign a stream with `bsor-stream sign`",
                    file.display()
                )));
            }
            let r = bsor::parse(&bytes).map_err(|e| Failure::from((file, e)))?;
            let signer = super::integrity::signer(key)?;
            let signed = bsor_stream::integrity::sign_replay(&r, settings, signer)
                .map_err(|e| Failure(e.to_string()))?;
            parts_of(signed, file, settings)?
        }
    };
    let mut target = target(relay.addr, relay.websocket, session, token)?;
    target.ca_file = relay.ca_file.map(Path::to_path_buf);
    runtime()?.block_on(publish_paced(target, parts, speed, Instant::now(), true))?;
    Ok(Outcome::Done)
}

fn target(
    addr: &str,
    websocket: bool,
    session: &str,
    token: &str,
) -> Result<publisher::Target, Failure> {
    Ok(publisher::Target {
        addr: addr.into(),
        websocket,
        ca_file: None,
        session: session.into(),
        token: token.into(),
        key: publisher::new_key().map_err(|e| Failure(format!("a publisher key: {e}")))?,
        // The whole file is in memory anyway.
        buffer_bytes: usize::MAX,
        spill: None,
        // Waits of 0.5, 1, 2, 4 and then 5 s; it gives up after 10 failed attempts and at
        // least 60 s, which a relay restarted on its archive folder is back within.
        retry_every: Duration::from_millis(500),
        max_retries: 10,
        retry_for: Duration::from_secs(60),
        finish_timeout: Duration::from_secs(10),
    })
}

/// What a publisher has done so far, for its progress lines (shared by the pacer, the
/// publisher's report hook and the line printer).
#[derive(Default)]
struct Sent {
    /// Chunks handed to the publisher (which sends them as its connection takes them), and
    /// their bytes.
    chunks: AtomicU64,
    bytes: AtomicU64,
    /// The song time of the last chunk handed over (`f32` bits).
    song_time: AtomicU32,
    /// Chunks the relay acknowledged.
    acked: AtomicU64,
    /// Connections after the first.
    reconnects: AtomicU64,
}

impl Sent {
    fn line(&self) -> String {
        format!(
            "song time {:7.2} s, {} chunks sent, {} acknowledged, {} reconnects",
            f32::from_bits(self.song_time.load(Relaxed)),
            self.chunks.load(Relaxed),
            self.acked.load(Relaxed),
            self.reconnects.load(Relaxed)
        )
    }
}

/// Hands the chunks to the library's publisher (which does the protocol, the acks and the
/// resumption) as a recorder would have them: each at its due song time, at `speed`, from
/// `start`. With `report`, a progress line goes to stderr every second and a summary at
/// the end.
async fn publish_paced(
    target: publisher::Target,
    parts: Parts,
    speed: f32,
    start: Instant,
    report: bool,
) -> Result<(), Failure> {
    let Parts {
        header,
        chunks,
        first_t,
    } = parts;
    let sent = Arc::new(Sent::default());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let pacing = sent.clone();
    let pacer = tokio::spawn(async move {
        for (t, chunk) in chunks {
            if speed > 0.0 && t.is_finite() {
                let due = start + Duration::from_secs_f32(((t - first_t) / speed).max(0.0));
                tokio::time::sleep_until(due.into()).await;
            }
            let len = chunk.len() as u64;
            if tx.send(publisher::Input::Chunk(chunk)).is_err() {
                return;
            }
            pacing.chunks.fetch_add(1, Relaxed);
            pacing.bytes.fetch_add(len, Relaxed);
            if t.is_finite() {
                pacing.song_time.store((t - first_t).to_bits(), Relaxed);
            }
        }
        let _ = tx.send(publisher::Input::Finished);
    });
    let printing = sent.clone();
    let printer = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.tick().await;
        loop {
            every.tick().await;
            if report {
                eprintln!("{}", printing.line());
            }
        }
    });
    let mut connections = 0u64;
    let progress = |p: publisher::Progress| match p {
        publisher::Progress::Lost(e) => eprintln!("bsor-stream: {e}; reconnecting"),
        publisher::Progress::Connected(_) => {
            connections += 1;
            sent.reconnects.store(connections - 1, Relaxed);
        }
        publisher::Progress::Acked(n) => sent.acked.store(n, Relaxed),
        _ => {}
    };
    let result = publisher::publish(target, header, rx, progress).await;
    pacer.abort();
    printer.abort();
    if report {
        eprintln!(
            "{}: {}; {} bytes in {:.1} s",
            if result.is_ok() {
                "published"
            } else {
                "not published"
            },
            sent.line(),
            sent.bytes.load(Relaxed),
            start.elapsed().as_secs_f64(),
        );
    }
    result.map_err(|e| Failure(e.to_string()))
}

/// The window over which `watch` estimates the publisher's pace, its frame rate and the
/// best-placed chunk, in seconds of the viewer's clock.
const WINDOW: f64 = 20.0;

/// Latency as `watch` measures it: how far behind the live edge a frame arrives, in seconds
/// of the viewer's clock. A viewer has no clock of the publisher's and does not know its
/// pace (`publish --speed 4` sends four seconds of song a second), so both are estimated
/// from the stream: the pace is the rate at which the song time of the chunks' last frames
/// grows over the last [`WINDOW`] seconds, and the live edge is the line at that pace
/// through the best-placed chunk of the window (its last frame counts as on time). A frame
/// arriving `x` seconds after that line is `x` late: about a flush interval for a chunk's
/// first frame, about 0 for its last, more when the network or the relay holds chunks back.
/// A delay that never changes cannot be seen this way (there is no common clock).
#[derive(Default)]
struct Latency {
    /// Each chunk's arrival and the song time of its last frame, oldest first, within the
    /// window.
    chunks: std::collections::VecDeque<(f64, f64)>,
    /// Frames that arrived within the window: (arrival, count).
    frames: std::collections::VecDeque<(f64, u64)>,
    /// Song seconds per second, as last estimated (1 until the window spans a second).
    pace: f64,
    /// The latest frame's latency, and the worst so far.
    last: f64,
    worst: f64,
}

impl Latency {
    /// A chunk that arrived at `now` (seconds on the viewer's clock) with frames at these
    /// song times.
    fn chunk(&mut self, now: f64, times: &[f32]) {
        let times: Vec<f64> = times
            .iter()
            .filter(|t| t.is_finite())
            .map(|&t| f64::from(t))
            .collect();
        let Some(&end) = times.last() else {
            return;
        };
        while self.chunks.front().is_some_and(|c| now - c.0 > WINDOW) {
            self.chunks.pop_front();
        }
        while self.frames.front().is_some_and(|f| now - f.0 > WINDOW) {
            self.frames.pop_front();
        }
        // The pace of the chunks before this one: a chunk held back is judged against the
        // pace of those that were not.
        let estimated = self.estimate_pace();
        self.pace = estimated.unwrap_or(1.0);
        self.chunks.push_back((now, end));
        self.frames.push_back((now, times.len() as u64));
        // The live edge: the best-placed chunk end of the window, at the pace.
        let lag = |(at, song): (f64, f64)| at - song / self.pace;
        let edge = self
            .chunks
            .iter()
            .map(|&c| lag(c))
            .fold(f64::INFINITY, f64::min);
        for t in times {
            self.last = (lag((now, t)) - edge).max(0.0);
            // Until the pace is known, the latency is a guess at 1x: not the worst.
            if estimated.is_some() {
                self.worst = self.worst.max(self.last);
            }
        }
    }

    /// The slope of song time against arrival over the window, from its first and last
    /// chunk; none until they are a second apart (or when the song time goes back).
    fn estimate_pace(&self) -> Option<f64> {
        match (self.chunks.front(), self.chunks.back()) {
            (Some(a), Some(b)) if b.0 - a.0 >= 1.0 && b.1 > a.1 => {
                Some(((b.1 - a.1) / (b.0 - a.0)).clamp(1e-3, 1e6))
            }
            _ => None,
        }
    }

    /// Frames received a second over the window.
    fn fps(&self) -> f64 {
        match (self.frames.front(), self.frames.back()) {
            (Some(a), Some(b)) if b.0 > a.0 => {
                let n: u64 = self.frames.iter().skip(1).map(|f| f.1).sum();
                n as f64 / (b.0 - a.0)
            }
            _ => 0.0,
        }
    }
}

/// What a viewer has decoded so far: the stream's bytes go in, frames' song times come out.
#[derive(Default)]
struct Viewing {
    d: StreamDecoder,
    frames: u64,
    bytes: u64,
    song_time: f32,
}

impl Viewing {
    /// Takes the header or a chunk; calls `frame` with each new frame's song time, and
    /// returns the song times of the frames it held.
    fn take(&mut self, b: &[u8], mut frame: impl FnMut(&Self, f32)) -> Vec<f32> {
        self.bytes += b.len() as u64;
        self.d.push(b);
        let mut times = Vec::new();
        while let Ok(Some(item)) = self.d.next_item() {
            if let StreamItem::Frame { frame: f, .. } = item {
                self.frames += 1;
                self.song_time = f.time;
                times.push(f.time);
                frame(self, f.time);
            }
        }
        times
    }

    /// The stream is over: what the decoder still holds.
    fn finish(&mut self) {
        self.d.finish();
        while let Ok(Some(_)) = self.d.next_item() {}
    }
}

/// Witness statements `watch -o` keeps at most (a checkpoint a second for a day).
const MAX_KEPT: usize = 100_000;

/// `watch ADDR --session NAME [--ws] [--tls --ca-file PEM] [--complete] [--wait S]
/// [-o OUT.bsors]`.
pub fn watch(
    relay: &RelayAt<'_>,
    session: &str,
    complete: bool,
    wait: f32,
    output: Option<&Path>,
) -> Result<Outcome, Failure> {
    let mut out = match output {
        Some(p) => Some(StreamWriter::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| (p, e))?,
        ))),
        None => None,
    };
    let complete = complete || output.is_some();
    let mode = if complete {
        ViewMode::Complete
    } else {
        ViewMode::Live
    };
    let wait_ms = (wait.max(0.0) * 1000.0).min(u32::MAX as f32) as u32;
    let subscription = Subscription {
        session: session.into(),
        mode,
        wait_ms,
    };
    let mut v = Viewing::default();
    let (mut skipped, mut ended) = (0u64, false);
    let mut latency = Latency::default();
    let clock = Instant::now();
    let mut last_print = clock;
    let mut failed: Option<Failure> = None;
    // The relay's witness statements (`integrity.md` §12), each once, in the order they
    // came: with -o, into its `.witness` sibling, as a relay's archive keeps them.
    let mut statements: Vec<bytes::Bytes> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let on = |e: ClientEvent| {
        match e {
            ClientEvent::Witness(w)
                if output.is_some() && statements.len() < MAX_KEPT && seen.insert(w.clone()) =>
            {
                statements.push(w);
            }
            ClientEvent::Header(b) | ClientEvent::Chunk(b) => {
                if let Some(Err(e)) = out.as_mut().map(|f| f.write(&b)) {
                    failed = Some(Failure(format!("writing: {e}")));
                    return ControlFlow::Break(());
                }
                let times = v.take(&b, |_, _| {});
                latency.chunk(clock.elapsed().as_secs_f64(), &times);
            }
            ClientEvent::Skipped { chunks, .. } => skipped += u64::from(chunks),
            ClientEvent::End(reason) => ended = reason == EndReason::Finished,
            ClientEvent::Lost(e) => eprintln!("bsor-stream: {e}; reconnecting"),
            _ => {}
        }
        if last_print.elapsed() > Duration::from_millis(500) {
            eprintln!(
                "song time {:7.2} s, {} frames ({:.0} fps, pace {:.1}x), {} bytes, latency {:4.0} ms (worst {:.0} ms), {skipped} chunks skipped",
                v.song_time,
                v.frames,
                latency.fps(),
                latency.pace,
                v.bytes,
                latency.last * 1000.0,
                latency.worst * 1000.0
            );
            last_print = Instant::now();
        }
        ControlFlow::Continue(())
    };
    let addr = relay.addr;
    let endpoint = viewer::Endpoint {
        addr: addr.into(),
        websocket: relay.websocket,
        tls: match relay.ca_file {
            Some(ca) => Some(tls::client_config(ca).map_err(|e| Failure(e.to_string()))?),
            None => None,
        },
    };
    let config = ClientConfig::default();
    let result = runtime()?.block_on(viewer::watch_at(&endpoint, subscription, config, on));
    if let Some(f) = failed {
        return Err(f);
    }
    result.map_err(|e| Failure(format!("{addr}: {e}")))?;
    v.finish();
    if let Some(f) = out {
        // A finished stream gets its footer, as the publisher's file has.
        f.finish(ended)
            .map_err(|e| Failure(format!("writing: {e}")))?;
    }
    if let (Some(p), false) = (output, statements.is_empty()) {
        let mut file = Vec::new();
        for w in &statements {
            file.extend_from_slice(&(w.len() as u32).to_le_bytes());
            file.extend_from_slice(w);
        }
        let path = p.with_extension("witness");
        std::fs::write(&path, file).map_err(|e| (path.as_path(), e))?;
    }
    eprintln!(
        "received {} frames, {} bytes, worst latency {:.0} ms, {skipped} chunks skipped; stream {}",
        v.frames,
        v.bytes,
        latency.worst * 1000.0,
        if ended { "ended" } else { "cut off" }
    );
    Ok(if ended && (!complete || skipped == 0) {
        Outcome::Done
    } else {
        Outcome::Partial
    })
}

/// `demo [FILE]`: a relay, a publisher and three viewers on 127.0.0.1 in one process, with a
/// synthetic replay when no file is given; prints the page's URL
/// (`open http://127.0.0.1:PORT/?session=demo`), what a viewer sees and the final sizes.
/// Run from a terminal, it then serves the page and the replay until Ctrl-C (see
/// [`linger`]); `exit` ends it with the song.
pub fn demo(file: Option<&Path>, speed: f32, exit: bool) -> Result<Outcome, Failure> {
    use bsor_stream::net::relay::{RelayConfig, Tokens};
    use bsor_stream::net::server::{Server, ServerConfig};
    use bsor_stream::stream::Profile;

    // The synthetic replay stays in memory: the demo leaves no file behind.
    let (path, bytes) = match file {
        Some(f) => (f.to_path_buf(), read_all(f)?),
        None => {
            let r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
                seed: 1,
                seconds: 20.0,
                fps: 90,
            });
            let bytes = bsor::to_vec(&r).map_err(|e| Failure(e.to_string()))?;
            (Path::new("a synthetic 20 s replay").to_path_buf(), bytes)
        }
    };
    let bsor_bytes = bytes.len() as u64;
    let settings = Settings::live(Profile::Lossless);
    let parts = parts_of(bytes, &path, settings)?;
    let first_t = parts.first_t;
    let stream_bytes = parts.header.len() + parts.chunks.iter().map(|c| c.1.len()).sum::<usize>();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Failure(format!("127.0.0.1:0: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Failure(e.to_string()))?
            .to_string();
        let web = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Failure(format!("127.0.0.1:0: {e}")))?;
        let web_addr = web.local_addr().map_err(|e| Failure(e.to_string()))?;
        println!(
            "relay listening on {addr}; publishing {} at {speed}x to 3 viewers",
            path.display()
        );
        println!("open http://{web_addr}/?session=demo");
        // The demo's archive, so that the page can replay the song after it ends; removed
        // when the demo exits.
        let archive = demo_archive()?;
        let config = ServerConfig {
            archive: Some(archive.path().to_path_buf()),
            ..ServerConfig::default()
        };
        let relay = Server::new(RelayConfig::default(), Tokens::parse("demo-token"), config)
            .map_err(|e| Failure(e.to_string()))?;
        let server = tokio::spawn(tcp::serve(listener, relay.clone()));
        let page = tokio::spawn(ws::serve_site(
            web,
            relay.clone(),
            ws::WsOptions::default(),
            crate::assets::web(),
        ));
        // The viewers connect first; the song starts a moment later.
        let start = Instant::now() + Duration::from_millis(200);
        let mut viewers = Vec::new();
        for n in 0..3 {
            let addr = addr.clone();
            viewers.push(tokio::spawn(demo_viewer(addr, n, start, first_t, speed)));
        }
        tokio::time::sleep_until(start.into()).await;
        let target = target(&addr, false, "demo", "demo-token")?;
        publish_paced(target, parts, speed, start, false).await?;
        for (i, v) in viewers.into_iter().enumerate() {
            let (frames, bytes, worst) = v.await.map_err(|e| Failure(e.to_string()))??;
            println!(
                "viewer {}: {frames} frames, {bytes} bytes, worst latency {worst:.0} ms",
                i + 1
            );
        }
        println!(
            "sizes: BSOR {bsor_bytes} bytes, stream {stream_bytes} bytes ({:.1}%)",
            100.0 * stream_bytes as f64 / bsor_bytes.max(1) as f64
        );
        if !exit && linger() {
            println!(
                "the song ended; open http://{web_addr}/?replay=demo to replay it; Ctrl-C stops"
            );
            let _ = tokio::signal::ctrl_c().await;
        }
        server.abort();
        page.abort();
        let _ = relay.shutdown();
        drop(archive);
        Ok(Outcome::Done)
    })
}

/// Whether `demo` keeps serving after the song: when a person runs it (standard input is
/// a terminal) and `BSOR_DEMO_EXIT` is not set, so that there is time to open the page.
fn linger() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("BSOR_DEMO_EXIT").is_none() && std::io::stdin().is_terminal()
}

/// The demo's archive folder in the system's temporary folder (a name nobody can guess or
/// take first), removed when dropped.
fn demo_archive() -> Result<tempfile::TempDir, Failure> {
    tempfile::Builder::new()
        .prefix("bsor-stream-demo-")
        .tempdir()
        .map_err(|e| Failure(format!("{}: {e}", std::env::temp_dir().display())))
}

/// One of the demo's viewers: frames, bytes and the worst latency against when the publisher
/// had each frame (viewer 1 also prints its progress every second).
async fn demo_viewer(
    addr: String,
    n: usize,
    start: Instant,
    first_t: f32,
    speed: f32,
) -> Result<(u64, u64, f64), Failure> {
    let sub = Subscription {
        session: "demo".into(),
        mode: ViewMode::Live,
        wait_ms: 10_000,
    };
    let mut v = Viewing::default();
    let (mut worst_ms, mut last) = (0f64, Instant::now());
    let on = |e: ClientEvent| {
        let (ClientEvent::Header(b) | ClientEvent::Chunk(b)) = e else {
            return ControlFlow::Continue(());
        };
        v.take(&b, |v, time| {
            let due = ((time - first_t) / speed.max(1e-3)).max(0.0);
            let secs = Instant::now().saturating_duration_since(start).as_secs_f64();
            let late = secs - f64::from(due);
            worst_ms = worst_ms.max(late * 1000.0);
            if n == 0 && last.elapsed() > Duration::from_secs(1) {
                let secs = secs.max(1e-3);
                println!(
                    "viewer 1: song time {time:6.2} s, {} frames ({:.0} fps), {:.1} kB/s on the wire, latency {:.0} ms",
                    v.frames,
                    v.frames as f64 / secs,
                    v.bytes as f64 / secs / 1000.0,
                    late * 1000.0
                );
                last = Instant::now();
            }
        });
        ControlFlow::Continue(())
    };
    viewer::watch(&addr, false, sub, ClientConfig::default(), on)
        .await
        .map_err(|e| Failure(format!("viewer {}: {e}", n + 1)))?;
    Ok((v.frames, v.bytes, worst_ms))
}

#[cfg(test)]
mod tests {
    use super::Latency;

    /// Chunks of `flush` song seconds at 90 fps, each arriving when its last frame is
    /// captured at `speed`, plus `delay(k)` for chunk k: the latencies of each chunk's last
    /// frame.
    fn run(
        speed: f64,
        flush: f64,
        chunks: usize,
        delay: impl Fn(usize) -> f64,
    ) -> (Latency, Vec<f64>) {
        let mut l = Latency::default();
        let mut lasts = Vec::new();
        let per = (flush * 90.0).round() as usize;
        for k in 0..chunks {
            let times: Vec<f32> = (0..per)
                .map(|i| ((k * per + i) as f64 / 90.0) as f32)
                .collect();
            let end = f64::from(*times.last().unwrap());
            l.chunk(end / speed + delay(k), &times);
            lasts.push(l.last);
        }
        (l, lasts)
    }

    #[test]
    fn latency_is_measured_at_the_publishers_pace_whatever_it_is() {
        for speed in [0.5, 1.0, 4.0, 16.0] {
            // On time: a chunk's last frame is at the edge; its first a flush interval (of
            // the viewer's clock) behind it.
            let (l, lasts) = run(speed, 0.5, 400, |_| 0.0);
            assert!(
                (l.pace - speed).abs() < 1e-6 * speed,
                "{speed}: pace {}",
                l.pace
            );
            assert!(lasts[40..].iter().all(|&x| x < 1e-6), "{speed}: {lasts:?}");
            let first_frame = (0.5 - 1.0 / 90.0) / speed;
            assert!(
                (l.worst - first_frame).abs() < 1e-3,
                "{speed}: worst {}",
                l.worst
            );
            // 90 frames of song a second, at the pace.
            assert!(
                (l.fps() - 90.0 * speed).abs() < 1.0,
                "{speed}: {} fps",
                l.fps()
            );
            // One chunk held back 300 ms (after the pace is known) is 300 ms late.
            let (_, lasts) = run(speed, 0.5, 400, |k| if k == 300 { 0.3 } else { 0.0 });
            assert!((lasts[300] - 0.3).abs() < 1e-3, "{speed}: {}", lasts[300]);
            assert!(lasts[301] < 1e-6, "{speed}: {}", lasts[301]);
        }
    }
}

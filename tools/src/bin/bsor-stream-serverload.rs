//! `bsor-stream-serverload`: load on the replay server (`bsor-stream serve --store`) over
//! HTTP on 127.0.0.1, bounded in count and time. Reports uploads a second alone, BSOR
//! downloads a second alone (spread over every uploaded ID, in a shuffled order, never
//! cached here), a mixed load at fixed rates (20 uploads and 80 downloads a second by
//! default) at p50 and p99, events requests a second with the bytes they read, and the
//! server's resident memory (peak, from `/proc/PID/status`), also while BSOR downloads
//! of one replay are held open at once (its memory per download in flight).
//!
//! The server is the `bsor-stream` binary beside this one, started here in its own process
//! with a store in a temporary folder (the embedded default; `--store` and `--index` pass
//! another) and no cap on connections per address (`--max-per-address 0`), or given with `--server ADDR` (and `--server-pid PID` for its memory). Every
//! upload is a distinct synthetic replay (`synth` with its own seed, generated in memory
//! before the timed part of its phase). Latencies of the mixed load are measured from when
//! each request was due, so a server that falls behind shows it.
//!
//! Targets on the project's 2-core machine: alone 60 uploads/s and 200 downloads/s; mixed
//! p99 under 250 ms; memory under 300 MB. The exit code is 0 when all are met.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsor_stream::integrity::fingerprint::eval::percentile;
use bsor_stream::server::client::Method;
use bsor_stream::server::client::{Conn, Reply};
use bsor_stream::{bsor, synth};
use bsor_stream_tools::bench::{
    exit_code, memory_kb, sample_memory, user_binary, Failure, TempDir,
};
use bytes::Bytes;

/// Load on a replay server over 127.0.0.1: uploads, downloads, a mixed load, events.
#[derive(clap::Parser, Debug)]
#[command(name = "bsor-stream-serverload", version)]
pub struct Args {
    /// A running server's HTTP address (127.0.0.1 only); by default one is started here.
    #[arg(long)]
    server: Option<SocketAddr>,
    /// The process id of the server given with --server, to read its memory.
    #[arg(long, requires = "server")]
    server_pid: Option<u32>,
    /// The upload token the server given with --server binds to the synthetic player
    /// (`player:76561190000000000:TOKEN` in its token file).
    #[arg(long, default_value = "serverload-upload")]
    token: String,
    /// The store of the server started here (`serve --store`); default a temporary folder.
    #[arg(long, conflicts_with = "server")]
    store: Option<String>,
    /// The index of the server started here (`serve --index`); default the store's SQLite.
    #[arg(long, conflicts_with = "server")]
    index: Option<String>,
    /// Replays uploaded in the uploads-alone phase; the downloads spread over all of them.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=5000))]
    uploads: u32,
    /// Downloads in the downloads-alone phase.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    downloads: u32,
    /// Events requests in the events phase.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    events: u32,
    /// Seconds of the mixed load.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=120))]
    mixed_seconds: u32,
    /// Uploads a second in the mixed load.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=500))]
    mixed_uploads: u32,
    /// Downloads a second in the mixed load.
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u32).range(0..=2000))]
    mixed_downloads: u32,
    /// BSOR downloads of one replay held open at once in the last phase: each reads the
    /// reply's head and a few kB, waits while the server's resident memory is sampled,
    /// then reads the rest. At most 60: all come from 127.0.0.1, and the server takes 64
    /// connections from one address.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=60))]
    held_downloads: u32,
    /// Requests in flight at once in the phases alone (one connection each).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    concurrency: u32,
    /// Seconds of each synthetic replay (90 frames a second).
    #[arg(long, default_value_t = 240.0)]
    seconds: f32,
    /// The first seed; replay k has seed + k.
    #[arg(long, default_value_t = 1000)]
    seed: u64,
    /// The whole run stops with an error past this many seconds.
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=3600))]
    max_seconds: u64,
}

/// The player every synthetic replay is recorded by (`synth`'s).
const PLAYER: &str = "76561190000000000";
/// Each request gives up after this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Uploads generated at once before they are sent (about 2 MB each at 240 s).
const BATCH: usize = 100;

/// The checks made on the arguments beyond their ranges: the server is on this machine,
/// the song length is sane.
pub fn check(args: &Args) -> Result<(), Failure> {
    if let Some(a) = args.server {
        if !a.ip().is_loopback() {
            return Err(Failure(format!(
                "--server {a}: only a server on this machine (127.0.0.0/8, ::1) may be loaded"
            )));
        }
    }
    if !(1.0..=3600.0).contains(&args.seconds) {
        return Err(Failure(format!(
            "--seconds {}: a replay of 1 to 3600 seconds",
            args.seconds
        )));
    }
    Ok(())
}

/// The server started here: ended on drop, before its folder.
struct Server {
    child: Child,
    _stdout: Option<BufReader<std::process::ChildStdout>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(args: &Args, dir: &TempDir) -> Result<(Server, SocketAddr), Failure> {
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("serverload-publisher\nplayer:{PLAYER}:{}\n", args.token),
    )
    .map_err(|e| (tokens.as_path(), e))?;
    let server_exe = user_binary()?;
    let store = match &args.store {
        Some(s) => s.clone(),
        None => dir.path().join("store").display().to_string(),
    };
    let mut command = Command::new(&server_exe);
    command
        .args(["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"])
        .arg("--token-file")
        .arg(&tokens)
        .args(["--store", &store])
        // Every client here is 127.0.0.1 standing for many players: the per-address cap
        // (64 by default) would refuse the mixed load's connections once a slow store
        // holds more than 64 open, which is not what this measures; likewise the replay
        // server's caps and byte pace per address (its caps in all stay).
        .args(["--max-per-address", "0", "--no-address-caps"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(index) = &args.index {
        command.args(["--index", index]);
    }
    let mut child = command
        .spawn()
        .map_err(|e| Failure(format!("starting {}: {e}", server_exe.display())))?;
    let mut stdout = child.stdout.take().map(BufReader::new);
    let mut line = String::new();
    if let Some(out) = &mut stdout {
        let _ = out.read_line(&mut line);
    }
    let server = Server {
        child,
        _stdout: stdout,
    };
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ws="))
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| Failure(format!("the server said {line:?}, not its ws= address")))?;
    Ok((server, addr))
}

/// A distinct synthetic replay as BSOR bytes.
fn replay(args: &Args, k: u64) -> Result<Bytes, Failure> {
    let r = synth::replay(synth::Settings {
        seed: args.seed + k,
        seconds: args.seconds,
        fps: 90,
    });
    bsor::to_vec(&r)
        .map(Bytes::from)
        .map_err(|e| Failure(format!("writing synthetic replay {k}: {e}")))
}

/// Figures of one phase.
#[derive(Default)]
struct Tally {
    latencies_ms: Vec<f64>,
    bytes: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    fn merge(&mut self, o: Tally) {
        self.latencies_ms.extend(o.latencies_ms);
        self.bytes += o.bytes;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
    }

    fn p(&mut self) -> (f64, f64) {
        self.latencies_ms.sort_by(f64::total_cmp);
        (
            percentile(&self.latencies_ms, 50.0),
            percentile(&self.latencies_ms, 99.0),
        )
    }

    fn errors_text(&self) -> String {
        match &self.first_error {
            Some(e) => format!("{} errors (first: {e})", self.errors),
            None => "0 errors".into(),
        }
    }
}

/// The `id` of an upload's JSON answer.
fn upload_id(reply: &Reply) -> Result<String, String> {
    if reply.status != 201 {
        return Err(format!(
            "upload answered {}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body[..reply.body.len().min(200)])
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("upload answer: {e}"))?;
    let id = v["id"].as_str().ok_or("upload answer without an id")?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("upload answered the id {id:?}"));
    }
    Ok(id.to_owned())
}

/// Sends `bodies` as uploads, `concurrency` at a time; the IDs in order and the figures.
async fn upload_all(
    addr: SocketAddr,
    token: &str,
    bodies: Vec<Bytes>,
    concurrency: usize,
) -> (Vec<String>, Tally) {
    let queue = Arc::new(std::sync::Mutex::new(
        bodies.into_iter().enumerate().collect::<Vec<_>>(),
    ));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let queue = queue.clone();
        let token = token.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::new(addr.to_string(), REQUEST_TIMEOUT);
            let mut tally = Tally::default();
            let mut ids = Vec::new();
            loop {
                let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                let Some((k, body)) = next else { break };
                let t = Instant::now();
                let sent = body.len() as u64;
                match conn
                    .request(
                        Method::POST,
                        "/replays",
                        Some(&token),
                        "application/octet-stream",
                        body,
                    )
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| upload_id(&r))
                {
                    Ok(id) => {
                        tally.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
                        tally.bytes += sent;
                        ids.push((k, id));
                    }
                    Err(e) => tally.error(e),
                }
            }
            (ids, tally)
        }));
    }
    let mut ids = Vec::new();
    let mut tally = Tally::default();
    for t in tasks {
        if let Ok((i, tl)) = t.await {
            ids.extend(i);
            tally.merge(tl);
        }
    }
    ids.sort();
    (ids.into_iter().map(|(_, id)| id).collect(), tally)
}

/// GETs `paths`, `concurrency` at a time.
async fn get_all(addr: SocketAddr, paths: Vec<String>, concurrency: usize) -> Tally {
    let queue = Arc::new(std::sync::Mutex::new(paths));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::new(addr.to_string(), REQUEST_TIMEOUT);
            let mut tally = Tally::default();
            loop {
                let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                let Some(path) = next else { break };
                let t = Instant::now();
                match conn
                    .request(Method::GET, &path, None, "", Bytes::new())
                    .await
                {
                    Ok(r) if r.status == 200 => {
                        tally.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
                        tally.bytes += r.body.len() as u64;
                    }
                    Ok(r) => tally.error(format!("GET {path} answered {}", r.status)),
                    Err(e) => tally.error(e.to_string()),
                }
            }
            tally
        }));
    }
    let mut tally = Tally::default();
    for t in tasks {
        if let Ok(tl) = t.await {
            tally.merge(tl);
        }
    }
    tally
}

/// A deterministic shuffle (xorshift), so that runs compare.
fn shuffled<T>(mut v: Vec<T>, seed: u64) -> Vec<T> {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// `n` download paths cycling over every ID, each pass in a new order.
fn spread(ids: &[String], n: usize, seed: u64, suffix: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let mut pass = 0;
    while out.len() < n && !ids.is_empty() {
        for id in shuffled(ids.to_vec(), seed + pass) {
            if out.len() == n {
                break;
            }
            out.push(format!("/replays/{id}{suffix}"));
        }
        pass += 1;
    }
    out
}

/// The bytes a process has read (`rchar` of `/proc/PID/io`: files and sockets).
fn read_chars(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
}

fn rate(n: usize, secs: f64) -> f64 {
    n as f64 / secs.max(1e-9)
}

fn run(args: &Args) -> Result<bool, Failure> {
    check(args)?;
    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    let over = |phase: &str| -> Result<(), Failure> {
        if Instant::now() > deadline {
            Err(Failure(format!(
                "past --max-seconds {} before {phase}",
                args.max_seconds
            )))
        } else {
            Ok(())
        }
    };
    let dir = TempDir::new("bsor-stream-serverload")?;
    let (server, addr, pid) = match args.server {
        Some(a) => (None, a, args.server_pid),
        None => {
            let (s, a) = start_server(args, &dir)?;
            let pid = s.child.id();
            (Some(s), a, Some(pid))
        }
    };
    println!(
        "== replay server {addr}{}: {} s synthetic replays, {} uploads, {} downloads, {} \
         events requests, {} in flight",
        if server.is_some() {
            " (started here)"
        } else {
            ""
        },
        args.seconds,
        args.uploads,
        args.downloads,
        args.events,
        args.concurrency
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("tokio runtime: {e}")))?;
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let _in_runtime = rt.enter();
        pid.map(|p| sample_memory(p, peak.clone()))
    };
    let c = args.concurrency as usize;
    let mut ok = true;

    // Uploads alone, in batches generated before they are timed.
    let mut ids = Vec::new();
    let mut up = Tally::default();
    let mut up_secs = 0.0;
    let mut k = 0u64;
    while (k as usize) < args.uploads as usize {
        over("the uploads")?;
        let n = BATCH.min(args.uploads as usize - k as usize);
        let bodies = (0..n as u64)
            .map(|j| replay(args, k + j))
            .collect::<Result<Vec<_>, _>>()?;
        k += n as u64;
        let t = Instant::now();
        let (batch_ids, tally) = rt.block_on(upload_all(addr, &args.token, bodies, c));
        up_secs += t.elapsed().as_secs_f64();
        ids.extend(batch_ids);
        up.merge(tally);
    }
    let (p50, p99) = up.p();
    let up_rate = rate(up.latencies_ms.len(), up_secs);
    println!(
        "uploads alone: {} in {up_secs:.1} s = {up_rate:.1}/s (p50 {p50:.0} ms, p99 {p99:.0} \
         ms), {:.1} MB sent, {}",
        up.latencies_ms.len(),
        up.bytes as f64 / 1e6,
        up.errors_text()
    );
    if ids.is_empty() {
        return Err(Failure(
            "no upload was accepted: nothing to download".into(),
        ));
    }

    // Downloads alone, over every ID.
    over("the downloads")?;
    let paths = spread(&ids, args.downloads as usize, args.seed, "");
    let t = Instant::now();
    let mut down = rt.block_on(get_all(addr, paths, c));
    let down_secs = t.elapsed().as_secs_f64();
    let (p50, p99) = down.p();
    let down_rate = rate(down.latencies_ms.len(), down_secs);
    println!(
        "downloads alone: {} over {} ids in {down_secs:.1} s = {down_rate:.1}/s (p50 {p50:.0} \
         ms, p99 {p99:.0} ms), {:.1} MB received, {}",
        down.latencies_ms.len(),
        ids.len(),
        down.bytes as f64 / 1e6,
        down.errors_text()
    );

    // The mixed load: each request starts when it is due, on its own connection.
    over("the mixed load")?;
    let n_up = (args.mixed_uploads * args.mixed_seconds) as u64;
    let bodies = (0..n_up)
        .map(|j| replay(args, k + j))
        .collect::<Result<Vec<_>, _>>()?;
    let n_down = (args.mixed_downloads * args.mixed_seconds) as usize;
    let paths = spread(&ids, n_down, args.seed + 7, "");
    let (mut mixed_up, mut mixed_down, late) = rt.block_on(mixed(args, addr, bodies, paths));
    let (u50, u99) = mixed_up.p();
    let (d50, d99) = mixed_down.p();
    let mut all = Tally::default();
    all.latencies_ms.extend(&mixed_up.latencies_ms);
    all.latencies_ms.extend(&mixed_down.latencies_ms);
    let (a50, a99) = all.p();
    println!(
        "mixed: {} uploads/s + {} downloads/s for {} s: uploads p50 {u50:.0} ms p99 {u99:.0} ms, \
         downloads p50 {d50:.0} ms p99 {d99:.0} ms, all p50 {a50:.0} ms p99 {a99:.0} ms, \
         {late} started late, uploads {}, downloads {}",
        args.mixed_uploads,
        args.mixed_downloads,
        args.mixed_seconds,
        mixed_up.errors_text(),
        mixed_down.errors_text()
    );

    // Events.
    over("the events")?;
    let paths = spread(&ids, args.events as usize, args.seed + 11, "/events");
    let before = pid.and_then(read_chars);
    let t = Instant::now();
    let mut ev = rt.block_on(get_all(addr, paths, c));
    let ev_secs = t.elapsed().as_secs_f64();
    let after = pid.and_then(read_chars);
    let (p50, p99) = ev.p();
    let n_ev = ev.latencies_ms.len();
    let ev_rate = rate(n_ev, ev_secs);
    let read = match (before, after) {
        (Some(b), Some(a)) if n_ev > 0 => format!(
            "server read {:.1} kB per request (rchar: store and sockets)",
            (a.saturating_sub(b)) as f64 / n_ev as f64 / 1e3
        ),
        _ => "server reads unknown (no --server-pid)".into(),
    };
    println!(
        "events: {n_ev} in {ev_secs:.1} s = {ev_rate:.1}/s (p50 {p50:.1} ms, p99 {p99:.1} ms), \
         {:.1} kB per answer, {read}, {}",
        ev.bytes as f64 / n_ev.max(1) as f64 / 1e3,
        ev.errors_text()
    );

    // Downloads held open at once: the server's memory per download in flight.
    let mut held_errors = 0;
    if args.held_downloads > 0 {
        over("the held downloads")?;
        let before = pid.and_then(memory_kb).map(|(rss, _)| rss);
        let during = Arc::new(AtomicU64::new(0));
        let sampler = {
            let _in_runtime = rt.enter();
            pid.map(|p| sample_memory(p, during.clone()))
        };
        let path = format!("/replays/{}", ids[0]);
        let n = args.held_downloads as usize;
        let results = rt.block_on(held(addr, &path, n));
        if let Some(s) = sampler {
            s.abort();
        }
        let whole = results.iter().filter(|r| r.is_ok()).count();
        held_errors = (n - whole) as u64;
        let first_error = results.iter().find_map(|r| r.as_ref().err());
        let size = results.iter().find_map(|r| r.as_ref().ok()).copied();
        let mem = match (before, during.load(Ordering::Relaxed)) {
            (Some(b), p) if p > 0 => format!(
                "server resident {:.1} MB before, peak {:.1} MB while held (+{:.1} MB, {:.0} kB \
                 per download)",
                b as f64 / 1024.0,
                p as f64 / 1024.0,
                p.saturating_sub(b) as f64 / 1024.0,
                p.saturating_sub(b) as f64 / n as f64
            ),
            _ => "server memory unknown (no --server-pid)".into(),
        };
        println!(
            "held downloads: {n} of one {:.1} MB BSOR at once, {whole} whole, {mem}{}",
            size.unwrap_or(0) as f64 / 1e6,
            first_error.map_or(String::new(), |e| format!(", first error: {e}"))
        );
    }

    let mem = pid.and_then(memory_kb);
    let sampled = peak.load(Ordering::Relaxed);
    let peak_mb = mem.map(|(_, hwm)| hwm.max(sampled) as f64 / 1024.0);
    match (mem, peak_mb) {
        (Some((rss, _)), Some(p)) => println!(
            "server memory: peak {p:.0} MB (VmHWM), now {:.0} MB",
            rss as f64 / 1024.0
        ),
        _ => println!("server memory: unknown (no --server-pid)"),
    }
    let errors =
        up.errors + down.errors + mixed_up.errors + mixed_down.errors + ev.errors + held_errors;
    let targets = [
        ("uploads >= 60/s", up_rate >= 60.0),
        ("downloads >= 200/s", down_rate >= 200.0),
        ("mixed p99 < 250 ms", a99 < 250.0),
        ("memory < 300 MB", peak_mb.is_some_and(|p| p < 300.0)),
        ("no errors", errors == 0),
    ];
    let verdicts: Vec<String> = targets
        .iter()
        .map(|(name, met)| format!("{name} {}", if *met { "met" } else { "MISSED" }))
        .collect();
    println!("targets: {}", verdicts.join(", "));
    ok &= targets.iter().all(|(_, met)| *met);
    if let Some(s) = sampler {
        s.abort();
    }
    drop(rt);
    drop(server);
    drop(dir);
    Ok(ok)
}

/// `n` GETs of `path`, each on its own connection with a small receive buffer: every one
/// reads the reply's head and its first bytes, then all wait (the server holds `n`
/// downloads in flight) for 1.5 s, then each reads the rest. The body's length of each, or
/// what went wrong.
async fn held(addr: SocketAddr, path: &str, n: usize) -> Vec<Result<usize, String>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let started = Arc::new(tokio::sync::Barrier::new(n + 1));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let started = started.clone();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        tasks.push(tokio::spawn(async move {
            let run = async {
                let sock = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
                let _ = sock.set_recv_buffer_size(16 << 10);
                let mut s = sock.connect(addr).await.map_err(|e| e.to_string())?;
                s.write_all(req.as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                let mut buf = vec![0u8; 16 << 10];
                let mut got = Vec::new();
                let end = loop {
                    let k = s.read(&mut buf).await.map_err(|e| e.to_string())?;
                    if k == 0 {
                        return Err("closed before the head".to_string());
                    }
                    got.extend_from_slice(&buf[..k]);
                    if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or("no content-length")?;
                if !head.starts_with("http/1.1 200") {
                    return Err(head.lines().next().unwrap_or("").to_string());
                }
                Ok::<_, String>((s, got.len() - end, len))
            };
            let r = tokio::time::timeout(REQUEST_TIMEOUT, run).await;
            started.wait().await;
            let (mut s, mut have, len) = r.map_err(|_| "no head in time".to_string())??;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let mut buf = vec![0u8; 64 << 10];
            let rest = async {
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) => return Ok(()),
                        Ok(k) => have += k,
                        Err(e) => return Err(e.to_string()),
                    }
                }
            };
            tokio::time::timeout(REQUEST_TIMEOUT, rest)
                .await
                .map_err(|_| "the body took too long".to_string())??;
            if have != len {
                return Err(format!("{have} of {len} bytes"));
            }
            Ok(len)
        }));
    }
    started.wait().await;
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
    }
    out
}

/// The mixed load: uploads and downloads at their rates, each started when due (on a
/// fresh connection, as independent clients would); the latency counts from when it was
/// due. Returns the uploads', the downloads' figures, and how many started over 10 ms late.
async fn mixed(
    args: &Args,
    addr: SocketAddr,
    bodies: Vec<Bytes>,
    paths: Vec<String>,
) -> (Tally, Tally, usize) {
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let secs = f64::from(args.mixed_seconds);
    let mut tasks = Vec::new();
    let n_up = bodies.len();
    for (i, body) in bodies.into_iter().enumerate() {
        let due = start + Duration::from_secs_f64(secs * i as f64 / n_up as f64);
        let token = args.token.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            let late = due.elapsed() > Duration::from_millis(10);
            let r = Conn::new(addr.to_string(), REQUEST_TIMEOUT)
                .request(
                    Method::POST,
                    "/replays",
                    Some(&token),
                    "application/octet-stream",
                    body,
                )
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| upload_id(&r).map(|_| ()));
            (true, due.elapsed(), r, late)
        }));
    }
    let n_down = paths.len();
    for (i, path) in paths.into_iter().enumerate() {
        let due = start + Duration::from_secs_f64(secs * i as f64 / n_down as f64);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            let late = due.elapsed() > Duration::from_millis(10);
            let r = match Conn::new(addr.to_string(), REQUEST_TIMEOUT)
                .request(Method::GET, &path, None, "", Bytes::new())
                .await
            {
                Ok(r) if r.status == 200 => Ok(()),
                Ok(r) => Err(format!("GET {path} answered {}", r.status)),
                Err(e) => Err(e.to_string()),
            };
            (false, due.elapsed(), r, late)
        }));
    }
    let (mut up, mut down, mut late_n) = (Tally::default(), Tally::default(), 0);
    for t in tasks {
        let Ok((is_up, took, r, late)) = t.await else {
            continue;
        };
        late_n += usize::from(late);
        let tally = if is_up { &mut up } else { &mut down };
        match r {
            Ok(()) => tally.latencies_ms.push(took.as_secs_f64() * 1e3),
            Err(e) => tally.error(e),
        }
    }
    (up, down, late_n)
}

fn main() -> std::process::ExitCode {
    let args = <Args as clap::Parser>::parse();
    exit_code("bsor-stream-serverload", run(&args))
}

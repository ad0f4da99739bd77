//! The relay's HTTP through the library (`proto-spec/http.md`), on 127.0.0.1 with assets
//! the test supplies: the page and its headers, conditional requests, keep-alive, the
//! per-address cap, the idle timeout, and the WebSocket on the same port.

use std::time::Duration;

use bsor_stream_core::net::relay::{RelayConfig, Tokens};
use bsor_stream_core::net::wire::DEFAULT_MAX_FRAME;
use bsor_stream_relay::http::{rules, Assets};
use bsor_stream_relay::server::{Server, ServerConfig};
use bsor_stream_relay::ws;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(30);

/// A reply: status, headers (names lowercase), body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one reply from `sock` (`head`: a reply to HEAD, with no body).
async fn read_reply(sock: &mut TcpStream, head: bool) -> Reply {
    let mut buf = Vec::new();
    let mut piece = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut piece))
            .await
            .expect("a reply within 5 s")
            .unwrap();
        assert!(n > 0, "closed before a reply: {buf:?}");
        buf.extend_from_slice(&piece[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let want = if head || status == 304 { 0 } else { len };
    let mut body = buf[end..].to_vec();
    while body.len() < want {
        let n = sock.read(&mut piece).await.unwrap();
        assert!(n > 0, "closed inside a body");
        body.extend_from_slice(&piece[..n]);
    }
    Reply {
        status,
        headers,
        body,
    }
}

async fn request(sock: &mut TcpStream, method: &str, path: &str, extra: &str) -> Reply {
    let req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n");
    sock.write_all(req.as_bytes()).await.unwrap();
    read_reply(sock, method == "HEAD").await
}

/// A new connection to `addr` that sends a request and is closed before any reply.
async fn closed_at_once(addr: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("closed within 5 s");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    c
}

async fn relay(config: RelayConfig, assets: Assets) -> String {
    relay_with(config, ServerConfig::default(), assets).await
}

async fn relay_with(config: RelayConfig, shell: ServerConfig, assets: Assets) -> String {
    let server = Server::new(config, Tokens::parse("tok\n"), shell).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(ws::serve_site(l, server, ws::WsOptions::default(), assets));
    addr
}

fn page() -> Assets {
    Assets::new([
        (
            "index.html",
            Bytes::from_static(b"<!doctype html><p>player</p>"),
        ),
        ("app.js", Bytes::from_static(b"export const x = 1;\n")),
        ("decoder.wasm", Bytes::from_static(b"\0asm\x01\0\0\0")),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_from_memory_with_its_policy_on_one_connection() {
    tokio::time::timeout(LIMIT, async {
        let addr = relay(RelayConfig::default(), page()).await;
        let mut sock = TcpStream::connect(&addr).await.unwrap();
        // Several requests on one kept-alive connection.
        let index = request(&mut sock, "GET", "/", "").await;
        assert_eq!(index.status, 200);
        assert_eq!(index.body, b"<!doctype html><p>player</p>");
        assert_eq!(
            index.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(index.header("content-security-policy"), Some(rules::CSP));
        assert_eq!(index.header("x-content-type-options"), Some("nosniff"));
        let js = request(&mut sock, "GET", "/app.js", "").await;
        assert_eq!(js.status, 200);
        assert_eq!(js.header("content-type"), Some("text/javascript"));
        assert_eq!(js.header("content-security-policy"), Some(rules::CSP));
        let wasm = request(&mut sock, "HEAD", "/decoder.wasm", "").await;
        assert_eq!(wasm.status, 200);
        assert_eq!(wasm.header("content-type"), Some("application/wasm"));
        assert_eq!(wasm.header("content-length"), Some("8"));
        assert!(wasm.body.is_empty());
        // The entity tag makes a second load a 304.
        let tag = js.header("etag").unwrap().to_string();
        let again = request(
            &mut sock,
            "GET",
            "/app.js",
            &format!("If-None-Match: {tag}\r\n"),
        )
        .await;
        assert_eq!(again.status, 304);
        assert!(again.body.is_empty());
        assert_eq!(
            request(&mut sock, "GET", "/missing.js", "").await.status,
            404
        );
        assert_eq!(
            request(&mut sock, "GET", "/..%2fCargo.toml", "")
                .await
                .status,
            400
        );
        let list = request(&mut sock, "GET", "/sessions", "").await;
        assert_eq!(list.status, 200);
        assert_eq!(list.body, b"{\"sessions\":[]}");
        let head = request(&mut sock, "HEAD", "/sessions", "").await;
        let len = list.body.len().to_string();
        assert_eq!(head.header("content-length"), Some(len.as_str()));
        // No archive: no replay.
        assert_eq!(
            request(&mut sock, "GET", "/replays/x.bsors", "")
                .await
                .status,
            404
        );
        let post = request(&mut sock, "POST", "/", "Content-Length: 0\r\n").await;
        assert_eq!(post.status, 405);
        assert_eq!(post.header("allow"), Some("GET, HEAD"));
        // The WebSocket on the same port, as before.
        let (mut tx, mut rx) = ws::connect(&addr, DEFAULT_MAX_FRAME).await.unwrap();
        use bsor_stream_core::net::wire::{Message, Role};
        use futures_util::{SinkExt, StreamExt};
        tx.send(Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Viewer,
            agent: "http test".into(),
        })
        .await
        .unwrap();
        let welcome = tokio::time::timeout(Duration::from_secs(5), rx.next())
            .await
            .unwrap();
        assert!(
            matches!(welcome, Some(Ok(Message::Hello { .. }))),
            "{welcome:?}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped_per_address_and_idle_ones_closed() {
    tokio::time::timeout(LIMIT, async {
        let config = RelayConfig {
            connections_per_address: 2,
            handshake_timeout_ms: 300,
            ..RelayConfig::default()
        };
        let addr = relay(config, page()).await;
        let mut a = TcpStream::connect(&addr).await.unwrap();
        let mut b = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(request(&mut a, "GET", "/", "").await.status, 200);
        assert_eq!(request(&mut b, "GET", "/", "").await.status, 200);
        // A third from the same address is closed before any reply.
        let c = closed_at_once(&addr).await;
        let mut buf = [0u8; 64];
        // Idle between requests past the handshake timeout: closed.
        let n = tokio::time::timeout(Duration::from_secs(5), a.read(&mut buf))
            .await
            .expect("closed within 5 s");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        drop((a, b, c));
        // The slots are given back.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut d = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(request(&mut d, "GET", "/", "").await.status, 200);
        // A request head that never ends is closed too (slowloris).
        let mut slow = TcpStream::connect(&addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if slow.write_all(b"X-A: b\r\n").await.is_err() {
                    return 0;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                let mut buf = [0u8; 256];
                match tokio::time::timeout(Duration::from_millis(1), slow.read(&mut buf)).await {
                    Ok(Ok(n)) => return n,
                    Ok(Err(_)) => return 0,
                    Err(_) => {}
                }
            }
        })
        .await
        .expect("the slow request is cut within 5 s");
        let _ = n;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connections_are_capped_over_all_addresses() {
    tokio::time::timeout(LIMIT, async {
        // No cap per address: only the cap over all addresses applies.
        let config = RelayConfig {
            connections_per_address: 0,
            ..RelayConfig::default()
        };
        let shell = ServerConfig {
            max_handshakes: 2,
            ..ServerConfig::default()
        };
        let addr = relay_with(config, shell, page()).await;
        let mut a = TcpStream::connect(&addr).await.unwrap();
        let mut b = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(request(&mut a, "GET", "/", "").await.status, 200);
        assert_eq!(request(&mut b, "GET", "/", "").await.status, 200);
        // A third is closed before any reply.
        closed_at_once(&addr).await;
        // One of the two goes: its place is given back.
        drop(a);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut d = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(request(&mut d, "GET", "/", "").await.status, 200);
        assert_eq!(request(&mut b, "GET", "/", "").await.status, 200);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_request_head_is_refused_not_buffered() {
    tokio::time::timeout(LIMIT, async {
        let addr = relay(RelayConfig::default(), page()).await;
        let mut sock = TcpStream::connect(&addr).await.unwrap();
        let big = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 << 10)
        );
        // The relay stops reading at its gate; whatever it answers, it is not a 200.
        let _ = tokio::time::timeout(Duration::from_secs(2), sock.write_all(big.as_bytes())).await;
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut reply)).await;
        let text = String::from_utf8_lossy(&reply);
        assert!(!text.starts_with("HTTP/1.1 200"), "{text}");
        // And the relay still serves others.
        let mut ok = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(request(&mut ok, "GET", "/", "").await.status, 200);
    })
    .await
    .unwrap();
}

/// `GET /maps/HASH.zip` from a folder: the hash in any case, ranges and the ETag as for
/// archived replays, a missing map `404`, a bad hash or a way out of the folder `400`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maps_are_served_from_their_folder_by_hash_with_ranges() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let maps = dir.path().join("maps");
        std::fs::create_dir(&maps).unwrap();
        let hash = "0123456789abcdef0123456789abcdef01234567";
        let upper = "89ABCDEF0123456789ABCDEF0123456789ABCDEF";
        let zip: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(maps.join(format!("{hash}.zip")), &zip).unwrap();
        std::fs::write(maps.join(format!("{upper}.zip")), b"PK upper").unwrap();
        // A file beside the folder that a traversal would reach.
        std::fs::write(dir.path().join("secret.zip"), b"secret").unwrap();
        let addr = relay(RelayConfig::default(), page().with_maps(&maps)).await;
        let mut sock = TcpStream::connect(&addr).await.unwrap();

        let whole = request(&mut sock, "GET", &format!("/maps/{hash}.zip"), "").await;
        assert_eq!(whole.status, 200);
        assert_eq!(whole.body, zip);
        assert_eq!(whole.header("content-type"), Some("application/zip"));
        assert_eq!(whole.header("accept-ranges"), Some("bytes"));
        let tag = whole.header("etag").unwrap().to_string();
        assert!(tag.starts_with('"'), "{tag}");
        // The hash in uppercase names the same file, and a file named in uppercase is found
        // by a lowercase hash.
        let shouted = hash.to_ascii_uppercase();
        let same = request(&mut sock, "GET", &format!("/maps/{shouted}.zip"), "").await;
        assert_eq!(same.status, 200);
        assert_eq!(same.body, zip);
        let lower = upper.to_ascii_lowercase();
        let found = request(&mut sock, "GET", &format!("/maps/{lower}.zip"), "").await;
        assert_eq!(
            (found.status, found.body.as_slice()),
            (200, &b"PK upper"[..])
        );

        // Ranges: a middle, a suffix, an open end, beyond the end.
        let part = request(
            &mut sock,
            "GET",
            &format!("/maps/{hash}.zip"),
            "Range: bytes=100-199\r\n",
        )
        .await;
        assert_eq!(part.status, 206);
        assert_eq!(part.body, &zip[100..200]);
        assert_eq!(part.header("content-range"), Some("bytes 100-199/5000"));
        let tail = request(
            &mut sock,
            "GET",
            &format!("/maps/{hash}.zip"),
            "Range: bytes=-22\r\n",
        )
        .await;
        assert_eq!(tail.status, 206);
        assert_eq!(tail.body, &zip[4978..]);
        let open = request(
            &mut sock,
            "GET",
            &format!("/maps/{hash}.zip"),
            "Range: bytes=4990-\r\n",
        )
        .await;
        assert_eq!((open.status, open.body.as_slice()), (206, &zip[4990..]));
        let past = request(
            &mut sock,
            "GET",
            &format!("/maps/{hash}.zip"),
            "Range: bytes=5000-\r\n",
        )
        .await;
        assert_eq!(past.status, 416);
        assert_eq!(past.header("content-range"), Some("bytes */5000"));
        // The ETag: a 304, and an If-Range that no longer holds gives the whole file.
        let again = request(
            &mut sock,
            "GET",
            &format!("/maps/{hash}.zip"),
            &format!("If-None-Match: {tag}\r\n"),
        )
        .await;
        assert_eq!(again.status, 304);
        let stale = request(
            &mut sock,
            "GET",
            &format!("/maps/{hash}.zip"),
            "Range: bytes=0-9\r\nIf-Range: \"other\"\r\n",
        )
        .await;
        assert_eq!((stale.status, stale.body.len()), (200, zip.len()));
        let head = request(&mut sock, "HEAD", &format!("/maps/{hash}.zip"), "").await;
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-length"), Some("5000"));
        assert!(head.body.is_empty());

        // A missing map.
        let missing = "f".repeat(40);
        let r = request(&mut sock, "GET", &format!("/maps/{missing}.zip"), "").await;
        assert_eq!(r.status, 404);
        // Bad hashes and ways out of the folder name nothing.
        for bad in [
            "/maps/secret.zip".to_string(),
            "/maps/../secret.zip".to_string(),
            "/maps/..%2fsecret.zip".to_string(),
            format!("/maps/{}.zip", &hash[..39]),
            format!("/maps/{hash}a.zip"),
            format!("/maps/{}z.zip", &hash[..39]),
            format!("/maps/{hash}"),
            format!("/maps/%2e%2e%2f{}.zip", &hash[9..]),
        ] {
            let r = request(&mut sock, "GET", &bad, "").await;
            assert_eq!(r.status, 400, "{bad}");
            assert_ne!(r.body, b"secret");
        }
    })
    .await
    .unwrap();
}

/// A relay given no maps folder answers `404` for every map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_maps_folder_no_map_is_served() {
    tokio::time::timeout(LIMIT, async {
        let addr = relay(RelayConfig::default(), page()).await;
        let mut sock = TcpStream::connect(&addr).await.unwrap();
        let path = format!("/maps/{}.zip", "a".repeat(40));
        assert_eq!(request(&mut sock, "GET", &path, "").await.status, 404);
    })
    .await
    .unwrap();
}

/// A mirror on 127.0.0.1 answering `GET /zips/HASH.zip` from `maps` (else `404`), counting
/// the requests; a hash in `huge` gets a body over the relay's bound.
async fn mirror(
    maps: std::collections::HashMap<String, Vec<u8>>,
    huge: String,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let maps = std::sync::Arc::new(maps);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let maps = maps.clone();
            let seen = seen.clone();
            let huge = huge.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut piece = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut piece).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&piece[..n]),
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let head = String::from_utf8_lossy(&buf).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                let name = path
                    .strip_prefix("/zips/")
                    .and_then(|p| p.strip_suffix(".zip"));
                if name == Some(huge.as_str()) {
                    let len = bsor_stream_relay::http::mirror::MAX_MAP + 1;
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
                    let _ = s.write_all(head.as_bytes()).await;
                    return;
                }
                match name.and_then(|n| maps.get(n)) {
                    Some(body) => {
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        let _ = s.write_all(head.as_bytes()).await;
                        let _ = s.write_all(body).await;
                    }
                    None => {
                        let _ = s
                            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                            .await;
                    }
                }
            });
        }
    });
    (addr, count)
}

/// `--map-url`: a map not in the folder is fetched from the mirror once, kept in the folder
/// and served from there; one the mirror lacks is a `404`; one over the bound a `502`, with
/// nothing kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maps_missing_from_the_folder_are_fetched_from_the_mirror_once() {
    use bsor_stream_relay::http::mirror::Mirror;
    use std::sync::atomic::Ordering;
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let hash = "00112233445566778899aabbccddeeff00112233";
        let huge = "ffffffffffffffffffffffffffffffffffffffff";
        let zip: Vec<u8> = (0..40_000u32).map(|i| (i % 253) as u8).collect();
        let (at, count) = mirror(
            [(hash.to_string(), zip.clone())].into_iter().collect(),
            huge.to_string(),
        )
        .await;
        let m = Mirror::new(&format!("http://{at}/zips/{{hash}}.zip"), None).unwrap();
        let addr = relay(
            RelayConfig::default(),
            page().with_maps(dir.path()).with_map_mirror(m),
        )
        .await;
        let mut sock = TcpStream::connect(&addr).await.unwrap();
        let upper = hash.to_ascii_uppercase();
        let r = request(&mut sock, "GET", &format!("/maps/{upper}.zip"), "").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, zip);
        assert_eq!(std::fs::read(Mirror::kept(dir.path(), hash)).unwrap(), zip);
        let part = request(
            &mut sock,
            "GET",
            &format!("/maps/{hash}.zip"),
            "Range: bytes=5-9\r\n",
        )
        .await;
        assert_eq!((part.status, part.body.as_slice()), (206, &zip[5..10]));
        assert_eq!(count.load(Ordering::SeqCst), 1, "fetched once");
        let none = format!("/maps/{}.zip", "1".repeat(40));
        assert_eq!(request(&mut sock, "GET", &none, "").await.status, 404);
        let big = request(&mut sock, "GET", &format!("/maps/{huge}.zip"), "").await;
        assert_eq!(big.status, 502);
        let left: Vec<_> = std::fs::read_dir(dir.path().join(".mirror"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec![format!("{hash}.zip")], "nothing else kept");
        let operators: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(operators, vec![".mirror"], "fetched maps kept apart");
        // Bad templates are refused.
        for bad in [
            "ftp://x/{hash}",
            "http://x/nohash",
            "https://x/{hash}.zip",
            "http:///{hash}",
        ] {
            assert!(Mirror::new(bad, None).is_err(), "{bad}");
        }
    })
    .await
    .unwrap();
}

/// A client asking for map after map cannot fill the relay's disk: fetched maps are kept up
/// to the cache's limit, the oldest removed first (and fetched again when asked for), while
/// the operator's own maps are never removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_maps_are_kept_within_the_cache_limit() {
    use bsor_stream_relay::http::mirror::Mirror;
    use std::sync::atomic::Ordering;
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let hashes: Vec<String> = (0..5u8).map(|i| format!("{i:x}").repeat(40)).collect();
        let zip = |i: usize| vec![i as u8; 10_000];
        let (at, count) = mirror(
            hashes
                .iter()
                .enumerate()
                .map(|(i, h)| (h.clone(), zip(i)))
                .collect(),
            "f".repeat(40),
        )
        .await;
        // The operator's own map, bigger than the limit: served, never counted or removed.
        let own = "abcdefabcdefabcdefabcdefabcdefabcdefabcd";
        std::fs::write(dir.path().join(format!("{own}.zip")), vec![7u8; 50_000]).unwrap();
        let m = Mirror::new(&format!("http://{at}/zips/{{hash}}.zip"), None)
            .unwrap()
            .with_cache_limit(25_000);
        let addr = relay(
            RelayConfig::default(),
            page().with_maps(dir.path()).with_map_mirror(m),
        )
        .await;
        let mut sock = TcpStream::connect(&addr).await.unwrap();
        for (i, h) in hashes.iter().enumerate() {
            let r = request(&mut sock, "GET", &format!("/maps/{h}.zip"), "").await;
            assert_eq!((r.status, r.body), (200, zip(i)), "map {i}");
            let mut kept: Vec<String> = std::fs::read_dir(dir.path().join(".mirror"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            kept.sort();
            let mut want: Vec<String> = hashes[i.saturating_sub(1)..=i]
                .iter()
                .map(|h| format!("{h}.zip"))
                .collect();
            want.sort();
            assert_eq!(kept, want, "after map {i}: the two newest (20 KB of 25 KB)");
        }
        assert_eq!(count.load(Ordering::SeqCst), 5);
        // The first was removed: asked again, it is fetched again.
        let r = request(&mut sock, "GET", &format!("/maps/{}.zip", hashes[0]), "").await;
        assert_eq!((r.status, r.body), (200, zip(0)));
        assert_eq!(count.load(Ordering::SeqCst), 6);
        let r = request(&mut sock, "GET", &format!("/maps/{own}.zip"), "").await;
        assert_eq!((r.status, r.body.len()), (200, 50_000));
        assert!(dir.path().join(format!("{own}.zip")).exists());
        assert_eq!(
            count.load(Ordering::SeqCst),
            6,
            "the operator's map is not fetched"
        );
    })
    .await
    .unwrap();
}

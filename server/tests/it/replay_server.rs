//! The replay server (`proto-spec/http.md` §7) on 127.0.0.1, with a temporary store
//! directory and its embedded SQLite index: uploads and their refusals, downloads
//! (byte-identical BSOR, `.bsors`, JSON, ranges, entity tags), events read by ranges that
//! touch no frame chunk, spans, deletes, search pages, and what an upload interrupted at
//! each step leaves.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bsor_stream_core::bsor::{self, BsorString};
use bsor_stream_core::stream::{split_stream, ChunkSpan, ChunkType, Profile, Settings};
use bsor_stream_core::transcode;
use bsor_stream_server::{
    self as server, plan, Config, Fault, Index, ReplayServer, Store, Uploaders,
};

use crate::replay_http;
use replay_http::*;

async fn open(dir: &std::path::Path, config: Config, tokens: &str) -> Arc<ReplayServer> {
    let store = Store::directory(&dir.join("store")).unwrap().logging();
    let url = format!("sqlite://{}", dir.join("index.sqlite").display());
    let index = Index::open(&url).await.unwrap();
    ReplayServer::new(store, index, config, Uploaders::parse(tokens))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_comes_back_byte_for_byte_in_every_form() {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let replay = play(1, 30.0, "p1");
    let bsor_bytes = bsor::to_vec(&replay).unwrap();

    let r = upload(addr, "tok1", &bsor_bytes).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    let id = j["id"].as_str().unwrap().to_string();
    assert!(plan::is_id(&id));
    assert_eq!(j["format"], "lossless");
    assert_eq!(j["player"], "p1");
    assert_eq!(j["bsorBytes"], bsor_bytes.len() as u64);
    let stored = j["storedBytes"].as_u64().unwrap();
    assert!(stored > 0 && stored < bsor_bytes.len() as u64, "{stored}");
    assert_eq!(j["fingerprint"].as_str().unwrap().len(), 64);
    assert_eq!(r.header("location"), Some(&*format!("/replays/{id}")));

    // The same file again, as gzip this time: the same ID, 200.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&bsor_bytes).unwrap();
    let gz = gz.finish().unwrap();
    let auth = "Bearer tok1";
    let again = request(
        addr,
        "POST",
        "/replays",
        &[("Authorization", auth), ("Content-Encoding", "gzip")],
        &gz,
    )
    .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["id"], id.as_str());

    let path = format!("/replays/{id}");
    let got = request(addr, "GET", &path, &[], b"").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));
    assert!(got.body == bsor_bytes, "the BSOR served back differs");
    let etag = got.header("etag").unwrap().to_string();

    let not_modified = request(addr, "GET", &path, &[("If-None-Match", &etag)], b"").await;
    assert_eq!(not_modified.status, 304);
    assert!(not_modified.body.is_empty());

    let part = request(addr, "GET", &path, &[("Range", "bytes=100-199")], b"").await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, bsor_bytes[100..200]);
    assert_eq!(
        part.header("content-range"),
        Some(&*format!("bytes 100-199/{}", bsor_bytes.len()))
    );

    let head = request(addr, "HEAD", &path, &[], b"").await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(&*bsor_bytes.len().to_string())
    );
    assert!(head.body.is_empty());

    let bsors = request(addr, "GET", &format!("{path}?format=bsors"), &[], b"").await;
    assert_eq!(bsors.status, 200);
    assert_eq!(bsors.header("content-type"), Some("application/x-bsors"));
    assert_eq!(bsors.body.len() as u64, stored);
    let (back, rec) = transcode::decode_replay(&bsors.body).unwrap();
    assert!(rec.complete);
    assert_eq!(bsor::to_vec(&back).unwrap(), bsor_bytes);
    let tail = request(
        addr,
        "GET",
        &path,
        &[("Accept", "application/x-bsors"), ("Range", "bytes=-16")],
        b"",
    )
    .await;
    assert_eq!(tail.status, 206);
    assert_eq!(tail.body, bsors.body[bsors.body.len() - 16..]);

    let json = request(addr, "GET", &path, &[("Accept", "application/json")], b"").await;
    assert_eq!(json.status, 200);
    // Written as it is made: no length before, no ranges, and exactly the replay's JSON.
    assert_eq!(json.header("transfer-encoding"), Some("chunked"));
    assert_eq!(json.header("accept-ranges"), Some("none"));
    assert!(
        json.body == serde_json::to_vec(&replay).unwrap(),
        "the JSON differs"
    );
    let j = json.json();
    assert_eq!(j["frames"].as_array().unwrap().len(), replay.frames.len());
    assert_eq!(j["notes"].as_array().unwrap().len(), replay.notes.len());
    // A range of an export is not served: the whole export, 200.
    let ranged = request(
        addr,
        "GET",
        &format!("{path}?format=json"),
        &[("Range", "bytes=0-0")],
        b"",
    )
    .await;
    assert_eq!(ranged.status, 200);
    assert!(ranged.body == json.body);
    // A HEAD of an export reads nothing of the stored stream.
    let reads = srv.store.reads();
    let head = request(addr, "HEAD", &format!("{path}?format=json"), &[], b"").await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("accept-ranges"), Some("none"));
    assert!(head.body.is_empty());
    assert_eq!(
        srv.store.reads().requests,
        reads.requests,
        "a HEAD read the store"
    );

    let bad = request(addr, "GET", &format!("{path}?format=exe"), &[], b"").await;
    assert_refusal(&bad, 400, "bad-query");
    let missing = request(
        addr,
        "GET",
        "/replays/0123456789abcdef0123456789abcdef",
        &[],
        b"",
    )
    .await;
    assert_refusal(&missing, 404, "not-found");
    let traversal = request(addr, "GET", "/replays/..%2findex.sqlite", &[], b"").await;
    assert_refusal(&traversal, 404, "not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_replays_come_back_byte_identical() {
    let dir = std::env::var("BSOR_CORPUS").unwrap_or_else(|_| "../shared/corpus".into());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipping: no corpus at {dir} (set BSOR_CORPUS)");
        return;
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "bsor"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let mut tokens = String::new();
    let mut plays = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let bytes = std::fs::read(f).unwrap();
        let r = bsor::parse(&bytes).unwrap();
        tokens.push_str(&format!(
            "player:{}:t{i}\n",
            r.info.player_id.to_string_lossy()
        ));
        plays.push((f, bytes, format!("t{i}")));
    }
    let srv = open(tmp.path(), Config::default(), &tokens).await;
    let addr = listen(srv).await;
    for (f, bytes, token) in plays {
        let r = upload(addr, &token, &bytes).await;
        assert_eq!(
            r.status,
            201,
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&r.body)
        );
        let id = r.json()["id"].as_str().unwrap().to_string();
        let got = request(addr, "GET", &format!("/replays/{id}"), &[], b"").await;
        assert!(
            got.body == bytes,
            "{}: the BSOR served back differs",
            f.display()
        );
        // A range is cut from the BSOR rebuilt whole: the same bytes.
        let whole = request(
            addr,
            "GET",
            &format!("/replays/{id}"),
            &[("Range", "bytes=0-")],
            b"",
        )
        .await;
        assert_eq!(whole.status, 206);
        assert!(
            whole.body == bytes,
            "{}: the BSOR rebuilt whole differs",
            f.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_say_why_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_body: 1 << 20,
        max_inflated: 2 << 20,
        ..Config::default()
    };
    let srv = open(dir.path(), config, TOKENS).await;
    let addr = listen(srv.clone()).await;
    let good = bsor::to_vec(&play(2, 10.0, "p1")).unwrap();

    let none = request(addr, "POST", "/replays", &[], &good).await;
    assert_refusal(&none, 401, "unauthorized");
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    assert_refusal(&upload(addr, "nope", &good).await, 401, "unauthorized");
    assert_refusal(&upload(addr, "publisher", &good).await, 401, "unauthorized");
    // Player p2's token, player p1's replay: refused, nothing stored.
    assert_refusal(&upload(addr, "tok2", &good).await, 403, "wrong-player");
    assert_refusal(&upload(addr, "root", &good).await, 403, "wrong-player");
    assert_refusal(
        &upload(addr, "tok1", b"GIF89a....").await,
        400,
        "unknown-format",
    );
    assert_refusal(
        &upload(addr, "tok1", &good[..good.len() / 2]).await,
        400,
        "unparsable",
    );
    let mut few = play(3, 10.0, "p1");
    few.frames.truncate(3);
    let few = bsor::to_vec(&few).unwrap();
    assert_refusal(&upload(addr, "tok1", &few).await, 400, "invalid-replay");
    let mut back = play(4, 10.0, "p1");
    back.frames[10].time = back.frames[9].time - 1.0;
    let back = bsor::to_vec(&back).unwrap();
    assert_refusal(&upload(addr, "tok1", &back).await, 400, "invalid-replay");

    // Over the body limit by Content-Length: refused before the body is read.
    let big = vec![0u8; (1 << 20) + 1];
    assert_refusal(&upload(addr, "tok1", &big).await, 413, "too-large");
    // A gzip bomb: 1 KiB that inflates past the limit, stopped there.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; 64 << 20]).unwrap();
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 1 << 20);
    let r = request(
        addr,
        "POST",
        "/replays",
        &[
            ("Authorization", "Bearer tok1"),
            ("Content-Encoding", "gzip"),
        ],
        &bomb,
    )
    .await;
    assert_refusal(&r, 413, "too-large");
    let r = request(
        addr,
        "POST",
        "/replays",
        &[("Authorization", "Bearer tok1"), ("Content-Encoding", "br")],
        &good,
    )
    .await;
    assert_refusal(&r, 415, "unsupported-encoding");
    assert_refusal(
        &request(addr, "PUT", "/replays", &[], b"").await,
        405,
        "method-not-allowed",
    );
    // Nothing refused was stored or indexed.
    assert!(srv.index.blobs(100).await.unwrap().is_empty());
    assert_eq!(upload(addr, "tok1", &good).await.status, 201);
}

/// Refused copies are kept for review only up to the player's quota: past it the upload is
/// still refused, its reason says it was not kept, and nothing more is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_copies_count_against_the_players_quota() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        review_quota: 2,
        ..Config::default()
    };
    let srv = open(dir.path(), config, TOKENS).await;
    let addr = listen(srv.clone()).await;
    let first = play(6, 10.0, "p1");
    assert_eq!(
        upload(addr, "tok1", &bsor::to_vec(&first).unwrap())
            .await
            .status,
        201
    );
    for n in 0..4 {
        let mut stolen = first.clone();
        stolen.info.player_id = BsorString::new("p2");
        // Other bytes each time (another name), the same play.
        stolen.info.player_name = BsorString::new(&format!("thief {n}"));
        let r = upload(addr, "tok2", &bsor::to_vec(&stolen).unwrap()).await;
        assert_refusal(&r, 409, "same-play");
        let reason = r.json()["reason"].as_str().unwrap().to_string();
        if n < 2 {
            assert!(reason.ends_with("kept for review"), "{reason}");
        } else {
            assert!(reason.contains("not kept for review"), "{reason}");
        }
    }
    assert_eq!(srv.index.reviews(100).await.unwrap().len(), 2);
    assert_eq!(srv.index.blobs(100).await.unwrap().len(), 3);
    // The quota is the player's: another player's copies are still kept.
    let mut other = first.clone();
    other.info.player_id = BsorString::new("p3");
    let srv3 = srv.clone();
    srv3.set_uploaders(Uploaders::parse(&format!("{TOKENS}player:p3:tok3\n")));
    let r = upload(addr, "tok3", &bsor::to_vec(&other).unwrap()).await;
    assert_refusal(&r, 409, "same-play");
    assert_eq!(srv.index.reviews(100).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_play_under_another_player_is_kept_for_review() {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let first = play(5, 10.0, "p1");
    let r = upload(addr, "tok1", &bsor::to_vec(&first).unwrap()).await;
    assert_eq!(r.status, 201);
    let owner = r.json()["id"].as_str().unwrap().to_string();
    let mut stolen = first.clone();
    stolen.info.player_id = BsorString::new("p2");
    stolen.info.player_name = BsorString::new("thief");
    let r = upload(addr, "tok2", &bsor::to_vec(&stolen).unwrap()).await;
    assert_refusal(&r, 409, "same-play");
    assert!(r.json()["reason"].as_str().unwrap().contains(&owner));
    // Refused again: still one review.
    let r = upload(addr, "tok2", &bsor::to_vec(&stolen).unwrap()).await;
    assert_eq!(r.status, 409);
    let list = request(
        addr,
        "GET",
        "/reviews",
        &[("Authorization", "Bearer root")],
        b"",
    )
    .await;
    assert_eq!(list.status, 200);
    let reviews = list.json()["reviews"].as_array().unwrap().clone();
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["owner"], owner.as_str());
    assert_eq!(reviews[0]["player"], "p2");
    assert_eq!(reviews[0]["state"], "pending");
    let forbidden = request(
        addr,
        "GET",
        "/reviews",
        &[("Authorization", "Bearer tok1")],
        b"",
    )
    .await;
    assert_refusal(&forbidden, 403, "not-admin");
    // The kept copy is in the store; the search lists only the owner's replay.
    let blobs = srv.index.blobs(10).await.unwrap();
    assert_eq!(blobs.len(), 2);
    for b in &blobs {
        assert!(srv.store.exists(b).await.unwrap(), "{b}");
    }
    let all = request(addr, "GET", "/replays", &[], b"").await.json();
    assert_eq!(all["replays"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_read_by_ranges_that_touch_no_frame_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let replay = play(6, 60.0, "p1");
    let r = upload(addr, "tok1", &bsor::to_vec(&replay).unwrap()).await;
    let id = r.json()["id"].as_str().unwrap().to_string();
    let record = srv.index.get(&id).await.unwrap().unwrap();
    let stream = srv.stream(&record).await.unwrap();
    let before = srv.store.ranges().len();
    let got = request(addr, "GET", &format!("/replays/{id}/events"), &[], b"").await;
    assert_eq!(got.status, 200);
    let j = got.json();
    let expected = transcode::read_events(&mut std::io::Cursor::new(&stream))
        .unwrap()
        .unwrap()
        .1;
    let want = serde_json::json!({
        "notes": expected.notes.records,
        "walls": expected.walls.records,
        "heights": expected.heights.records,
        "pauses": expected.pauses.records,
    });
    // Compared as the text a client reads (f32 values go through their shortest form).
    let want: serde_json::Value = serde_json::from_str(&want.to_string()).unwrap();
    assert!(j == want, "the events differ from read_events'");
    assert_eq!(j["notes"].as_array().unwrap().len(), replay.notes.len());
    let ranges: Vec<_> = srv.store.ranges()[before..].to_vec();
    let (_, _, spans) = split_stream(&stream).unwrap();
    let frame_spans: Vec<(u64, u64)> = spans
        .iter()
        .filter(|s| {
            let kind = ChunkType::from_byte(stream[s.offset + 1]);
            matches!(kind, ChunkType::Keyframes | ChunkType::Frames)
        })
        .map(|s| (s.offset as u64, (s.offset + s.len) as u64))
        .collect();
    assert!(frame_spans.len() >= 5, "{} frame chunks", frame_spans.len());
    let mut read = 0;
    for (key, range) in &ranges {
        assert_eq!(key, &record.blob);
        read += range.end - range.start;
        for (a, b) in &frame_spans {
            assert!(
                range.end <= *a || range.start >= *b,
                "read {range:?} overlaps the frame chunk {a}..{b}"
            );
        }
    }
    assert!(
        read * 10 < stream.len() as u64,
        "read {read} of {}",
        stream.len()
    );
    // The events go out as they are written (no length known before), and a HEAD reads
    // nothing of the store.
    assert_eq!(got.header("content-length"), None);
    let reads = srv.store.reads();
    let head = request(addr, "HEAD", &format!("/replays/{id}/events"), &[], b"").await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        srv.store.reads().requests,
        reads.requests,
        "a HEAD of the events read the store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bsor_download_reads_the_stream_group_by_group() {
    let dir = tempfile::tempdir().unwrap();
    // Reads of at most 8 KiB of frames (but whole groups): the default, 256 KiB, would
    // read this 2-minute stream in one or two.
    let config = Config {
        download_span: 8 << 10,
        ..Config::default()
    };
    let srv = open(dir.path(), config, TOKENS).await;
    let addr = listen(srv.clone()).await;
    let bytes = bsor::to_vec(&play(8, 120.0, "p1")).unwrap();
    let record = created(&srv, &bytes, "p1").await;
    let stream = srv.stream(&record).await.unwrap();
    let before = srv.store.ranges().len();
    let got = request(addr, "GET", &format!("/replays/{}", record.id), &[], b"").await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("content-length"),
        Some(&*bytes.len().to_string())
    );
    assert!(got.body == bytes, "the BSOR served back differs");
    // No read takes more than a small part of the stream: it went out group by group.
    let ranges: Vec<_> = srv.store.ranges()[before..].to_vec();
    let largest = ranges.iter().map(|(_, r)| r.end - r.start).max().unwrap();
    let read: u64 = ranges.iter().map(|(_, r)| r.end - r.start).sum();
    assert!(ranges.len() > 10, "{} reads", ranges.len());
    assert!(
        largest * 8 < stream.len() as u64,
        "a read of {largest} bytes of {}",
        stream.len()
    );
    assert!(read >= stream.len() as u64 / 2, "read {read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bsor_range_rebuilds_only_the_groups_that_cover_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        download_span: 8 << 10,
        ..Config::default()
    };
    let srv = open(dir.path(), config, TOKENS).await;
    let addr = listen(srv.clone()).await;
    let bytes = bsor::to_vec(&play(11, 120.0, "p1")).unwrap();
    let record = created(&srv, &bytes, "p1").await;
    let stream_len = srv.stream(&record).await.unwrap().len() as u64;
    let path = format!("/replays/{}", record.id);
    let n = bytes.len() as u64;
    let head_len = {
        let mut h = Vec::new();
        let r = bsor::parse(&bytes).unwrap();
        bsor::write_head(&r.info, r.frames.len(), &mut h).unwrap();
        h.len() as u64
    };
    let frames_end = n - {
        let r = bsor::parse(&bytes).unwrap();
        let mut t = Vec::new();
        bsor::write_tail(&r, &mut t).unwrap();
        t.len() as u64
    };
    // (range, the most of the stored stream its reads may take, in eighths)
    let mid = head_len + (frames_end - head_len) / 2;
    let cases = [
        (format!("bytes=0-{}", head_len - 1), 1),
        (format!("bytes={mid}-{}", mid + 500), 1),
        (format!("bytes={}-{}", head_len - 10, head_len + 92 * 3), 1),
        (format!("bytes={}-", n - 200), 4),
        ("bytes=-1".to_string(), 4),
        (format!("bytes={}-{}", frames_end - 92, frames_end + 10), 5),
        ("bytes=0-".to_string(), 9),
    ];
    for (range, eighths) in cases {
        let before = srv.store.ranges().len();
        let got = request(addr, "GET", &path, &[("Range", &range)], b"").await;
        assert_eq!(got.status, 206, "{range}");
        let (first, last) = {
            let spec = got.header("content-range").unwrap();
            let spec = spec.strip_prefix("bytes ").unwrap();
            let (span, total) = spec.split_once('/').unwrap();
            assert_eq!(total.parse::<u64>().unwrap(), n);
            let (a, b) = span.split_once('-').unwrap();
            (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap())
        };
        assert!(got.body == bytes[first..=last], "{range}: the bytes differ");
        let read: u64 = srv.store.ranges()[before..]
            .iter()
            .map(|(_, r)| r.end - r.start)
            .sum();
        assert!(
            read * 8 <= stream_len * eighths,
            "{range}: read {read} bytes of a {stream_len}-byte stream"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_bsor_range_is_the_same_bytes_as_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        download_span: 4 << 10,
        ..Config::default()
    };
    let srv = open(dir.path(), config, TOKENS).await;
    let mut plays = vec![bsor::to_vec(&play(12, 40.0, "p1")).unwrap()];
    let corpus = std::env::var("BSOR_CORPUS").unwrap_or_else(|_| "../shared/corpus".into());
    match std::fs::read(std::path::Path::new(&corpus).join("mgp-preview.bsor")) {
        Ok(b) => plays.push(b),
        Err(_) => println!("NOTICE: corpus not found at {corpus}: synthetic ranges only"),
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for bytes in plays {
        let player = bsor::parse(&bytes)
            .unwrap()
            .info
            .player_id
            .to_string_lossy();
        let srv = if player == "p1" {
            srv.clone()
        } else {
            let d = dir.path().join(&player);
            std::fs::create_dir_all(&d).unwrap();
            open(
                &d,
                Config {
                    download_span: 4 << 10,
                    ..Config::default()
                },
                &format!("player:{player}:t"),
            )
            .await
        };
        let record = created(&srv, &bytes, &player).await;
        let n = bytes.len() as u64;
        for _ in 0..60 {
            let first = next(n);
            // Short ranges mostly, some to the end.
            let last = match next(4) {
                0 => n - 1,
                1 => (first + next(200_000)).min(n - 1),
                _ => (first + next(400)).min(n - 1),
            };
            let mut dl = srv
                .bsor_download(&record, Some((first, last)))
                .await
                .unwrap();
            let mut got = Vec::new();
            while let Some(piece) = dl.next_piece().await {
                got.extend_from_slice(&piece.unwrap());
            }
            assert!(
                got == bytes[first as usize..=last as usize],
                "{player}: bytes {first}-{last} of {n} differ"
            );
        }
    }
}

/// A 90 s play uploaded, a byte near the end of the stored chunk `pick` chooses flipped, and
/// its BSOR downloaded: the upload, the reply, the server's address and the download's path
/// (the folder kept while they are used).
async fn download_damaged(
    seed: u64,
    pick: fn(&[u8], &[ChunkSpan]) -> ChunkSpan,
) -> (
    tempfile::TempDir,
    Vec<u8>,
    Reply,
    std::net::SocketAddr,
    String,
) {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let bytes = bsor::to_vec(&play(seed, 90.0, "p1")).unwrap();
    let record = created(&srv, &bytes, "p1").await;
    let file = dir.path().join("store").join(&record.blob);
    let mut stream = std::fs::read(&file).unwrap();
    let (_, _, spans) = split_stream(&stream).unwrap();
    let victim = pick(&stream, &spans);
    stream[victim.offset + victim.len - 2] ^= 0x5a;
    std::fs::write(&file, &stream).unwrap();
    let path = format!("/replays/{}", record.id);
    let got = request(addr, "GET", &path, &[], b"").await;
    // The status line went out before the damage was met: a short body, then the close.
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("content-length"),
        Some(&*bytes.len().to_string())
    );
    assert!(got.body.len() < bytes.len(), "the whole body came");
    assert!(
        got.body == bytes[..got.body.len()],
        "what came is not the BSOR's start"
    );
    (dir, bytes, got, addr, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_found_damaged_mid_download_cuts_the_body_short() {
    // A frame chunk in the middle of the stored stream.
    let (_dir, bytes, got, addr, path) = download_damaged(9, |stream, spans| {
        let frames: Vec<_> = spans
            .iter()
            .filter(|s| {
                let kind = ChunkType::from_byte(stream[s.offset + 1]);
                matches!(kind, ChunkType::Keyframes | ChunkType::Frames)
            })
            .collect();
        *frames[frames.len() / 2]
    })
    .await;
    assert!(
        got.body.len() < bytes.len() / 2 + bytes.len() / 4,
        "{} of {} bytes",
        got.body.len(),
        bytes.len()
    );
    assert!(!got.body.is_empty());
    // A range rebuilds only the groups that cover it: the head is served whole, a range
    // over the damaged group is cut short like the whole download.
    let part = request(addr, "GET", &path, &[("Range", "bytes=0-99")], b"").await;
    assert_eq!(part.status, 206);
    assert!(part.body == bytes[..100]);
    let over = format!("bytes=100-{}", bytes.len() - 1);
    let part = request(addr, "GET", &path, &[("Range", &over)], b"").await;
    assert_eq!(part.status, 206);
    assert!(part.body.len() < bytes.len() - 100, "the whole range came");
    assert!(part.body == bytes[100..100 + part.body.len()]);
    // The server goes on answering.
    let head = request(addr, "HEAD", &path, &[], b"").await;
    assert_eq!(head.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_event_chunk_cuts_the_body_short_before_the_tail() {
    // The last event chunk: the frames before it still go out, the tail (which holds the
    // events) never does.
    download_damaged(10, |stream, spans| {
        spans
            .iter()
            .rev()
            .find(|s| ChunkType::from_byte(stream[s.offset + 1]) == ChunkType::Events)
            .copied()
            .unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_span_is_the_groups_that_cover_it() {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let replay = play(7, 60.0, "p1");
    let r = upload(addr, "tok1", &bsor::to_vec(&replay).unwrap()).await;
    let j = r.json();
    let id = j["id"].as_str().unwrap();
    let stored = j["storedBytes"].as_u64().unwrap();
    let got = request(
        addr,
        "GET",
        &format!("/replays/{id}/frames?from=20&to=25"),
        &[],
        b"",
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("content-type"), Some("application/x-bsors"));
    assert!(
        (got.body.len() as u64) < stored / 2,
        "{} of {stored}",
        got.body.len()
    );
    let (part, _) = transcode::decode_replay(&got.body).unwrap();
    let times: Vec<f32> = part.frames.iter().map(|f| f.time).collect();
    assert!(times.first().unwrap() <= &20.0 && times.last().unwrap() >= &25.0);
    let want: Vec<_> = replay
        .frames
        .iter()
        .filter(|f| f.time >= times[0] && f.time <= *times.last().unwrap())
        .cloned()
        .collect();
    assert_eq!(part.frames, want);
    let bad = request(
        addr,
        "GET",
        &format!("/replays/{id}/frames?from=9&to=3"),
        &[],
        b"",
    )
    .await;
    assert_refusal(&bad, 400, "bad-query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_and_admins_delete() {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let mut ids = Vec::new();
    for seed in [8, 9] {
        let r = upload(
            addr,
            "tok1",
            &bsor::to_vec(&play(seed, 10.0, "p1")).unwrap(),
        )
        .await;
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let blob = srv.index.get(&ids[0]).await.unwrap().unwrap().blob;
    let path = format!("/replays/{}", ids[0]);
    assert_refusal(
        &request(addr, "DELETE", &path, &[], b"").await,
        401,
        "unauthorized",
    );
    let other = request(
        addr,
        "DELETE",
        &path,
        &[("Authorization", "Bearer tok2")],
        b"",
    )
    .await;
    assert_refusal(&other, 403, "not-owner");
    let own = request(
        addr,
        "DELETE",
        &path,
        &[("Authorization", "Bearer tok1")],
        b"",
    )
    .await;
    assert_eq!(own.status, 204);
    assert_refusal(
        &request(addr, "GET", &path, &[], b"").await,
        404,
        "not-found",
    );
    assert!(!srv.store.exists(&blob).await.unwrap());
    let path = format!("/replays/{}", ids[1]);
    let admin = request(
        addr,
        "DELETE",
        &path,
        &[("Authorization", "Bearer root")],
        b"",
    )
    .await;
    assert_eq!(admin.status, 204);
    assert!(srv.index.blobs(10).await.unwrap().is_empty());
    assert_eq!(srv.sweep(100).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_pages_with_a_cursor_and_refuses_odd_queries() {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let mut want = Vec::new();
    for seed in 0..5u64 {
        let (player, token) = if seed % 2 == 0 {
            ("p1", "tok1")
        } else {
            ("p2", "tok2")
        };
        let r = upload(
            addr,
            token,
            &bsor::to_vec(&play(100 + seed, 6.0, player)).unwrap(),
        )
        .await;
        assert_eq!(r.status, 201);
        want.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let mut seen = Vec::new();
    let mut target = "/replays?limit=2".to_string();
    let mut pages = 0;
    loop {
        let page = request(addr, "GET", &target, &[], b"").await;
        assert_eq!(page.status, 200);
        let j = page.json();
        let list = j["replays"].as_array().unwrap();
        assert!(list.len() <= 2);
        seen.extend(list.iter().map(|r| r["id"].as_str().unwrap().to_string()));
        pages += 1;
        match j["next"].as_str() {
            Some(c) => target = format!("/replays?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 5);
    want.sort();
    assert_eq!(sorted, want);
    let p2 = request(addr, "GET", "/replays?player=p2", &[], b"")
        .await
        .json();
    let list = p2["replays"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert!(list.iter().all(|r| r["player"] == "p2"));
    let none = request(addr, "GET", "/replays?player=p1&mode=Lawless", &[], b"").await;
    assert!(none.json()["replays"].as_array().unwrap().is_empty());
    for bad in [
        "/replays?player=p1'%20OR%20'1'='1",
        "/replays?limit=0",
        "/replays?limit=1000",
        "/replays?cursor=zz",
        "/replays?since=yesterday",
        "/replays?colour=red",
    ] {
        assert_refusal(&request(addr, "GET", bad, &[], b"").await, 400, "bad-query");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_leaves_nothing_once_swept() {
    let dir = tempfile::tempdir().unwrap();
    let replay = play(10, 8.0, "p1");
    let bytes = bsor::to_vec(&replay).unwrap();
    for fault in [Fault::BeforeBlob, Fault::AfterBlob, Fault::BeforeCommit] {
        let config = Config {
            fault: Some(fault),
            lease: Duration::ZERO,
            ..Config::default()
        };
        let srv = open(dir.path(), config, TOKENS).await;
        let prepared = server::prepare(&bytes, false, &srv.config, "p1").unwrap();
        let id = prepared.record.id.clone();
        let e = srv.upload(prepared).await.unwrap_err();
        assert_eq!(e.cause, server::Cause::Unavailable, "{fault:?}");
        assert!(srv.index.get(&id).await.unwrap().is_none(), "{fault:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let swept = srv.sweep(100).await.unwrap();
        assert_eq!(swept, 1, "{fault:?}");
        assert!(srv.index.expired(i64::MAX, 10).await.unwrap().is_empty());
        // No row, no lease, and the blob (if it was written) is gone.
        let store_dir = dir.path().join("store/replays");
        let left = std::fs::read_dir(&store_dir).map_or(0, |d| d.count());
        assert_eq!(left, 0, "{fault:?}: blobs left in the store");
        srv.index.close().await;
    }
    // Then a whole upload: stored and listed.
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let r = created(&srv, &bytes, "p1").await;
    assert!(srv.store.exists(&r.blob).await.unwrap());
    assert_eq!(srv.index.blobs(10).await.unwrap(), vec![r.blob.clone()]);
    assert_eq!(srv.sweep(100).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_cut_short_by_a_kill_is_swept() {
    // The directory store writes a blob to KEY#1 and renames it: a process killed in
    // between leaves KEY#1, which the sweeper removes with the expired lease.
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let blob = "replays/0123456789abcdef0123456789abcdef.0011223344556677.bsors";
    srv.index.lease(blob, 0).await.unwrap();
    let staged = dir.path().join("store").join(format!("{blob}#1"));
    std::fs::create_dir_all(staged.parent().unwrap()).unwrap();
    std::fs::write(&staged, b"half a blob").unwrap();
    assert_eq!(srv.sweep(10).await.unwrap(), 1);
    assert!(!staged.exists(), "the cut-short write is left");
    assert!(srv.index.expired(i64::MAX, 10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_upload_keeps_its_signature_and_the_server_countersigns() {
    use bsor_stream_core::integrity::{self, Signer, Verdict};
    let dir = tempfile::tempdir().unwrap();
    let server_key = integrity::SigningKey::from_bytes(&[9u8; 32]);
    let config = Config {
        key: Some(server_key.clone()),
        ..Config::default()
    };
    let srv = open(dir.path(), config, TOKENS).await;
    let addr = listen(srv.clone()).await;
    let replay = play(11, 20.0, "p1");
    let signer = Signer::new(integrity::SigningKey::from_bytes(&[3u8; 32]), [5u8; 16]);
    let signed =
        integrity::sign_replay(&replay, Settings::archive(Profile::Lossless), signer).unwrap();
    assert_eq!(integrity::verify_stream(&signed).verdict, Verdict::Valid);
    let r = upload(addr, "tok1", &signed).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["signed"], true);
    assert_eq!(j["countersigned"], true);
    let id = j["id"].as_str().unwrap();
    let back = request(
        addr,
        "GET",
        &format!("/replays/{id}?format=bsors"),
        &[],
        b"",
    )
    .await;
    assert!(
        back.body == signed,
        "the signed stream was not kept as it came"
    );
    assert_eq!(integrity::verify_stream(&back.body).verdict, Verdict::Valid);
    let bsor_back = request(addr, "GET", &format!("/replays/{id}"), &[], b"").await;
    assert_eq!(bsor_back.body, bsor::to_vec(&replay).unwrap());
    // The statement beside the blob verifies under the server's key.
    let record = srv.index.get(id).await.unwrap().unwrap();
    let st = srv
        .store
        .get(&server::statement_key(&record.blob))
        .await
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&st).unwrap();
    let msg = server::statement_message(
        id,
        st["fingerprint"].as_str().unwrap(),
        st["streamHash"].as_str().unwrap(),
        "p1",
        st["accepted"].as_i64().unwrap(),
    );
    assert_eq!(
        st["streamHash"].as_str().unwrap(),
        integrity::hex(blake3::hash(&signed).as_bytes())
    );
    let sig = integrity::from_hex(st["signature"].as_str().unwrap()).unwrap();
    let sig = ed25519_dalek::Signature::from_slice(&sig).unwrap();
    server_key
        .verifying_key()
        .verify_strict(msg.as_bytes(), &sig)
        .unwrap();
}

#[test]
fn every_route_is_in_the_openapi_description() {
    use bsor_stream_server::http::{claims, Route, PATHS};
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../proto-spec/openapi.yaml"
    ))
    .unwrap();
    let listed: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.strip_prefix("  /"))
        .filter_map(|l| l.strip_suffix(':'))
        .collect();
    let id = "0123456789abcdef0123456789abcdef";
    for path in PATHS {
        assert!(
            listed.contains(&&path[1..]),
            "{path} is not in openapi.yaml"
        );
        let concrete = path
            .replace("{id}", id)
            .replace("{key}", &"ab".repeat(32))
            .replace("{hash}", &"cd".repeat(20));
        let route = claims(&concrete);
        assert!(
            route.is_some() && route != Some(Route::Unknown),
            "{path} is not routed"
        );
    }
    assert_eq!(listed.len(), PATHS.len(), "openapi.yaml lists other paths");
}

/// A legacy ScoreSaber replay JSON of 6 s: 90 frames a second, 8 notes (proto-spec/
/// legacy-import.md names the fields).
fn legacy_json() -> Vec<u8> {
    let pose = |x: f64, y: f64| serde_json::json!({"r": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}, "p": {"x": x, "y": y, "z": 0.0}});
    let frames: Vec<_> = (0..540)
        .map(|i| {
            let t = f64::from(i) / 90.0;
            serde_json::json!({"h": pose(0.0, 1.7), "l": pose(-0.3, 1.1 + t / 100.0), "r": pose(0.3, 1.2), "a": t, "i": 90})
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "info": {"version": "1.2.3", "hash": "3585B3438A5B78DEAFAAA9D8FBA9A9E88556D218",
                 "difficulty": 7, "mode": "Standard", "environment": "BigMirrorEnvironment",
                 "modifiers": [], "noteJumpStartBeatOffset": 0.0, "leftHanded": false,
                 "height": 1.75},
        "frames": frames,
        "scores": [115, 100, 14, 110, 105, 98, 112, 101],
        "combos": [1, 2, 3, 4, 5, 6, 7, 8],
        "noteTime": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5],
        "noteInfos": ["1000", "2111", "3201", "0010", "1111", "2000", "0101", "3210"],
        "dynamicHeight": []
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_json_upload_is_imported_as_the_tokens_player() {
    let dir = tempfile::tempdir().unwrap();
    let srv = open(dir.path(), Config::default(), TOKENS).await;
    let addr = listen(srv.clone()).await;
    let json = legacy_json();
    let expected = bsor_stream_core::legacy::import(&json, &Default::default()).unwrap();

    let r = upload(addr, "tok2", &json).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["player"], "p2");
    let id = j["id"].as_str().unwrap().to_string();
    let got = request(addr, "GET", &format!("/replays/{id}"), &[], b"").await;
    let back = bsor::parse(&got.body).unwrap();
    assert_eq!(back.info.player_id.as_str(), Some("p2"));
    assert_eq!(back.frames, expected.frames);
    assert_eq!(back.notes, expected.notes);

    // A legacy document the import refuses is a 400 that names it.
    let r = upload(addr, "tok2", br#"{"info": {"difficulty": "seven"}}"#).await;
    assert_refusal(&r, 400, "invalid-legacy-json");
}

/// The test witness key's secret seed (`vectors/signed.witness`'s W): never a real key.
const WITNESS: [u8; 32] = [0x57; 32];

/// `replay` signed as its recorder would (key 3s, `nonce`), kept as a lossless archive.
fn signed_stream(replay: &bsor::Replay, nonce: u8) -> Vec<u8> {
    use bsor_stream_core::integrity::{self, Signer};
    let signer = Signer::new(integrity::SigningKey::from_bytes(&[3u8; 32]), [nonce; 16]);
    integrity::sign_replay(replay, Settings::archive(Profile::Lossless), signer).unwrap()
}

/// A `.witness` file of the statements the witness `seed` makes for every checkpoint and the
/// final checkpoint of `stream`, a second apart, the last (the final checkpoint's, which
/// dates the play) received at `t0` (Unix ms).
fn witness_file(seed: [u8; 32], stream: &[u8], t0: u64) -> Vec<u8> {
    use bsor_stream_core::integrity::witness::{append_record, Witness};
    let w = Witness::new(bsor_stream_core::integrity::SigningKey::from_bytes(&seed));
    let (_, _, spans) = split_stream(stream).unwrap();
    let signing: Vec<(u8, &[u8])> = spans
        .iter()
        .filter_map(|c| match c.header.kind {
            ChunkType::Unknown(kind) => Some((kind, &c.bytes(stream)[c.header_len..])),
            _ => None,
        })
        .filter(|(kind, p)| w.countersign(*kind, p, 0).is_some())
        .collect();
    let n = signing.len() as u64;
    assert!(n >= 2, "the signed stream has {n} checkpoints");
    let mut out = Vec::new();
    for (i, (kind, p)) in signing.into_iter().enumerate() {
        let s = w
            .countersign(kind, p, t0 - 1000 * (n - 1 - i as u64))
            .unwrap();
        append_record(&mut out, &s);
    }
    out
}

fn public(seed: [u8; 32]) -> [u8; 32] {
    bsor_stream_core::integrity::SigningKey::from_bytes(&seed)
        .verifying_key()
        .to_bytes()
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A server trusting the witness W.
async fn trusting(dir: &std::path::Path) -> Arc<ReplayServer> {
    let config = Config {
        trusted_witnesses: vec![public(WITNESS)],
        ..Config::default()
    };
    open(dir, config, TOKENS).await
}

/// `replay` under player p2 (a copy uploaded as someone else's).
fn stolen(replay: &bsor::Replay) -> Vec<u8> {
    let mut copy = replay.clone();
    copy.info.player_id = BsorString::new("p2");
    copy.info.player_name = BsorString::new("thief");
    bsor::to_vec(&copy).unwrap()
}

/// An hour ago, Unix ms: before any upload of a test.
fn an_hour_ago() -> u64 {
    server::now_ms() as u64 - 3_600_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witnessed_original_takes_the_play_from_an_earlier_copy() {
    let dir = tempfile::tempdir().unwrap();
    let srv = trusting(dir.path()).await;
    let addr = listen(srv.clone()).await;
    let original = play(21, 20.0, "p1");
    let signed = signed_stream(&original, 6);
    let t0 = an_hour_ago();
    let statements = witness_file(WITNESS, &signed, t0);

    let r = upload(addr, "tok2", &stolen(&original)).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let copy = r.json();
    assert_eq!(copy["existedBy"], copy["uploaded"]);
    let copy_id = copy["id"].as_str().unwrap().to_string();

    let header = b64(&statements);
    let r = request(
        addr,
        "POST",
        "/replays",
        &[("Authorization", "Bearer tok1"), ("Bsor-Witness", &header)],
        &signed,
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    let id = j["id"].as_str().unwrap().to_string();
    assert_eq!(j["player"], "p1");
    assert_eq!(j["existedBy"], t0);
    assert!(j["uploaded"].as_u64().unwrap() > t0);
    assert_eq!(j["fingerprint"], copy["fingerprint"]);

    // The copy is a review entry now: not served, not searched; the original is.
    for path in [
        format!("/replays/{copy_id}"),
        format!("/replays/{copy_id}/events"),
        format!("/replays/{copy_id}/verify"),
    ] {
        assert_refusal(
            &request(addr, "GET", &path, &[], b"").await,
            404,
            "not-found",
        );
    }
    let gone = request(
        addr,
        "DELETE",
        &format!("/replays/{copy_id}"),
        &[("Authorization", "Bearer tok2")],
        b"",
    )
    .await;
    assert_refusal(&gone, 404, "not-found");
    let back = request(
        addr,
        "GET",
        &format!("/replays/{id}?format=bsors"),
        &[],
        b"",
    )
    .await;
    assert_eq!(back.status, 200);
    assert!(back.body == signed, "the original was not kept as it came");
    let all = request(addr, "GET", "/replays", &[], b"").await.json();
    let listed: Vec<&str> = all["replays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [id.as_str()]);
    let reviews = srv.reviews(10).await.unwrap();
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0].id, copy_id);
    assert_eq!(reviews[0].player, "p2");
    assert_eq!(reviews[0].owner, id);
    assert_eq!(reviews[0].state, "pending");
    // Nothing lost: both blobs are in the store, each under one row.
    let blobs = srv.index.blobs(10).await.unwrap();
    assert_eq!(blobs.len(), 2);
    for b in &blobs {
        assert!(srv.store.exists(b).await.unwrap(), "{b}");
    }

    // The copy again: it existed later than the original, so it is refused, one review kept.
    let r = upload(addr, "tok2", &stolen(&original)).await;
    assert_refusal(&r, 409, "same-play");
    assert!(r.json()["reason"].as_str().unwrap().contains(&id));
    assert_eq!(srv.reviews(10).await.unwrap().len(), 1);
    assert_eq!(srv.index.blobs(10).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trusted_statement_that_checks_moves_a_play() {
    let dir = tempfile::tempdir().unwrap();
    let srv = trusting(dir.path()).await;
    let addr = listen(srv.clone()).await;
    let t0 = an_hour_ago();
    let with = |header: String| {
        [
            ("Authorization", "Bearer tok1".to_string()),
            ("Bsor-Witness", header),
        ]
    };
    let post = |headers: [(&'static str, String); 2], body: Vec<u8>| async move {
        let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        request(addr, "POST", "/replays", &h, &body).await
    };

    // Witnessed first, the copy second: refused as today.
    let first = play(22, 12.0, "p1");
    let signed = signed_stream(&first, 7);
    let r = post(
        with(b64(&witness_file(WITNESS, &signed, t0))),
        signed.clone(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["existedBy"], t0);
    assert_refusal(
        &upload(addr, "tok2", &stolen(&first)).await,
        409,
        "same-play",
    );

    // The copy first; then statements that date nothing: an untrusted key's, the trusted
    // key's for another recording (the same play signed with another nonce), and a trusted
    // statement whose time was changed after it was signed.
    type Statements<'a> = Box<dyn Fn(&[u8]) -> Vec<u8> + 'a>;
    let cases: [(&str, Statements<'_>); 3] = [
        ("untrusted", Box::new(|s| witness_file([0x58; 32], s, t0))),
        (
            "another recording",
            Box::new(|_| witness_file(WITNESS, &signed_stream(&play(23, 12.0, "p1"), 9), t0)),
        ),
        (
            "changed after signing",
            Box::new(|s| {
                let mut f = witness_file(WITNESS, s, t0);
                // Record 0's receive time: 4 bytes of length, then offset 86 of the statement.
                f[4 + 86] ^= 1;
                f.truncate(4 + 158);
                f
            }),
        ),
    ];
    for (seed, (what, statements)) in (24..).zip(cases) {
        let p = play(seed, 12.0, "p1");
        let r = upload(addr, "tok2", &stolen(&p)).await;
        assert_eq!(r.status, 201, "{what}");
        let owner = r.json()["id"].as_str().unwrap().to_string();
        let signed = signed_stream(&p, 8);
        let r = post(with(b64(&statements(&signed))), signed).await;
        assert_refusal(&r, 409, "same-play");
        assert!(
            r.json()["reason"].as_str().unwrap().contains(&owner),
            "{what}"
        );
        let kept = request(
            addr,
            "GET",
            &format!("/replays/{owner}?format=json"),
            &[],
            b"",
        )
        .await;
        assert_eq!(
            kept.status, 200,
            "{what}: the first upload no longer owns its play"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_witness_header_is_refused_before_the_body() {
    let dir = tempfile::tempdir().unwrap();
    let srv = trusting(dir.path()).await;
    let addr = listen(srv.clone()).await;
    let p = play(30, 10.0, "p1");
    let signed = signed_stream(&p, 6);
    let file = witness_file(WITNESS, &signed, an_hour_ago());
    let long = "A".repeat(plan::MAX_WITNESS_HEADER + 4);
    let cut = b64(&file[..200]);
    let whole = b64(&file[..162]);
    for headers in [
        vec![("Bsor-Witness", "%%% not base64")],
        vec![("Bsor-Witness", cut.as_str())],
        vec![("Bsor-Witness", "")],
        vec![("Bsor-Witness", long.as_str())],
        vec![
            ("Bsor-Witness", whole.as_str()),
            ("Bsor-Witness", whole.as_str()),
        ],
    ] {
        let mut h = vec![("Authorization", "Bearer tok1")];
        h.extend(headers);
        let r = request(addr, "POST", "/replays", &h, &signed).await;
        assert_refusal(&r, 400, "bad-witness");
    }
    assert!(srv.index.blobs(10).await.unwrap().is_empty());
    // One whole statement is enough.
    let h = [
        ("Authorization", "Bearer tok1"),
        ("Bsor-Witness", whole.as_str()),
    ];
    let r = request(addr, "POST", "/replays", &h, &signed).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_session_with_its_witness_file_takes_the_play() {
    let dir = tempfile::tempdir().unwrap();
    let srv = trusting(dir.path()).await;
    let t0 = an_hour_ago();
    let p = play(31, 12.0, "p1");
    let copy = created(&srv, &stolen(&p), "p2").await;
    let session = signed_stream(&p, 6);
    // Without its witness file the session existed later than the copy: refused.
    let refused = srv
        .store_session(&session, None, Some("p1"))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.cause, refused.code),
        (server::Cause::Conflict, "same-play")
    );
    // A publisher granted another player (or none) never stores it.
    for granted in [None, Some("p2")] {
        let no = srv
            .store_session(&session, None, granted)
            .await
            .unwrap_err();
        assert_eq!(
            (no.cause, no.code),
            (server::Cause::Forbidden, "not-granted")
        );
    }
    let file = witness_file(WITNESS, &session, t0);
    let server::Uploaded::Created(r) = srv
        .store_session(&session, Some(&file), Some("p1"))
        .await
        .unwrap()
    else {
        panic!("not created");
    };
    assert_eq!(r.player, "p1");
    assert_eq!(r.existed_by, t0 as i64);
    assert_eq!(
        srv.index.by_fingerprint(&r.fingerprint).await.unwrap(),
        Some(r.clone())
    );
    assert_eq!(srv.index.get(&copy.id).await.unwrap(), None);
    let reviews = srv.reviews(10).await.unwrap();
    let ids: Vec<&str> = reviews.iter().map(|v| v.id.as_str()).collect();
    // The session's own refused copy was replaced by its accepted replay.
    assert_eq!(ids, [copy.id.as_str()]);
    assert_eq!(reviews[0].owner, r.id);
    // Every blob a row names is there; the replaced review's blob is leased for the sweeper.
    for b in srv.index.blobs(10).await.unwrap() {
        assert!(srv.store.exists(&b).await.unwrap(), "{b}");
    }
}

#[test]
fn statements_date_only_a_stream_whose_signatures_hold() {
    use bsor_stream_core::integrity::witness::check_witnesses;
    use bsor_stream_core::stream::StreamHeader;
    let signed = signed_stream(&play(32, 12.0, "p1"), 6);
    let t0 = an_hour_ago();
    let file = witness_file(WITNESS, &signed, t0);
    let trusted = [public(WITNESS)];
    assert_eq!(server::witnessed(&signed, &file, &trusted), Some(t0 as i64));
    assert_eq!(server::witnessed(&signed, &file, &[public([1; 32])]), None);
    // The same chunks behind a header that names another player: the key chunk's binding
    // fails, so no checkpoint verifies and the statements name nothing the stream holds.
    let (mut header, len) = StreamHeader::parse_prefix_len(&signed).unwrap().unwrap();
    header.info.player_id = BsorString::new("p2");
    let mut changed = header.encode();
    changed.extend_from_slice(&signed[len..]);
    let rep = check_witnesses(&changed, &file, &trusted);
    assert_eq!(rep.existed_by_ms, None);
    assert!(rep.witnesses.is_empty(), "{:?}", rep.witnesses);
    assert_eq!(server::witnessed(&changed, &file, &trusted), None);
}

/// Forgery without the key, through the upload: a forged events chunk in front of a
/// player's signed stream's key chunk. Refused as a signature that does not verify, so the
/// forged notes are never stored as the player's signed play.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_stream_with_forged_records_before_its_key_chunk_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let srv = trusting(dir.path()).await;
    let addr = listen(srv.clone()).await;
    let original = play(33, 12.0, "p1");
    let signed = signed_stream(&original, 6);
    // The forged notes: the first moved by 0.25 s, as an events chunk of an unsigned encode.
    let mut forged = original.clone();
    forged.frames.clear();
    forged.notes[0].event_time += 0.25;
    let plain = transcode::encode_replay(&forged, Settings::live(Profile::Lossless));
    let (_, _, pspans) = split_stream(&plain).unwrap();
    let events = pspans
        .iter()
        .find(|c| c.header.kind == ChunkType::Events)
        .unwrap();
    let (_, hl, spans) = split_stream(&signed).unwrap();
    let mut out = signed[..hl].to_vec();
    let mut seq = 0u32;
    let mut put = |h: &bsor_stream_core::stream::ChunkHeader, payload: &[u8], out: &mut Vec<u8>| {
        bsor_stream_core::stream::ChunkHeader::new(h.kind, seq, h.first, h.count, h.t0)
            .write_to(payload, out);
        seq += 1;
    };
    put(
        &events.header,
        &events.bytes(&plain)[events.header_len..],
        &mut out,
    );
    for c in spans.iter().filter(|c| c.header.kind != ChunkType::Index) {
        put(&c.header, &c.bytes(&signed)[c.header_len..], &mut out);
    }
    let (decoded, _) = transcode::decode_replay(&out).unwrap();
    assert_eq!(decoded.notes[0].event_time, forged.notes[0].event_time);
    let r = upload(addr, "tok1", &out).await;
    assert_refusal(&r, 400, "bad-signature");
    assert!(
        r.json()["reason"].as_str().unwrap().contains("first chunk"),
        "{}",
        r.json()
    );
    assert!(srv.index.blobs(10).await.unwrap().is_empty());
}

/// Theft by pre-dating, through the upload: the thief had a trusted witness date a
/// note-free prefix of frames long ago (its checkpoint 0), then signs the victim's events
/// behind the byte-identical prefix with the same key and nonce and uploads it with that
/// statement after the victim's upload. The statement checks, but dates only the prefix:
/// the thief's play is dated by its upload, later than the victim's, and refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witnessed_prefix_does_not_take_a_later_play() {
    use bsor_stream_core::integrity::witness::{append_record, Witness};
    use bsor_stream_core::integrity::{self, Signer, CHECKPOINT_CHUNK};
    let dir = tempfile::tempdir().unwrap();
    let srv = trusting(dir.path()).await;
    let addr = listen(srv.clone()).await;
    let live = Settings::live(Profile::Lossless);
    let thief_key = [9u8; 32];
    let sign = |r: &bsor::Replay| {
        let signer = Signer::new(integrity::SigningKey::from_bytes(&thief_key), [0x5a; 16]);
        integrity::sign_replay(r, live, signer).unwrap()
    };
    let first_checkpoint = |s: &[u8]| {
        let (_, _, spans) = split_stream(s).unwrap();
        let c = spans
            .iter()
            .find(|c| c.header.kind == ChunkType::Unknown(CHECKPOINT_CHUNK))
            .unwrap();
        c.bytes(s)[c.header_len..].to_vec()
    };
    // The victim's play: its notes start after the first keyframe group, as a song's do.
    let mut victim = play(34, 12.0, "p1");
    victim.notes.retain(|n| n.event_time > 2.0);
    victim.walls.retain(|x| x.time > 2.0);
    victim.heights.retain(|x| x.time > 2.0);
    victim.pauses.retain(|x| x.time > 2.0);
    let r = upload(addr, "tok1", &bsor::to_vec(&victim).unwrap()).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let victim_id = r.json()["id"].as_str().unwrap().to_string();

    // The thief's copy under p2, and the prefix: its first group's frames, no event.
    let mut copy = victim.clone();
    copy.info.player_id = BsorString::new("p2");
    let stolen = sign(&copy);
    let n0 = {
        let c = first_checkpoint(&stolen);
        u32::from_le_bytes(c[57..61].try_into().unwrap()) as usize
    };
    let mut prefix = copy.clone();
    prefix.frames.truncate(n0);
    prefix.notes.clear();
    prefix.walls.clear();
    prefix.heights.clear();
    prefix.pauses.clear();
    let witnessed = first_checkpoint(&sign(&prefix));
    assert_eq!(
        witnessed,
        first_checkpoint(&stolen),
        "a byte-identical prefix"
    );
    let w = Witness::new(integrity::SigningKey::from_bytes(&WITNESS));
    let mut file = Vec::new();
    append_record(
        &mut file,
        &w.countersign(CHECKPOINT_CHUNK, &witnessed, an_hour_ago())
            .unwrap(),
    );
    let header = b64(&file);
    let r = request(
        addr,
        "POST",
        "/replays",
        &[("Authorization", "Bearer tok2"), ("Bsor-Witness", &header)],
        &stolen,
    )
    .await;
    assert_refusal(&r, 409, "same-play");
    // The victim's replay stands.
    let got = request(addr, "GET", &format!("/replays/{victim_id}"), &[], b"").await;
    assert_eq!(got.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_stored_before_existed_by_times_get_their_upload_time() {
    // An index as the schema's first two migrations left it, with one replay in it.
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("migrations");
    std::fs::create_dir(&old).unwrap();
    for f in ["0001_replays.sql", "0002_keys.sql"] {
        let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/migrations");
        std::fs::copy(from.join(f), old.join(f)).unwrap();
    }
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("index.sqlite").display()
    );
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(old.as_path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO replays (id, blob, player, player_name, map_hash, song, difficulty, mode, \
         score, played, uploaded, duration, format, stored_bytes, bsor_bytes, header_bytes, \
         fingerprint, signed, countersigned) VALUES ('a', 'replays/a.0.bsors', 'p1', '', '', \
         '', '', '', 1, 0, 1234567, 1.0, 'lossless', 10, 20, 5, 'f', 0, 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let index = Index::open(&url).await.unwrap();
    let r = index.get("a").await.unwrap().unwrap();
    assert_eq!((r.uploaded, r.existed_by), (1_234_567, 1_234_567));
    index.close().await;
}

/// `PUT /maps/HASH`: an admin's zip is written whole to the maps folder and served by the
/// relay; a player, no token, a body that is not a zip, one over the body limit, another
/// method or a server without a maps folder are refused, and nothing is left of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_put_maps_the_relay_serves() {
    let dir = tempfile::tempdir().unwrap();
    let maps = tempfile::tempdir().unwrap();
    let config = Config {
        maps: Some(maps.path().to_path_buf()),
        max_body: 100_000,
        ..Config::default()
    };
    let srv = open(dir.path(), config, TOKENS).await;
    let addr = listen_with_maps(srv, Some(maps.path())).await;
    let hash = "00112233445566778899AABBCCDDEEFF00112233";
    let lower = hash.to_ascii_lowercase();
    let mut zip = b"PK\x03\x04".to_vec();
    zip.extend((0..50_000u32).map(|i| (i % 251) as u8));
    let put = |token: &'static str, body: Vec<u8>| async move {
        let auth = format!("Bearer {token}");
        let headers: Vec<(&str, &str)> = if token.is_empty() {
            vec![]
        } else {
            vec![("Authorization", auth.as_str())]
        };
        request(addr, "PUT", &format!("/maps/{hash}"), &headers, &body).await
    };
    let files = || {
        let mut v: Vec<String> = std::fs::read_dir(maps.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_refusal(&put("", zip.clone()).await, 401, "unauthorized");
    assert_refusal(&put("tok1", zip.clone()).await, 403, "not-admin");
    assert_refusal(
        &put("root", b"not a zip at all".to_vec()).await,
        415,
        "not-a-zip",
    );
    let mut big = zip.clone();
    big.resize(100_001, 0);
    assert_eq!(put("root", big).await.status, 413);
    assert!(
        files().is_empty(),
        "nothing kept of a refused map: {:?}",
        files()
    );
    let r = put("root", zip.clone()).await;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("location"), Some(&*format!("/maps/{lower}.zip")));
    assert_eq!(files(), vec![format!("{lower}.zip")]);
    let got = request(addr, "GET", &format!("/maps/{hash}.zip"), &[], b"").await;
    assert_eq!((got.status, &got.body), (200, &zip));
    // Again: the map replaced, 204.
    zip.push(1);
    assert_eq!(put("root", zip.clone()).await.status, 204);
    let got = request(addr, "GET", &format!("/maps/{lower}.zip"), &[], b"").await;
    assert_eq!(got.body, zip);
    assert_eq!(
        files(),
        vec![format!("{lower}.zip")],
        "no temporary file left"
    );
    let get = request(addr, "GET", &format!("/maps/{hash}"), &[], b"").await;
    assert_eq!((get.status, get.header("allow")), (405, Some("PUT")));
    // A server without a maps folder takes none.
    let dir2 = tempfile::tempdir().unwrap();
    let srv2 = open(dir2.path(), Config::default(), TOKENS).await;
    let addr2 = listen(srv2).await;
    let r = request(
        addr2,
        "PUT",
        &format!("/maps/{hash}"),
        &[("Authorization", "Bearer root")],
        &zip,
    )
    .await;
    assert_refusal(&r, 404, "no-maps");
}

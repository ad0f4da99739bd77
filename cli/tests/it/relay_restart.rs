//! A live session survives a relay restart (`proto-spec/wire.md` §4.1), run as a user would
//! on 127.0.0.1: `bsor-stream serve --archive DIR` is killed with SIGKILL in the middle of a
//! session (with a torn chunk at the end of the archive file, or without), started again on
//! the same folder and port, and the same publisher resumes and finishes: the archive file
//! is byte for byte the publisher's finished file, and a viewer that came after the restart
//! received the whole stream through to `End 0`. A live viewer that joins after the resume
//! starts as it would have without the restart: at the last keyframe group the relay held,
//! read back from the archive file, after a signed session's key chunk. Nobody else
//! resumes: not another publisher with a valid token, not a reader of the archive folder
//! sending the key file's bytes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bsor_stream::net::publisher::thread::Publisher;
use bsor_stream::net::publisher::{self, Progress, Target};
use bsor_stream::net::wire::{self, EndReason, ErrorCode, Message, Role, ViewMode};
use bsor_stream::stream::{split_stream, ChunkHeader, Profile, Settings};
use bsor_stream::{bsor, synth, transcode};
use bytes::{Bytes, BytesMut};

const TOKEN: &str = "tok";

/// A `bsor-stream serve` child, killed when dropped.
struct Serve {
    child: Child,
    addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    /// `serve --tcp ADDR --archive DIR/archive` (tokens in `DIR/tokens.txt`). `ADDR` may be
    /// a port just freed by a killed relay: tried again for a few seconds.
    fn start(dir: &Path, addr: &str) -> Serve {
        std::fs::write(dir.join("tokens.txt"), format!("{TOKEN}\n")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("serve.log"))
                .unwrap();
            let mut child = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
                .args(["serve", "--tcp", addr, "--archive"])
                .arg(dir.join("archive"))
                .arg("--token-file")
                .arg(dir.join("tokens.txt"))
                .stdout(Stdio::piped())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            if let Some(bound) = line.trim().strip_prefix("listening tcp=") {
                let addr = bound.to_string();
                return Serve { child, addr };
            }
            let _ = child.wait();
            assert!(Instant::now() < deadline, "serve did not start on {addr}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILL, and the process reaped.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// A 30-second live stream: the publisher's finished file, its header and its chunks.
fn stream() -> (bsor::Replay, Vec<u8>, Bytes, Vec<Bytes>) {
    let r = synth::replay(synth::Settings {
        seed: 31,
        seconds: 30.0,
        fps: 60,
    });
    let file = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
    let (header, chunks) = header_and_chunks(&file);
    (r, file, header, chunks)
}

/// A stream's header and its chunks, as a publisher sends them.
fn header_and_chunks(file: &[u8]) -> (Bytes, Vec<Bytes>) {
    let (_, header_len, spans) = split_stream(file).unwrap();
    let chunks = spans
        .iter()
        .map(|c| Bytes::copy_from_slice(c.bytes(file)))
        .collect();
    (Bytes::copy_from_slice(&file[..header_len]), chunks)
}

fn target(addr: &str, key: [u8; 16]) -> Target {
    Target {
        addr: addr.into(),
        websocket: false,
        ca_file: None,
        session: "song".into(),
        token: TOKEN.into(),
        key,
        buffer_bytes: 64 << 20,
        spill: None,
        retry_every: Duration::from_millis(100),
        max_retries: 10,
        retry_for: Duration::from_secs(60),
        finish_timeout: Duration::from_secs(30),
    }
}

/// Waits (at most 30 s) for the progress `want` says is enough.
fn wait_for(rx: &mpsc::Receiver<Progress>, mut want: impl FnMut(&Progress) -> bool) -> Progress {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let p = rx.recv_timeout(left).expect("the publisher's progress");
        if want(&p) {
            return p;
        }
    }
}

/// One protocol connection over plain TCP, spoken frame by frame.
struct Raw(TcpStream);

impl Raw {
    fn connect(addr: &str, role: Role) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut raw = Raw(s);
        raw.send(Message::Hello {
            min_version: 1,
            max_version: 1,
            role,
            agent: "relay_restart".into(),
        });
        assert!(matches!(raw.next(), Message::Hello { .. }));
        raw
    }

    fn send(&mut self, m: Message) {
        let mut out = BytesMut::new();
        m.encode(&mut out);
        self.0.write_all(&out).unwrap();
    }

    fn next(&mut self) -> Message {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).unwrap();
        let mut frame = vec![0u8; 4 + u32::from_le_bytes(len) as usize];
        frame[..4].copy_from_slice(&len);
        self.0.read_exact(&mut frame[4..]).unwrap();
        wire::decode_frame(Bytes::from(frame), 16 << 20).unwrap()
    }

    /// `Publish` for "song", and the relay's answer.
    fn publish(addr: &str, resume: bool, key: [u8; 16]) -> Message {
        let mut raw = Raw::connect(addr, Role::Publisher);
        raw.send(Message::Publish {
            session: "song".into(),
            token: TOKEN.into(),
            resume,
            publisher_key: key,
        });
        raw.next()
    }
}

/// A complete-mode viewer of "song" on its own thread: the stream bytes it got, and the
/// reason of its `End`.
fn viewer(addr: &str) -> std::thread::JoinHandle<(Vec<u8>, EndReason)> {
    let mut raw = Raw::connect(addr, Role::Viewer);
    raw.send(Message::Subscribe {
        session: "song".into(),
        mode: ViewMode::Complete,
        wait_ms: 20_000,
        from: 0,
    });
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        loop {
            match raw.next() {
                Message::StreamHeader(b) | Message::Chunk(b) => bytes.extend_from_slice(&b),
                Message::Ping(n) => raw.send(Message::Pong(n)),
                Message::End(reason) => return (bytes, reason),
                Message::Error { code, message } => panic!("viewer: {code:?} {message}"),
                _ => {}
            }
        }
    })
}

fn archive_file(dir: &Path) -> PathBuf {
    dir.join("archive").join("song.bsors")
}

/// The chunks' sequence numbers in a stream file, in order.
fn sequence(file: &[u8]) -> Vec<u32> {
    let (_, _, spans) = split_stream(file).unwrap();
    spans
        .iter()
        .map(|s| ChunkHeader::parse_at(s.bytes(file)).unwrap().0.seq)
        .collect()
}

/// Publishes part of the song, kills the relay (leaving half of the next chunk at the end
/// of the archive file when `torn`), starts it again on the same folder and port, and lets
/// the same publisher resume and finish.
fn survives_a_kill(torn: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (r, file, header, chunks) = stream();
    let relay = Serve::start(dir.path(), "127.0.0.1:0");
    let addr = relay.addr.clone();
    let (tx, rx) = mpsc::channel();
    let key = publisher::new_key().unwrap();
    let p = Publisher::spawn(
        "test-publisher",
        target(&addr, key),
        header.clone(),
        move |p| {
            let _ = tx.send(p);
        },
    )
    .unwrap();
    let part = chunks.len() / 2;
    for c in &chunks[..part] {
        p.send(c.clone());
    }
    wait_for(&rx, |p| *p == Progress::Acked(part as u64));
    relay.kill();
    let on_disk = std::fs::read(archive_file(dir.path())).unwrap();
    assert!(on_disk == file[..on_disk.len()], "a prefix of the stream");
    if torn {
        let half = &chunks[part][..chunks[part].len() / 2];
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(archive_file(dir.path()))
            .unwrap();
        f.write_all(half).unwrap();
    }
    // While the relay is away, the publisher keeps the chunks it is handed.
    for c in &chunks[part..part + 5] {
        p.send(c.clone());
    }
    std::thread::sleep(Duration::from_millis(300));
    let relay = Serve::start(dir.path(), &addr);
    // A viewer right after the restart.
    let watching = viewer(&relay.addr);
    let resumed = wait_for(&rx, |p| matches!(p, Progress::Connected(_)));
    assert_eq!(resumed, Progress::Connected(part as u32));
    for c in &chunks[part + 5..] {
        p.send(c.clone());
    }
    p.finish(true).unwrap();
    let (seen, reason) = watching.join().unwrap();
    assert_eq!(reason, EndReason::Finished);
    let footer = bsor_stream::stream::FOOTER_SIZE;
    assert!(
        seen == file[..file.len() - footer],
        "the viewer got the whole stream"
    );
    // The archive is the publisher's finished file, byte for byte: no gap, no duplicate.
    let archived = std::fs::read(archive_file(dir.path())).unwrap();
    let want: Vec<u32> = (0..chunks.len() as u32).collect();
    assert_eq!(sequence(&archived), want);
    assert!(archived == file, "the archive is the finished file");
    let (back, rec) = transcode::decode_replay(&archived).unwrap();
    assert!(rec.complete, "{rec:?}");
    assert!(bsor::to_vec(&back).unwrap() == bsor::to_vec(&r).unwrap());
    // Ended: the key file went with it.
    assert!(!dir.path().join("archive").join("song.key").exists());
    drop(relay);
}

#[test]
fn a_publisher_resumes_its_session_after_the_relay_is_killed() {
    survives_a_kill(false);
}

#[test]
fn a_torn_chunk_left_by_the_kill_is_cut_and_sent_again() {
    survives_a_kill(true);
}

#[test]
fn after_a_restart_nobody_but_the_publisher_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, header, chunks) = stream();
    let relay = Serve::start(dir.path(), "127.0.0.1:0");
    let addr = relay.addr.clone();
    let key = publisher::new_key().unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Publisher::spawn("test-publisher", target(&addr, key), header, move |p| {
        let _ = tx.send(p);
    })
    .unwrap();
    for c in &chunks[..10] {
        p.send(c.clone());
    }
    wait_for(&rx, |p| *p == Progress::Acked(10));
    relay.kill();
    // The publisher is abandoned (it would resume on its own otherwise).
    drop(p);
    let key_file = std::fs::read(dir.path().join("archive").join("song.key")).unwrap();
    assert!(
        !key_file.windows(16).any(|w| w == key),
        "the key file does not hold the key"
    );
    let mut halves = [[0u8; 16]; 2];
    halves[0].copy_from_slice(&key_file[8..24]);
    halves[1].copy_from_slice(&key_file[24..40]);
    let mut other = key;
    other[0] ^= 1;
    // Each after a fresh restart, so that each is the first to ask: another publisher with
    // a valid token, and the key file's digest sent as the key.
    for thief in [other, halves[0], halves[1]] {
        let relay = Serve::start(dir.path(), &addr);
        let answer = Raw::publish(&relay.addr, true, thief);
        assert!(
            matches!(
                answer,
                Message::Error {
                    code: ErrorCode::SessionExists,
                    ..
                }
            ),
            "{answer:?}"
        );
        relay.kill();
    }
    // The publisher's key, without resume = 1, neither.
    let relay = Serve::start(dir.path(), &addr);
    let answer = Raw::publish(&relay.addr, false, key);
    assert!(
        matches!(
            answer,
            Message::Error {
                code: ErrorCode::SessionExists,
                ..
            }
        ),
        "{answer:?}"
    );
    relay.kill();
    // And the publisher itself does, at the chunk after its last acknowledged one.
    let relay = Serve::start(dir.path(), &addr);
    assert_eq!(Raw::publish(&relay.addr, true, key), Message::Resume(10));
}

/// A live viewer of "song" that subscribed and got its stream header (so it has joined):
/// its connection, and the header.
fn live_viewer(addr: &str) -> (Raw, Bytes) {
    let mut raw = Raw::connect(addr, Role::Viewer);
    raw.send(Message::Subscribe {
        session: "song".into(),
        mode: ViewMode::Live,
        wait_ms: 20_000,
        from: 0,
    });
    loop {
        match raw.next() {
            Message::StreamHeader(h) => return (raw, h),
            Message::Ping(n) => raw.send(Message::Pong(n)),
            Message::Error { code, message } => panic!("viewer: {code:?} {message}"),
            _ => {}
        }
    }
}

/// The chunks a viewer gets through to `End`, and the reason.
fn chunks_to_end(mut raw: Raw) -> (Vec<Bytes>, EndReason) {
    let mut chunks = Vec::new();
    loop {
        match raw.next() {
            Message::Chunk(c) => chunks.push(c),
            Message::Ping(n) => raw.send(Message::Pong(n)),
            Message::End(reason) => return (chunks, reason),
            Message::Error { code, message } => panic!("viewer: {code:?} {message}"),
            Message::Skipped { chunks, bytes } => panic!("skipped {chunks} chunks, {bytes} bytes"),
            _ => {}
        }
    }
}

/// Publishes `chunks` up to `part` (not included), kills the relay with SIGKILL, starts it
/// again, lets the publisher resume, and has a live viewer join before the publisher sends
/// the rest: the chunks that viewer got through to `End`, and the stream header.
fn late_joiner_after_a_kill(header: Bytes, chunks: &[Bytes], part: usize) -> (Bytes, Vec<Bytes>) {
    let dir = tempfile::tempdir().unwrap();
    let relay = Serve::start(dir.path(), "127.0.0.1:0");
    let addr = relay.addr.clone();
    let (tx, rx) = mpsc::channel();
    let key = publisher::new_key().unwrap();
    let p = Publisher::spawn("test-publisher", target(&addr, key), header, move |p| {
        let _ = tx.send(p);
    })
    .unwrap();
    for c in &chunks[..part] {
        p.send(c.clone());
    }
    wait_for(&rx, |p| *p == Progress::Acked(part as u64));
    relay.kill();
    let relay = Serve::start(dir.path(), &addr);
    let resumed = wait_for(&rx, |p| matches!(p, Progress::Connected(_)));
    assert_eq!(resumed, Progress::Connected(part as u32));
    // Joins before any chunk from after the restart comes, and reads as they come (paced a
    // little, so that its queue never fills and it never skips).
    let (raw, seen_header) = live_viewer(&relay.addr);
    let watching = std::thread::spawn(move || chunks_to_end(raw));
    for c in &chunks[part..] {
        p.send(c.clone());
        std::thread::sleep(Duration::from_millis(2));
    }
    p.finish(true).unwrap();
    let (got, reason) = watching.join().unwrap();
    assert_eq!(reason, EndReason::Finished);
    drop(relay);
    (seen_header, got)
}

fn seq_kind(c: &[u8]) -> (u32, bsor_stream::stream::ChunkType) {
    let h = ChunkHeader::parse_at(c).unwrap().0;
    (h.seq, h.kind)
}

#[test]
fn a_live_viewer_joining_after_a_restart_starts_at_a_keyframe() {
    use bsor_stream::stream::ChunkType;
    let (r, _, header, chunks) = stream();
    // Cut in the middle of a keyframe group, so that the chunk after the cut is not one.
    let mut part = chunks.len() / 2;
    while seq_kind(&chunks[part]).1 == ChunkType::Keyframes
        || seq_kind(&chunks[part - 1]).1 == ChunkType::Keyframes
    {
        part += 1;
    }
    let group_start = (0..part)
        .rev()
        .find(|&i| seq_kind(&chunks[i]).1 == ChunkType::Keyframes)
        .unwrap();
    let (seen_header, got) = late_joiner_after_a_kill(header.clone(), &chunks, part);
    assert!(seen_header == header);
    // Its first chunk is the keyframe chunk of the group the relay held before the kill,
    // and every chunk from it on follows, with no gap.
    assert_eq!(
        seq_kind(&got[0]),
        (group_start as u32, ChunkType::Keyframes)
    );
    assert!(
        got[..] == chunks[group_start..],
        "every chunk from the group on"
    );
    // It decodes from there: the source's frames from that keyframe on.
    let bytes = [&header[..], &got.concat()[..]].concat();
    let (back, _) = transcode::decode_replay(&bytes).unwrap();
    let first = r
        .frames
        .iter()
        .position(|f| f.time == back.frames[0].time)
        .unwrap();
    assert!(first > 0);
    assert!(back.frames[..] == r.frames[first..], "the source's frames");
}

#[test]
fn a_live_viewer_joining_a_signed_session_after_a_restart_gets_the_key_chunk_and_verifies() {
    use bsor_stream::integrity::{self, Signer, SigningKey, Verdict, KEY_CHUNK};
    use bsor_stream::stream::ChunkType;
    let r = synth::replay(synth::Settings {
        seed: 32,
        seconds: 20.0,
        fps: 60,
    });
    let signer = Signer::new(SigningKey::from_bytes(&[0x31; 32]), [0x4e; 16]);
    let public = signer.public_key();
    let file = integrity::sign_replay(&r, Settings::live(Profile::Lossless), signer).unwrap();
    let (header, chunks) = header_and_chunks(&file);
    let mut part = chunks.len() / 2;
    while seq_kind(&chunks[part]).1 == ChunkType::Keyframes {
        part += 1;
    }
    let group_start = (0..part)
        .rev()
        .find(|&i| seq_kind(&chunks[i]).1 == ChunkType::Keyframes)
        .unwrap();
    let (_, got) = late_joiner_after_a_kill(header.clone(), &chunks, part);
    // The key chunk first, then the group the relay held before the kill, and the rest.
    assert_eq!(seq_kind(&got[0]), (0, ChunkType::Unknown(KEY_CHUNK)));
    assert!(got[0] == chunks[0]);
    assert_eq!(
        seq_kind(&got[1]),
        (group_start as u32, ChunkType::Keyframes)
    );
    assert!(got[1..] == chunks[group_start..]);
    // What it got verifies as a late joiner's stream of the publisher's key (never
    // `valid`, integrity.md §8), nothing invalid.
    let bytes = [&header[..], &got.concat()[..]].concat();
    let rep = integrity::verify_stream(&bytes);
    assert_eq!(rep.signer_key, Some(public));
    assert_eq!(rep.verdict, Verdict::Incomplete, "{:?}", rep.reason);
    assert!(
        rep.reason.as_deref().unwrap_or("").contains("joined late"),
        "{:?}",
        rep.reason
    );
    // The same bytes as a late joiner of a relay that did not restart gets (asserted
    // above), so the same report: checkpoints from the group it joined at verified.
    assert!(rep.checkpoints > 0, "{rep:?}");
    assert!(
        rep.chain_valid_to_chunk
            .is_some_and(|c| c as usize > group_start),
        "{rep:?}"
    );
}

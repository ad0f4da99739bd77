//! The command-line tool, run as a user would.

use crate::common;

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

/// A folder of the test's own, removed when the test ends (pass or fail).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn tmp(dir: &tempfile::TempDir, name: &str) -> std::path::PathBuf {
    dir.path().join(name)
}

#[test]
fn synth_then_info_json() {
    let dir = scratch();
    let path = tmp(&dir, "synth.bsor");
    let out = bin()
        .args([
            "synth",
            "--seconds",
            "30",
            "--fps",
            "72",
            "--seed",
            "9",
            "-o",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bin().arg("info").arg(&path).arg("--json").output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frames"], 30 * 72);
    assert_eq!(v["playerName"], "Synthetic Player");
    assert_eq!(v["controllerOffsets"], true);
    assert!(v["userDataBytes"].as_u64().unwrap() > 0);
    assert!(v["walls"].as_u64().unwrap() > 0 || v["notes"].as_u64().unwrap() > 0);
    let d = v["durationSeconds"].as_f64().unwrap();
    assert!(d > 28.0 && d < 31.0, "{d}");
    assert_eq!(v["fps"]["median"], 72);
    let text = bin().arg("info").arg(&path).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("Synthetic Song") && text.contains("2160 frames"),
        "{text}"
    );
}

#[test]
fn info_json_agrees_with_expected_json() {
    let Some(dir) = common::corpus_dir() else {
        return;
    };
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    for e in expected.as_array().unwrap() {
        let name = e["file"].as_str().unwrap();
        let out = bin()
            .arg("info")
            .arg(dir.join(name))
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for key in [
            "frames",
            "notes",
            "walls",
            "heights",
            "pauses",
            "score",
            "songName",
            "difficulty",
            "mode",
            "controllerOffsets",
            "hmd",
            "platform",
        ] {
            assert_eq!(v[key], e[key], "{name}: {key}");
        }
        assert_eq!(v["modVersion"], e["modVersion"], "{name}");
        assert_eq!(
            v["noteEventTypes"]["good"], e["noteEventTypes"]["good"],
            "{name}"
        );
        let user_data = e
            .get("userDataBytes")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        assert_eq!(v["userDataBytes"], user_data, "{name}");
        assert!(v["durationSeconds"].as_f64().unwrap() > 60.0, "{name}");
    }
}

#[test]
fn export_writes_json_with_non_finite_floats_as_strings() {
    use bsor_stream::bsor;
    let dir = scratch();
    let mut r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
        seed: 2,
        seconds: 1.0,
        fps: 10,
    });
    r.frames[1].time = f32::NAN;
    r.frames[2].head.position.x = f32::NEG_INFINITY;
    let path = tmp(&dir, "nan.bsor");
    std::fs::write(&path, bsor::to_vec(&r).unwrap()).unwrap();
    let out = bin().arg("export").arg(&path).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frames"][1]["time"], "NaN");
    assert_eq!(v["frames"][2]["head"]["position"]["x"], "-Infinity");
    assert_eq!(v["frames"].as_array().unwrap().len(), 10);
    assert_eq!(v["info"]["playerName"], "Synthetic Player");
    assert!(v["notes"].is_array());
}

#[test]
fn errors_are_one_line_on_stderr_with_a_nonzero_exit() {
    let dir = scratch();
    let missing = tmp(&dir, "does-not-exist.bsor");
    for args in [
        vec!["info".into(), missing.clone().into_os_string()],
        vec!["info".into(), std::env::temp_dir().into_os_string()],
    ] {
        let out = bin().args(&args).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("bsor-stream: error: "), "{err}");
        assert!(out.stdout.is_empty());
    }
    // A truncated file names the section, field and byte.
    let r = bsor_stream::synth::replay(bsor_stream::synth::Settings::default());
    let bytes = bsor_stream::bsor::to_vec(&r).unwrap();
    let path = tmp(&dir, "truncated.bsor");
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let out = bin().arg("export").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("section frames") && err.contains("at byte"),
        "{err}"
    );
}

// Long: one end-to-end scenario with real processes, in the order a user runs it.
#[test]
fn encode_and_decode_through_pipes_and_files() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = scratch();
    let r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
        seed: 12,
        seconds: 20.0,
        fps: 90,
    });
    let bytes = bsor_stream::bsor::to_vec(&r).unwrap();
    // stdin → encode → stdout
    let mut enc = bin()
        .args(["encode", "-", "-o", "-", "--profile", "lossless"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = enc.stdin.take().unwrap();
    let input = bytes.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = enc.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let stream = out.stdout;
    assert!(stream.starts_with(b"BSRS"));
    // A file is read whole: its events go out by song time, as `encode_replay` places them,
    // where a pipe sends them after the frames (BSOR stores them last).
    let in_path = tmp(&dir, "pipe.bsor");
    std::fs::write(&in_path, &bytes).unwrap();
    let out = bin()
        .arg("encode")
        .arg(&in_path)
        .args(["-o", "-", "--profile", "lossless"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let settings = bsor_stream::stream::Settings::live(bsor_stream::stream::Profile::Lossless);
    assert!(out.stdout == bsor_stream::transcode::encode_replay(&r, settings));
    let first_event = |s: &[u8]| {
        let (_, _, chunks) = bsor_stream::stream::split_stream(s).unwrap();
        let kinds: Vec<u8> = chunks.iter().map(|c| c.header.kind.byte()).collect();
        kinds.iter().position(|&k| k == 3).unwrap() as f64 / kinds.len() as f64
    };
    assert!(first_event(&out.stdout) < 0.2 && first_event(&stream) > 0.8);
    // file → decode → file, and the info of the stream
    let s_path = tmp(&dir, "pipe.bsors");
    std::fs::write(&s_path, &stream).unwrap();
    let b_path = tmp(&dir, "pipe.decoded.bsor");
    let out = bin()
        .arg("decode")
        .arg(&s_path)
        .arg("-o")
        .arg(&b_path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&b_path).unwrap() == bytes);
    let info = bin()
        .arg("info")
        .arg(&s_path)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(v["frames"], r.frames.len());
    assert_eq!(v["profile"], "lossless");
    assert_eq!(v["streamBytes"], stream.len());
    assert!(v["chunks"].as_u64().unwrap() > 10 && v["keyframes"].as_u64().unwrap() >= 19);
    // events without pose data
    let ev = bin()
        .arg("events")
        .arg(&s_path)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ev.stdout).unwrap();
    assert_eq!(v["notes"].as_array().unwrap().len(), r.notes.len());
    // a damaged stream: partial recovery, exit status 2
    let mut bad = stream.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x55;
    let bad_path = tmp(&dir, "damaged.bsors");
    std::fs::write(&bad_path, &bad).unwrap();
    let out = bin()
        .arg("decode")
        .arg(&bad_path)
        .arg("-o")
        .arg("-")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("INCOMPLETE") && msg.contains("damage at byte"),
        "{msg}"
    );
    let part = bsor_stream::bsor::parse(&out.stdout).unwrap();
    assert!(part.frames.len() < r.frames.len() && part.frames.len() > r.frames.len() / 2);
    // a span
    let out = bin()
        .arg("decode")
        .arg(&s_path)
        .args(["--from", "5", "--to", "6", "-o", "-"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let span = bsor_stream::bsor::parse(&out.stdout).unwrap();
    assert!(span.frames.iter().all(|f| f.time >= 5.0 && f.time <= 6.0));
    assert!(
        (80..=100).contains(&span.frames.len()),
        "{}",
        span.frames.len()
    );
}

#[test]
fn decode_follow_reads_a_file_while_it_is_written() {
    use std::io::Write;
    let dir = scratch();
    let r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
        seed: 13,
        seconds: 10.0,
        fps: 60,
    });
    let bytes = bsor_stream::bsor::to_vec(&r).unwrap();
    let stream = bsor_stream::transcode::encode_replay(
        &r,
        bsor_stream::stream::Settings::live(bsor_stream::stream::Profile::Lossless),
    );
    let path = tmp(&dir, "growing.bsors");
    let out_path = tmp(&dir, "growing.bsor");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&stream[..stream.len() / 3]).unwrap();
    f.flush().unwrap();
    let child = bin()
        .arg("decode")
        .arg(&path)
        .arg("-o")
        .arg(&out_path)
        .arg("--follow")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for piece in stream[stream.len() / 3..].chunks(stream.len() / 5) {
        std::thread::sleep(std::time::Duration::from_millis(150));
        f.write_all(piece).unwrap();
        f.flush().unwrap();
    }
    let done = child.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(std::fs::read(&out_path).unwrap() == bytes);
}

#[test]
fn verify_reports_every_profile_as_json() {
    let dir = scratch();
    let r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
        seed: 14,
        seconds: 10.0,
        fps: 90,
    });
    let path = tmp(&dir, "verify.bsor");
    std::fs::write(&path, bsor_stream::bsor::to_vec(&r).unwrap()).unwrap();
    let out = bin()
        .arg("verify")
        .arg(&path)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        for key in [
            "file",
            "profile",
            "bsorBytes",
            "streamBytes",
            "ratio",
            "exact",
            "maxPositionErrorMm",
            "meanPositionErrorMm",
            "maxRotationErrorDeg",
            "meanRotationErrorDeg",
            "eventsExact",
        ] {
            assert!(row.get(key).is_some(), "{key}");
        }
        assert_eq!(row["eventsExact"], true);
    }
    assert_eq!(rows[0]["profile"], "lossless");
    assert_eq!(rows[0]["exact"], true);
    assert!(rows[1]["maxPositionErrorMm"].as_f64().unwrap() <= 0.1);
    assert!(rows[2]["maxRotationErrorDeg"].as_f64().unwrap() <= 0.2);
}

/// Starts `serve` on a free loopback port with these tokens: the process and its address.
fn relay(dir: &tempfile::TempDir, file: &str, tokens: &str) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let path = tmp(dir, file);
    std::fs::write(&path, tokens).unwrap();
    let mut child = bin()
        .args(["serve", "--tcp", "127.0.0.1:0", "--token-file"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        // Its log (INFO by default) is not the test runner's to print.
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().strip_prefix("listening tcp=").expect(&line);
    (child, addr.to_string())
}

#[test]
fn serve_prints_its_address_and_answers_hello() {
    use bsor_stream::net::wire::{Message, Role, WireCodec};
    use bytes::BytesMut;
    use std::io::{Read, Write};
    let dir = scratch();
    let (mut child, addr) = relay(&dir, "tokens.txt", "tok\n");
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut out = BytesMut::new();
    Message::Hello {
        min_version: 1,
        max_version: 1,
        role: Role::Viewer,
        agent: "cli test".into(),
    }
    .encode(&mut out);
    s.write_all(&out).unwrap();
    let mut buf = BytesMut::new();
    let mut codec = WireCodec::default();
    let reply = loop {
        if let Some(m) = codec.decode_from(&mut buf).unwrap() {
            break m;
        }
        let mut piece = [0u8; 256];
        let n = s.read(&mut piece).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&piece[..n]);
    };
    assert!(matches!(
        reply,
        Message::Hello {
            role: Role::Relay,
            ..
        }
    ));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn publish_and_watch_through_a_relay_rebuild_the_replay() {
    let dir = scratch();
    let replay = tmp(&dir, "published.bsor");
    let out = bin()
        .args(["synth", "--seconds", "8", "-o"])
        .arg(&replay)
        .output()
        .unwrap();
    assert!(out.status.success());
    let (mut relay, addr) = relay(&dir, "tokens2.txt", "song-1:tok\n");
    let watched = tmp(&dir, "watched.bsors");
    let watcher = bin()
        .args(["watch", &addr, "--session", "song-1", "--wait", "20", "-o"])
        .arg(&watched)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A wrong token is refused; the right one publishes (as fast as possible).
    let refused = bin()
        .arg("publish")
        .arg(&replay)
        .args([
            "--to",
            &addr,
            "--session",
            "song-1",
            "--token",
            "nope",
            "--speed",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("Unauthorized"), "{said}");
    assert!(
        said.contains("process list"),
        "--token is warned about: {said}"
    );
    assert!(said.contains("not published: "), "{said}");
    let token_file = tmp(&dir, "publisher-token.txt");
    std::fs::write(&token_file, "tok\n").unwrap();
    let published = bin()
        .arg("publish")
        .arg(&replay)
        .args([
            "--to",
            &addr,
            "--session",
            "song-1",
            "--speed",
            "0",
            "--token-file",
        ])
        .arg(&token_file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&published.stderr);
    assert!(published.status.success(), "{said}");
    // The summary: every chunk of the song sent and acknowledged, no reconnection.
    let summary = said.lines().last().unwrap_or_default();
    let sent = summary
        .split(", ")
        .find_map(|p| p.strip_suffix(" chunks sent"))
        .expect(summary);
    assert!(sent.parse::<u32>().unwrap() > 0, "{summary}");
    assert!(
        summary.contains(&format!(
            "{sent} chunks sent, {sent} acknowledged, 0 reconnects"
        )),
        "{summary}"
    );
    assert!(summary.starts_with("published: "), "{summary}");
    assert!(!said.contains("process list"), "{said}");
    let status = watcher.wait_with_output().unwrap().status;
    relay.kill().unwrap();
    relay.wait().unwrap();
    assert!(status.success());
    let decoded = tmp(&dir, "watched.bsor");
    let out = bin()
        .arg("decode")
        .arg(&watched)
        .arg("-o")
        .arg(&decoded)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&decoded).unwrap() == std::fs::read(&replay).unwrap());
}

#[test]
fn demo_streams_a_synthetic_song_to_three_viewers() {
    let out = bin().args(["demo", "--speed", "20"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for v in 1..=3 {
        assert!(text.contains(&format!("viewer {v}: 1800 frames")), "{text}");
    }
    assert!(text.contains("sizes: BSOR"), "{text}");
}

// Long: one end-to-end scenario with real processes, in the order a user runs it.
#[test]
fn serve_over_websocket_with_an_archive_that_ctrl_c_finishes() {
    use bsor_stream::net::wire::{Message, Role, WireCodec};
    use bytes::BytesMut;
    use std::io::{BufRead, BufReader, Read, Write};

    let dir = scratch();
    let replay = tmp(&dir, "archived.bsor");
    let out = bin()
        .args(["synth", "--seconds", "8", "--seed", "5", "-o"])
        .arg(&replay)
        .output()
        .unwrap();
    assert!(out.status.success());
    let tokens = tmp(&dir, "tokens3.txt");
    std::fs::write(&tokens, "tok\n").unwrap();
    let archive = tmp(&dir, "archive-dir");
    let mut relay = bin()
        .args([
            "serve",
            "--tcp",
            "127.0.0.1:0",
            "--ws",
            "127.0.0.1:0",
            "--archive",
        ])
        .arg(&archive)
        .arg("--token-file")
        .arg(&tokens)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(relay.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let rest = line.trim().strip_prefix("listening tcp=").expect(&line);
    let (tcp, ws) = rest.split_once(" ws=").expect(&line);

    // Watched over TCP, published over WebSocket.
    let watched = tmp(&dir, "ws-watched.bsors");
    let watcher = bin()
        .args(["watch", tcp, "--session", "song", "--wait", "20", "-o"])
        .arg(&watched)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let published = bin()
        .arg("publish")
        .arg(&replay)
        .args(["--to", ws, "--ws", "--session", "song"])
        .args(["--token-env", "BSOR_STREAM_TEST_TOKEN", "--speed", "0"])
        .env("BSOR_STREAM_TEST_TOKEN", "tok")
        .output()
        .unwrap();
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    assert!(watcher.wait_with_output().unwrap().status.success());
    // The watched file is the archive, footer and all, and decodes to the replay.
    let archived = archive.join("song.bsors");
    let mut same = false;
    for _ in 0..100 {
        if std::fs::read(&archived).unwrap_or_default() == std::fs::read(&watched).unwrap() {
            same = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(same, "the archive equals what the viewer wrote");
    let decoded = tmp(&dir, "ws-watched.bsor");
    let out = bin()
        .arg("decode")
        .arg(&watched)
        .arg("-o")
        .arg(&decoded)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(std::fs::read(&decoded).unwrap() == std::fs::read(&replay).unwrap());
    // Watched again after the end, over WebSocket: the whole stream, from the archive.
    let again = tmp(&dir, "ws-again.bsors");
    let out = bin()
        .args([
            "watch",
            ws,
            "--ws",
            "--session",
            "song",
            "--wait",
            "5",
            "-o",
        ])
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("latency") && said.contains("worst"), "{said}");
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&archived).unwrap());

    // A session cut by Ctrl-C: its file holds every acknowledged chunk, a valid
    // truncated stream.
    let stream = std::fs::read(&watched).unwrap();
    let (_, header_len, spans) = bsor_stream::stream::split_stream(&stream).unwrap();
    let mut s = std::net::TcpStream::connect(tcp).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut out = BytesMut::new();
    Message::Hello {
        min_version: 1,
        max_version: 1,
        role: Role::Publisher,
        agent: "cli test".into(),
    }
    .encode(&mut out);
    Message::Publish {
        session: "cut".into(),
        token: "tok".into(),
        resume: false,
        publisher_key: [3; 16],
    }
    .encode(&mut out);
    s.write_all(&out).unwrap();
    // As wire.md 3.1 says a publisher must: the stream only once `Resume` has come (the
    // relay first looks the name up in its archive).
    let mut buf = BytesMut::new();
    let mut codec = WireCodec::default();
    'resumed: loop {
        while let Some(m) = codec.decode_from(&mut buf).unwrap() {
            if let Message::Resume(next) = m {
                assert_eq!(next, 0, "a new session");
                break 'resumed;
            }
        }
        let mut piece = [0u8; 256];
        let n = s.read(&mut piece).unwrap();
        assert!(n > 0, "connection closed before Resume");
        buf.extend_from_slice(&piece[..n]);
    }
    let mut out = BytesMut::new();
    Message::StreamHeader(bytes::Bytes::copy_from_slice(&stream[..header_len])).encode(&mut out);
    for c in &spans[..20] {
        Message::Chunk(bytes::Bytes::copy_from_slice(c.bytes(&stream))).encode(&mut out);
    }
    s.write_all(&out).unwrap();
    'acked: loop {
        while let Some(m) = codec.decode_from(&mut buf).unwrap() {
            if m == Message::Ack(19) {
                break 'acked;
            }
        }
        let mut piece = [0u8; 256];
        let n = s.read(&mut piece).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&piece[..n]);
    }
    let killed = Command::new("kill")
        .args(["-INT", &relay.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(relay.wait().unwrap().success(), "Ctrl-C is a clean exit");
    let cut = std::fs::read(archive.join("cut.bsors")).unwrap();
    assert!(cut == stream[..spans[19].offset + spans[19].len]);
    let out = bin()
        .arg("decode")
        .arg(archive.join("cut.bsors"))
        .arg("-o")
        .arg(tmp(&dir, "cut.bsor"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "recovered in part");
}

#[test]
fn decode_to_a_file_takes_a_final_info_of_any_length_and_leaves_nothing_on_failure() {
    use bsor_stream::stream::{Profile, Settings, StreamEncoder};
    let dir = scratch();
    let mut r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
        seed: 5,
        seconds: 2.0,
        fps: 60,
    });
    let mut start = r.info.clone();
    start.modifiers = "FS".into();
    r.info.modifiers = "FS,NF".into();
    let mut enc = StreamEncoder::new(start, Settings::live(Profile::Lossless));
    for f in &r.frames {
        enc.push_frame(f);
    }
    for n in &r.notes {
        enc.push_note(*n);
    }
    enc.finish(r.info.clone(), None, None, Vec::new());
    let stream = tmp(&dir, "modifiers.bsors");
    std::fs::write(&stream, enc.take_output()).unwrap();
    let out = tmp(&dir, "modifiers.bsor");
    let run = bin()
        .arg("decode")
        .arg(&stream)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let back = bsor_stream::bsor::parse(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(back.info.modifiers.as_str(), Some("FS,NF"));
    assert_eq!(back.frames.len(), r.frames.len());
    // A stream that is not one: an error, and neither the output nor a temporary is left.
    let junk = tmp(&dir, "junk.bsors");
    std::fs::write(&junk, b"not a stream at all").unwrap();
    let failed = tmp(&dir, "junk.bsor");
    let run = bin()
        .arg("decode")
        .arg(&junk)
        .arg("-o")
        .arg(&failed)
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(!failed.exists());
    let dir = failed.parent().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".partial-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// The first answer to `Hello` and `Publish` for `session` with `token` over TCP: `Resume`
/// when the relay lets it publish, an `Error` when not.
pub(crate) fn try_publish(
    addr: &str,
    session: &str,
    token: &str,
) -> bsor_stream::net::wire::Message {
    use bsor_stream::net::wire::{Message, Role, WireCodec};
    use bytes::BytesMut;
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut out = BytesMut::new();
    Message::Hello {
        min_version: 1,
        max_version: 1,
        role: Role::Publisher,
        agent: "cli test".into(),
    }
    .encode(&mut out);
    Message::Publish {
        session: session.into(),
        token: token.into(),
        resume: false,
        publisher_key: [9; 16],
    }
    .encode(&mut out);
    s.write_all(&out).unwrap();
    let (mut buf, mut codec) = (BytesMut::new(), WireCodec::default());
    loop {
        while let Some(m) = codec.decode_from(&mut buf).unwrap() {
            if !matches!(m, Message::Hello { .. }) {
                return m;
            }
        }
        let mut piece = [0u8; 256];
        let n = s.read(&mut piece).unwrap();
        assert!(n > 0, "connection closed without an answer");
        buf.extend_from_slice(&piece[..n]);
    }
}

/// Sends `signal` (`HUP`, `TERM`, ...) to the process.
fn signal(child: &std::process::Child, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Kills the relay if the test fails before it stops it.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sighup_reloads_the_token_file_and_sigterm_stops_the_relay_cleanly() {
    use bsor_stream::net::wire::{ErrorCode, Message};
    let dir = scratch();
    let (child, addr) = relay(&dir, "tokens.txt", "old\n");
    let relay = Running(child);
    let refused = |m: &Message| {
        matches!(
            m,
            Message::Error {
                code: ErrorCode::Unauthorized,
                ..
            }
        )
    };
    assert_eq!(try_publish(&addr, "s1", "old"), Message::Resume(0));
    assert!(refused(&try_publish(&addr, "s2", "new")));

    std::fs::write(tmp(&dir, "tokens.txt"), "# rotated\nnew\n").unwrap();
    signal(&relay.0, "HUP");
    // The signal is handled on the relay's own time: ask until the new token works (every
    // answer is either the old refusal or the new acceptance, never a dead relay).
    let mut reloaded = false;
    for i in 0..100 {
        match try_publish(&addr, &format!("n{i}"), "new") {
            Message::Resume(0) => {
                reloaded = true;
                break;
            }
            m => assert!(refused(&m), "{m:?}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(reloaded, "the new token never worked");
    assert!(refused(&try_publish(&addr, "s3", "old")));

    // A file that cannot be read, or holds no token, keeps the tokens in force.
    std::fs::write(tmp(&dir, "tokens.txt"), "# emptied\n").unwrap();
    signal(&relay.0, "HUP");
    std::fs::remove_file(tmp(&dir, "tokens.txt")).unwrap();
    signal(&relay.0, "HUP");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(try_publish(&addr, "s4", "new"), Message::Resume(0));

    // SIGTERM stops it, as a clean exit.
    let mut relay = relay;
    signal(&relay.0, "TERM");
    assert!(relay.0.wait().unwrap().success(), "SIGTERM is a clean exit");
}

#[test]
fn publish_names_where_a_missing_token_should_have_come_from() {
    let dir = scratch();
    let empty = tmp(&dir, "empty-token.txt");
    std::fs::write(&empty, "\n").unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        bin()
            .args([
                "publish",
                "song.bsor",
                "--to",
                "127.0.0.1:9",
                "--session",
                "s",
            ])
            .args(args)
            .env_remove("BSOR_STREAM_UNSET_TOKEN")
            .output()
            .unwrap()
    };
    let out = run(&["--token-env".as_ref(), "BSOR_STREAM_UNSET_TOKEN".as_ref()]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--token-env BSOR_STREAM_UNSET_TOKEN"),
        "{said}"
    );
    let out = run(&["--token-file".as_ref(), empty.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no token in the first line of"), "{said}");
    // One source only, and one is required.
    let out = run(&[
        "--token".as_ref(),
        "a".as_ref(),
        "--token-env".as_ref(),
        "B".as_ref(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(run(&[]).status.code(), Some(2));
}

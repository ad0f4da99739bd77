//! The recorder runtime: what the game pushes comes out in every sink, a full ring refuses
//! instead of stalling, a failed sink leaves the others going, a recorder dropped mid-song
//! leaves a decodable stream, and the live sink survives a lost connection.

use std::path::Path;
use std::time::{Duration, Instant};

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::recorder::{Config, LiveConfig, OnFull, Push, Recorder, SinkState};
use bsor_stream_core::stream::{Profile, Settings};
use bsor_stream_core::{synth, transcode};

fn song(seed: u64, seconds: f32) -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed,
        seconds,
        fps: 90,
    });
    r.trailing.clear();
    r
}

/// The info as a game knows it when the song starts: no score yet.
fn start_info(r: &Replay) -> bsor::Info {
    let mut i = r.info.clone();
    i.score = 0;
    i.fail_time = 0.0;
    i
}

/// A folder of the test's own, removed with it (pass or fail).
struct Scratch(tempfile::TempDir);

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

fn dir(name: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("bsor-recorder-{name}-"))
            .tempdir()
            .unwrap(),
    )
}

/// Pushes the song as a game would: events interleaved with frames at their song times.
fn play(rec: &mut Recorder, r: &Replay) -> Vec<Push> {
    let mut out = Vec::new();
    let (mut n, mut w, mut h, mut p) = (0, 0, 0, 0);
    for f in &r.frames {
        while n < r.notes.len() && r.notes[n].event_time <= f.time {
            out.push(rec.push_note(&r.notes[n]));
            n += 1;
        }
        while w < r.walls.len() && r.walls[w].time <= f.time {
            out.push(rec.push_wall(&r.walls[w]));
            w += 1;
        }
        while h < r.heights.len() && r.heights[h].time <= f.time {
            out.push(rec.push_height(&r.heights[h]));
            h += 1;
        }
        while p < r.pauses.len() && r.pauses[p].time <= f.time {
            out.push(rec.push_pause(&r.pauses[p]));
            p += 1;
        }
        out.push(rec.push_frame(f));
    }
    out.extend(r.notes[n..].iter().map(|x| rec.push_note(x)));
    out.extend(r.walls[w..].iter().map(|x| rec.push_wall(x)));
    out.extend(r.heights[h..].iter().map(|x| rec.push_height(x)));
    out.extend(r.pauses[p..].iter().map(|x| rec.push_pause(x)));
    if let Some(o) = r.controller_offsets {
        rec.set_controller_offsets(o);
    }
    if let Some(d) = &r.user_data {
        rec.set_user_data(d);
    }
    out
}

/// A stream file and a classic file in `d`.
fn both_files(d: &Path) -> Config {
    Config {
        stream_file: Some(d.join("song.bsors")),
        classic_file: Some(d.join("song.bsor")),
        ..Config::default()
    }
}

type Logged = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A log callback that keeps every message.
fn logger() -> (Logged, bsor_stream_core::recorder::LogFn) {
    let logged = Logged::default();
    let keep = std::sync::Arc::clone(&logged);
    let f: bsor_stream_core::recorder::LogFn =
        std::sync::Arc::new(move |_, m: &str| keep.lock().unwrap().push(m.to_string()));
    (logged, f)
}

fn decode(path: &Path) -> (Replay, transcode::Recovery) {
    transcode::decode_replay(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_recorded_song_comes_out_whole_in_the_stream_and_the_classic_file() {
    let r = song(5, 30.0);
    let d = dir("whole");
    let config = both_files(&d);
    let mut rec = Recorder::start(start_info(&r), config).unwrap();
    let pushes = play(&mut rec, &r);
    assert!(pushes.iter().all(|p| *p == Push::Queued));
    assert!(rec.finish(r.info.clone()));
    assert_eq!(rec.push_frame(&r.frames[0]), Push::Closed);
    let st = rec
        .wait(Duration::from_secs(30))
        .expect("the recorder ends");
    assert_eq!(st.stream_file, SinkState::Done, "{st:?}");
    assert_eq!(st.classic, SinkState::Done, "{st:?}");
    assert_eq!(st.accepted, pushes.len() as u64);
    assert_eq!(st.encoded, st.accepted);
    assert_eq!((st.dropped, st.refused), (0, 0));

    let want = bsor::to_vec(&r).unwrap();
    assert_eq!(std::fs::read(d.join("song.bsor")).unwrap(), want);
    let (back, rec) = decode(&d.join("song.bsors"));
    assert!(rec.complete, "{rec:?}");
    assert_eq!(bsor::to_vec(&back).unwrap(), want);
    assert_eq!(
        st.stream_bytes,
        std::fs::metadata(d.join("song.bsors")).unwrap().len()
    );
    // Only the two replays are left: no spool, no part file.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
}

#[test]
fn a_lossy_recording_keeps_times_and_events_and_the_classic_file_keeps_every_bit() {
    let r = song(6, 12.0);
    let d = dir("lossy");
    let config = Config {
        settings: Settings::live(Profile::Compact),
        stream_file: Some(d.join("song.bsors")),
        classic_file: Some(d.join("song.bsor")),
        ..Config::default()
    };
    let mut rec = Recorder::start(start_info(&r), config).unwrap();
    let _ = play(&mut rec, &r);
    rec.finish(r.info.clone());
    rec.wait(Duration::from_secs(30)).unwrap();
    assert_eq!(
        std::fs::read(d.join("song.bsor")).unwrap(),
        bsor::to_vec(&r).unwrap()
    );
    let (back, _) = decode(&d.join("song.bsors"));
    assert_eq!(back.notes, r.notes);
    assert_eq!(back.frames.len(), r.frames.len());
    assert!(back
        .frames
        .iter()
        .zip(&r.frames)
        .all(|(a, b)| a.time.to_bits() == b.time.to_bits()));
}

#[test]
fn a_recorder_dropped_mid_song_leaves_a_stream_of_what_it_took_and_no_classic_file() {
    let r = song(7, 20.0);
    let d = dir("dropped");
    let config = both_files(&d);
    let mut rec = Recorder::start(start_info(&r), config).unwrap();
    let half = r.frames.len() / 2;
    for f in &r.frames[..half] {
        assert_eq!(rec.push_frame(f), Push::Queued);
    }
    drop(rec);
    let (back, recovery) = decode(&d.join("song.bsors"));
    assert!(!recovery.complete);
    assert_eq!(back.frames, r.frames[..half]);
    assert!(!d.join("song.bsor").exists());
    assert_eq!(
        std::fs::read_dir(&d).unwrap().count(),
        1,
        "the spool is gone"
    );
}

#[test]
fn while_the_game_pauses_the_file_catches_up_within_the_flush_interval() {
    let r = song(8, 10.0);
    let d = dir("pause");
    let path = d.join("song.bsors");
    let config = Config {
        stream_file: Some(path.clone()),
        ..Config::default()
    };
    let mut rec = Recorder::start(start_info(&r), config).unwrap();
    let part = r.frames.len() / 3;
    for f in &r.frames[..part] {
        assert_eq!(rec.push_frame(f), Push::Queued);
    }
    // No more frames come (a pause, a crash about to happen): every frame taken reaches
    // the file without a later frame closing its chunk. Bounded wait.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while Instant::now() < deadline {
        got = transcode::decode_replay(&std::fs::read(&path).unwrap_or_default())
            .map_or(0, |(x, _)| x.frames.len());
        if got == part {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(got, part);
    drop(rec);
}

#[test]
fn a_full_ring_refuses_or_drops_and_counts_but_never_loses_what_it_took() {
    let r = song(9, 5.0);
    for on_full in [OnFull::Drop, OnFull::BackPressure] {
        let d = dir(&format!("full-{on_full:?}"));
        let config = Config {
            queue_capacity: 8,
            on_full,
            // The background looks rarely: the ring fills.
            poll_interval: Duration::from_millis(200),
            stream_file: Some(d.join("song.bsors")),
            ..Config::default()
        };
        let mut rec = Recorder::start(start_info(&r), config).unwrap();
        let mut taken = Vec::new();
        for f in &r.frames {
            match rec.push_frame(f) {
                Push::Queued => taken.push(*f),
                Push::Dropped => assert_eq!(on_full, OnFull::Drop),
                Push::Full => assert_eq!(on_full, OnFull::BackPressure),
                Push::Closed => unreachable!(),
            }
        }
        rec.finish(r.info.clone());
        let st = rec.wait(Duration::from_secs(30)).unwrap();
        let refused = r.frames.len() - taken.len();
        assert!(refused > 0);
        assert_eq!(st.accepted as usize, taken.len());
        assert_eq!((st.dropped + st.refused) as usize, refused);
        let (back, _) = decode(&d.join("song.bsors"));
        assert_eq!(back.frames, taken);
    }
}

#[test]
fn a_failed_sink_is_reported_and_the_others_go_on() {
    let r = song(10, 5.0);
    let d = dir("failed");
    let (logged, log) = logger();
    let config = Config {
        stream_file: Some(d.join("no-such-dir").join("song.bsors")),
        classic_file: Some(d.join("song.bsor")),
        log: Some(log),
        ..Config::default()
    };
    let mut rec = Recorder::start(start_info(&r), config).unwrap();
    let _ = play(&mut rec, &r);
    rec.finish(r.info.clone());
    let st = rec.wait(Duration::from_secs(30)).unwrap();
    assert_eq!(st.stream_file, SinkState::Failed);
    assert_eq!(st.classic, SinkState::Done);
    assert!(st.last_error.as_deref().unwrap().contains("no-such-dir"));
    assert!(logged
        .lock()
        .unwrap()
        .iter()
        .any(|m| m.contains("no-such-dir")));
    assert_eq!(
        std::fs::read(d.join("song.bsor")).unwrap(),
        bsor::to_vec(&r).unwrap()
    );
}

mod live {
    use super::*;
    use bsor_stream_core::net::relay::{RelayConfig, Tokens};
    use bsor_stream_core::net::wire::{Message, Role, ViewMode};
    use bsor_stream_relay::server::{Server, ServerConfig};
    use bsor_stream_relay::tcp;
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::codec::Framed;

    /// A proxy that cuts the first connection after `cut` bytes from the client, and passes
    /// later connections through.
    async fn cutting_proxy(to: std::net::SocketAddr, cut: usize) -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let mut first = true;
            while let Ok((mut client, _)) = l.accept().await {
                let limit = if first { Some(cut) } else { None };
                first = false;
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(to).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.split();
                    let (mut sr, mut sw) = server.split();
                    let up = async {
                        let mut buf = [0u8; 4096];
                        let mut passed = 0;
                        loop {
                            let n = cr.read(&mut buf).await.unwrap_or(0);
                            let n = limit.map_or(n, |l| n.min(l - passed));
                            if n == 0 || sw.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                            passed += n;
                        }
                    };
                    let down = tokio::io::copy(&mut sr, &mut cw);
                    tokio::select! { () = up => {}, _ = down => {} }
                });
            }
        });
        addr
    }

    /// A multi-threaded runtime for a test's relay and viewers.
    pub(super) fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Starts a relay (token `tok`) on `addr` and returns where it listens.
    pub(super) async fn relay_on(addr: &str) -> std::net::SocketAddr {
        let l = TcpListener::bind(addr).await.unwrap();
        let bound = l.local_addr().unwrap();
        let server = Server::new(
            RelayConfig::default(),
            Tokens::parse("tok"),
            ServerConfig {
                ..ServerConfig::default()
            },
        )
        .unwrap();
        tokio::spawn(tcp::serve(l, server));
        bound
    }

    /// Subscribes in complete mode and collects the stream until `End`.
    pub(super) async fn viewer(addr: std::net::SocketAddr, session: &str) -> Vec<u8> {
        let mut c = Framed::new(
            TcpStream::connect(addr).await.unwrap(),
            tcp::Framing::default(),
        );
        c.send(Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Viewer,
            agent: "test".into(),
        })
        .await
        .unwrap();
        c.send(Message::Subscribe {
            session: session.into(),
            mode: ViewMode::Complete,
            wait_ms: 20_000,
            from: 0,
        })
        .await
        .unwrap();
        let mut got = Vec::new();
        while let Some(Ok(m)) = c.next().await {
            match m {
                Message::StreamHeader(h) | Message::Chunk(h) => got.extend_from_slice(&h),
                Message::End(_) => break,
                Message::Hello { .. } => {}
                m => panic!("viewer got {m:?}"),
            }
        }
        got
    }

    #[test]
    fn the_live_sink_publishes_the_song_and_resumes_after_a_cut_connection() {
        let rt = super::live::runtime();
        let r = song(11, 15.0);
        let (relay_addr, watcher) = rt.block_on(async {
            let addr = relay_on("127.0.0.1:0").await;
            (addr, tokio::spawn(viewer(addr, "rec")))
        });
        // The publisher's first connection is cut after 20 kB: it must resume.
        let proxy = rt.block_on(cutting_proxy(relay_addr, 20_000));
        let mut live = LiveConfig::new(&proxy.to_string(), "rec", "tok");
        live.retry_every = Duration::from_millis(50);
        let (logged, log) = logger();
        let config = Config {
            live: Some(live),
            log: Some(log),
            ..Config::default()
        };
        let mut rec = Recorder::start(start_info(&r), config).unwrap();
        // Paced at 20x the song's speed, so the cut comes mid-song.
        let start = Instant::now();
        let t0 = r.frames[0].time;
        let mut states = vec![];
        for f in &r.frames {
            let due = Duration::from_secs_f32(((f.time - t0) / 20.0).max(0.0));
            if let Some(w) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(w);
            }
            assert_eq!(rec.push_frame(f), Push::Queued);
            let live = rec.status().live;
            if states.last() != Some(&live) {
                states.push(live);
            }
        }
        // Not connected until the first connection, then running.
        let running = states.iter().position(|s| *s == SinkState::Running);
        assert!(running.is_some(), "{states:?}");
        assert!(!states[running.unwrap()..].contains(&SinkState::Failed));
        rec.finish(r.info.clone());
        let st = rec.wait(Duration::from_secs(30)).unwrap();
        assert_eq!(st.live, SinkState::Done, "{st:?}");
        let logged = logged.lock().unwrap().clone();
        assert!(
            logged.iter().any(|m| m.contains("reconnecting")),
            "the cut happened: {logged:?}"
        );
        let got = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(30), watcher).await })
            .expect("the viewer ends")
            .unwrap();
        let (back, recovery) = transcode::decode_replay(&got).unwrap();
        assert!(recovery.complete, "{recovery:?}");
        assert_eq!(back.frames, r.frames);
        assert_eq!(back.info, r.info);
    }
}

mod spill {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn with_the_relay_away_the_live_sink_spills_to_disk_and_sends_everything_later() {
        let rt = super::live::runtime();
        let r = song(12, 20.0);
        let d = dir("spill");
        // A port with nobody on it yet.
        let addr = rt.block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        });
        let mut live = LiveConfig::new(&addr.to_string(), "away", "tok");
        live.retry_every = Duration::from_millis(50);
        live.buffer_bytes = 4096;
        live.spill_dir = Some(d.to_path_buf());
        let (logged, log) = logger();
        let config = Config {
            live: Some(live),
            log: Some(log),
            ..Config::default()
        };
        let mut rec = Recorder::start(start_info(&r), config).unwrap();
        let _ = play(&mut rec, &r);
        // The whole song is recorded while the relay is away: far more than 4 kB waits.
        let deadline = Instant::now() + Duration::from_secs(10);
        while rec.status().encoded < rec.status().accepted && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let spill_files = std::fs::read_dir(&d).unwrap().count();
        assert_eq!(spill_files, 1, "chunks went to a spill file");
        // The relay comes up on that port; the sink connects and sends everything.
        rt.block_on(super::live::relay_on(&addr.to_string()));
        let watcher = rt.spawn(super::live::viewer(addr, "away"));
        rec.finish(r.info.clone());
        let st = rec.wait(Duration::from_secs(30)).unwrap();
        assert_eq!(st.live, SinkState::Done, "{st:?}");
        let got = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(30), watcher).await })
            .expect("the viewer ends")
            .unwrap();
        let (back, recovery) = transcode::decode_replay(&got).unwrap();
        assert!(recovery.complete, "{recovery:?}");
        assert_eq!(bsor::to_vec(&back).unwrap(), bsor::to_vec(&r).unwrap());
        assert!(logged
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.contains("spilling")));
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            0,
            "the spill file is gone"
        );
    }
}

mod crash {
    use super::*;

    const CHILD: &str = "BSRS_CRASH_CHILD";
    const CRASH_AT: f32 = 2.5;

    /// Run by the test below in a process of its own (does nothing otherwise): records at
    /// song speed and aborts the process at `CRASH_AT` seconds of song.
    #[test]
    fn child_process_that_crashes_mid_song() {
        let Some(path) = std::env::var_os(CHILD) else {
            return;
        };
        let r = song(13, 10.0);
        let config = Config {
            stream_file: Some(path.into()),
            ..Config::default()
        };
        let mut rec = Recorder::start(start_info(&r), config).unwrap();
        let start = Instant::now();
        for f in &r.frames {
            if f.time >= CRASH_AT {
                std::process::abort();
            }
            let due = Duration::from_secs_f32(f.time.max(0.0));
            if let Some(w) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(w);
            }
            assert_eq!(rec.push_frame(f), Push::Queued);
        }
    }

    #[test]
    fn a_crash_mid_song_loses_at_most_about_the_last_flush_interval() {
        let d = dir("crash");
        let path = d.join("song.bsors");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "recorder::crash::child_process_that_crashes_mid_song",
            ])
            .env(CHILD, &path)
            .output()
            .unwrap();
        assert!(!out.status.success(), "the child aborted");
        let r = song(13, 10.0);
        let (back, recovery) = decode(&path);
        assert!(!recovery.complete);
        assert_eq!(
            back.frames,
            r.frames[..back.frames.len()],
            "a prefix, exact"
        );
        // Everything up to the flush interval (100 ms) before the crash is on disk; 300 ms
        // more of slack for the background's polling and a loaded machine.
        let must = r.frames.iter().filter(|f| f.time < CRASH_AT - 0.4).count();
        println!(
            "on disk: {} frames, up to {:?} s; crash at {CRASH_AT} s",
            back.frames.len(),
            back.frames.last().map(|f| f.time)
        );
        assert!(
            back.frames.len() >= must,
            "{} frames on disk, {must} expected at least",
            back.frames.len()
        );
    }
}

#[test]
fn a_ring_outside_its_range_is_refused_before_anything_is_allocated() {
    use bsor_stream_core::recorder::{StartError, MAX_QUEUE_CAPACITY};
    let info = start_info(&song(3, 1.0));
    for capacity in [0, MAX_QUEUE_CAPACITY + 1, usize::MAX] {
        let config = Config {
            queue_capacity: capacity,
            ..Config::default()
        };
        match Recorder::start(info.clone(), config) {
            Err(StartError::Capacity(c)) => assert_eq!(c, capacity),
            other => panic!("{capacity}: {:?}", other.map(|_| ())),
        }
    }
    // The largest allowed ring starts (and the smallest).
    for capacity in [1, MAX_QUEUE_CAPACITY] {
        let config = Config {
            queue_capacity: capacity,
            ..Config::default()
        };
        let mut rec = Recorder::start(info.clone(), config).expect("in range");
        assert!(rec.finish(info.clone()));
    }
}

#[test]
fn calls_after_finish_keep_nothing() {
    let info = start_info(&song(3, 1.0));
    let mut rec = Recorder::start(info.clone(), Config::default()).unwrap();
    assert!(rec.set_controller_offsets(bsor::ControllerOffsets::default()));
    assert!(rec.set_user_data(b"before"));
    assert!(rec.finish(info.clone()));
    assert!(!rec.set_controller_offsets(bsor::ControllerOffsets::default()));
    assert!(!rec.set_user_data(b"after"));
    assert_eq!(rec.push_frame(&bsor::Frame::default()), Push::Closed);
    assert!(!rec.finish(info));
}

/// With no relay at its address, the live sink says it is not connected, then gives up
/// after its retries, and the other sinks go on.
#[test]
fn an_unreachable_relay_shows_as_connecting_then_failed_after_the_retries() {
    // A port held without listening: connections to it are refused, and no other test of
    // this binary (they run side by side) can start listening on it meanwhile.
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    held.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let addr = held.local_addr().unwrap().as_socket().unwrap();
    let mut live = LiveConfig::new(&addr.to_string(), "away", "tok");
    live.retry_every = Duration::from_millis(20);
    live.max_retries = 3;
    // The count alone decides (by default the sink keeps trying for 60 s).
    live.retry_for = Duration::ZERO;
    let r = song(4, 2.0);
    let config = Config {
        live: Some(live),
        ..Config::default()
    };
    let mut rec = Recorder::start(start_info(&r), config).unwrap();
    let mut states = vec![];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut pushed = play(&mut rec, &r).into_iter();
    assert!(pushed.all(|p| p == Push::Queued));
    while Instant::now() < deadline {
        let live = rec.status().live;
        if states.last() != Some(&live) {
            states.push(live);
        }
        if live == SinkState::Failed {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    states.retain(|s| *s != SinkState::Off);
    assert_eq!(
        states,
        [SinkState::Connecting, SinkState::Failed],
        "never running"
    );
    let e = rec.status().last_error.unwrap_or_default();
    assert!(e.contains("live"), "{e}");
    assert!(rec.finish(r.info.clone()));
    let st = rec.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(st.live, SinkState::Failed);
    assert_eq!(st.encoded, st.accepted);
}

/// `close` with room to wait is a drop that says the background ended: the files are
/// complete after a finish.
#[test]
fn close_after_finish_with_time_to_wait_leaves_complete_files() {
    let r = song(8, 3.0);
    let d = dir("close");
    let mut rec = Recorder::start(start_info(&r), both_files(&d)).unwrap();
    assert!(play(&mut rec, &r).iter().all(|p| *p == Push::Queued));
    assert!(rec.finish(r.info.clone()));
    assert!(rec.close(Duration::from_secs(30)), "ended within the wait");
    let (back, recovery) = decode(&d.join("song.bsors"));
    assert!(recovery.complete, "{recovery:?}");
    assert_eq!(back.frames, r.frames);
    assert_eq!(
        std::fs::read(d.join("song.bsor")).unwrap(),
        bsor::to_vec(&r).unwrap()
    );
}

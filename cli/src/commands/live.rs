//! `publish` and `watch` over TCP or WebSocket, and `demo`.

use std::path::Path;
use std::time::{Duration, Instant};

use bsor_stream::bsor;
use bsor_stream::net::archive::StreamWriter;
use std::ops::ControlFlow;

use bsor_stream::net::client::{ClientConfig, ClientEvent, Subscription};
use bsor_stream::net::wire::{EndReason, ViewMode};
use bsor_stream::net::{publisher, tcp, tls, viewer};
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
    let bytes = read_all(file)?;
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

/// Where `publish` and `watch` reach the relay.
pub struct RelayAt<'a> {
    /// `HOST:PORT` (or a URL with `websocket`).
    pub addr: &'a str,
    /// Over WebSocket.
    pub websocket: bool,
    /// Over TLS, trusting this PEM file's certificates only.
    pub ca_file: Option<&'a Path>,
}

/// `publish FILE --to ADDR --session NAME --token TOKEN [--speed X]`: sends the song as a
/// recorder would, paced at X times the song's speed (0: as fast as possible), and resumes
/// after a lost connection.
pub fn publish(
    file: &Path,
    relay: &RelayAt<'_>,
    session: &str,
    token: &str,
    speed: f32,
    settings: Settings,
) -> Result<Outcome, Failure> {
    let parts = stream_parts(file, settings)?;
    let mut target = target(relay.addr, relay.websocket, session, token);
    target.ca_file = relay.ca_file.map(Path::to_path_buf);
    runtime()?.block_on(publish_paced(target, parts, speed, Instant::now()))?;
    Ok(Outcome::Done)
}

fn target(addr: &str, websocket: bool, session: &str, token: &str) -> publisher::Target {
    publisher::Target {
        addr: addr.into(),
        websocket,
        ca_file: None,
        session: session.into(),
        token: token.into(),
        key: publisher::new_key(),
        // The whole file is in memory anyway.
        buffer_bytes: usize::MAX,
        spill: None,
        retry_every: Duration::from_millis(500),
        max_retries: 10,
        finish_timeout: Duration::from_secs(10),
    }
}

/// Hands the chunks to the library's publisher (which does the protocol, the acks and the
/// resumption) as a recorder would have them: each at its due song time, at `speed`, from
/// `start`.
async fn publish_paced(
    target: publisher::Target,
    parts: Parts,
    speed: f32,
    start: Instant,
) -> Result<(), Failure> {
    let Parts {
        header,
        chunks,
        first_t,
    } = parts;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let pacer = tokio::spawn(async move {
        for (t, chunk) in chunks {
            if speed > 0.0 && t.is_finite() {
                let due = start + Duration::from_secs_f32(((t - first_t) / speed).max(0.0));
                tokio::time::sleep_until(due.into()).await;
            }
            if tx.send(publisher::Input::Chunk(chunk)).is_err() {
                return;
            }
        }
        let _ = tx.send(publisher::Input::Finished);
    });
    let progress = |p: publisher::Progress| {
        if let publisher::Progress::Lost(e) = p {
            eprintln!("bsor-stream: {e}; reconnecting");
        }
    };
    let result = publisher::publish(target, header, rx, progress).await;
    pacer.abort();
    result.map_err(|e| Failure(e.to_string()))
}

/// Lateness of frames against their song time, measured from the best-placed frame so far:
/// at song speed 1 this is how far behind the live edge a frame arrives (a flush interval
/// for a chunk's first frame, about 0 for its last, more when the network or the relay
/// holds frames back). A viewer has no clock of the publisher's, so the best-placed frame
/// is the zero.
#[derive(Default)]
struct Latency {
    start: Option<Instant>,
    best: Option<f64>,
    last: f64,
    worst: f64,
}

impl Latency {
    fn frame(&mut self, time: f32) {
        if !time.is_finite() {
            return;
        }
        let now = Instant::now();
        let start = *self.start.get_or_insert(now);
        let lag = now.duration_since(start).as_secs_f64() - f64::from(time);
        let best = self.best.map_or(lag, |b| b.min(lag));
        self.best = Some(best);
        self.last = lag - best;
        self.worst = self.worst.max(self.last);
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
    /// Takes the header or a chunk; calls `frame` with each new frame's song time.
    fn take(&mut self, b: &[u8], mut frame: impl FnMut(&Self, f32)) {
        self.bytes += b.len() as u64;
        self.d.push(b);
        while let Ok(Some(item)) = self.d.next_item() {
            if let StreamItem::Frame { frame: f, .. } = item {
                self.frames += 1;
                self.song_time = f.time;
                frame(self, f.time);
            }
        }
    }

    /// The stream is over: what the decoder still holds.
    fn finish(&mut self) {
        self.d.finish();
        while let Ok(Some(_)) = self.d.next_item() {}
    }
}

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
    let mut last_print = Instant::now();
    let mut failed: Option<Failure> = None;
    let on = |e: ClientEvent| {
        match e {
            ClientEvent::Header(b) | ClientEvent::Chunk(b) => {
                if let Some(Err(e)) = out.as_mut().map(|f| f.write(&b)) {
                    failed = Some(Failure(format!("writing: {e}")));
                    return ControlFlow::Break(());
                }
                v.take(&b, |_, time| latency.frame(time));
            }
            ClientEvent::Skipped { chunks, .. } => skipped += u64::from(chunks),
            ClientEvent::End(reason) => ended = reason == EndReason::Finished,
            ClientEvent::Lost(e) => eprintln!("bsor-stream: {e}; reconnecting"),
            _ => {}
        }
        if last_print.elapsed() > Duration::from_millis(500) {
            eprintln!(
                "song time {:7.2} s, {} frames, {} bytes, latency {:4.0} ms (worst {:.0} ms), {skipped} chunks skipped",
                v.song_time,
                v.frames,
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
/// synthetic replay when no file is given; prints what a viewer sees and the final sizes.
pub fn demo(file: Option<&Path>, speed: f32) -> Result<Outcome, Failure> {
    use bsor_stream::net::relay::{RelayConfig, Tokens};
    use bsor_stream::net::server::{Server, ServerConfig};
    use bsor_stream::stream::Profile;

    let path = match file {
        Some(f) => f.to_path_buf(),
        None => {
            let p =
                std::env::temp_dir().join(format!("bsor-stream-demo-{}.bsor", std::process::id()));
            let r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
                seed: 1,
                seconds: 20.0,
                fps: 90,
            });
            std::fs::write(&p, bsor::to_vec(&r).map_err(|e| Failure(e.to_string()))?)
                .map_err(|e| (p.as_path(), e))?;
            p
        }
    };
    let bsor_bytes = std::fs::metadata(&path)
        .map_err(|e| (path.as_path(), e))?
        .len();
    let settings = Settings::live(Profile::Lossless);
    let parts = stream_parts(&path, settings)?;
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
        println!(
            "relay listening on {addr}; publishing {} at {speed}x to 3 viewers",
            path.display()
        );
        let relay = Server::new(
            RelayConfig::default(),
            Tokens::parse("demo-token"),
            ServerConfig::default(),
        )
        .map_err(|e| Failure(e.to_string()))?;
        let server = tokio::spawn(tcp::serve(listener, relay));
        // The viewers connect first; the song starts a moment later.
        let start = Instant::now() + Duration::from_millis(200);
        let mut viewers = Vec::new();
        for n in 0..3 {
            let addr = addr.clone();
            viewers.push(tokio::spawn(demo_viewer(addr, n, start, first_t, speed)));
        }
        tokio::time::sleep_until(start.into()).await;
        let target = target(&addr, false, "demo", "demo-token");
        publish_paced(target, parts, speed, start).await?;
        for (i, v) in viewers.into_iter().enumerate() {
            let (frames, bytes, worst) = v.await.map_err(|e| Failure(e.to_string()))??;
            println!(
                "viewer {}: {frames} frames, {bytes} bytes, worst latency {worst:.0} ms",
                i + 1
            );
        }
        server.abort();
        println!(
            "sizes: BSOR {bsor_bytes} bytes, stream {stream_bytes} bytes ({:.1}%)",
            100.0 * stream_bytes as f64 / bsor_bytes.max(1) as f64
        );
        Ok(Outcome::Done)
    })
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

//! `publish` and `watch` over TCP or WebSocket, and `demo`.

use std::path::Path;
use std::time::{Duration, Instant};

use bsor_stream::bsor;
use bsor_stream::net::archive::StreamWriter;
use std::ops::ControlFlow;

use bsor_stream::net::client::{ClientConfig, ClientEvent, Subscription};
use bsor_stream::net::wire::{EndReason, ViewMode};
use bsor_stream::net::{publisher, tcp, viewer};
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

/// `publish FILE --to ADDR --session NAME --token TOKEN [--speed X]`: sends the song as a
/// recorder would, paced at X times the song's speed (0: as fast as possible), and resumes
/// after a lost connection.
pub fn publish(
    file: &Path,
    addr: &str,
    websocket: bool,
    session: &str,
    token: &str,
    speed: f32,
    settings: Settings,
) -> Result<Outcome, Failure> {
    let parts = stream_parts(file, settings)?;
    let target = target(addr, websocket, session, token);
    runtime()?.block_on(publish_paced(target, parts, speed, Instant::now()))?;
    Ok(Outcome::Done)
}

fn target(addr: &str, websocket: bool, session: &str, token: &str) -> publisher::Target {
    publisher::Target {
        addr: addr.into(),
        websocket,
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

/// `watch ADDR --session NAME [--ws] [--complete] [--wait S] [-o OUT.bsors]`.
pub fn watch(
    addr: &str,
    websocket: bool,
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
    let mut d = StreamDecoder::new();
    let (mut frames, mut song_time, mut skipped, mut bytes) = (0u64, 0f32, 0u64, 0u64);
    let mut latency = Latency::default();
    let mut last_print = Instant::now();
    let mut ended = false;
    let mut failed: Option<Failure> = None;
    let on = |e: ClientEvent| {
        match e {
            ClientEvent::Header(b) | ClientEvent::Chunk(b) => {
                bytes += b.len() as u64;
                if let Some(f) = &mut out {
                    if let Err(e) = f.write(&b) {
                        failed = Some(Failure(format!("writing: {e}")));
                        return ControlFlow::Break(());
                    }
                }
                d.push(&b);
                while let Ok(Some(item)) = d.next_item() {
                    if let StreamItem::Frame { frame, .. } = item {
                        frames += 1;
                        song_time = frame.time;
                        latency.frame(frame.time);
                    }
                }
            }
            ClientEvent::Skipped { chunks, .. } => skipped += u64::from(chunks),
            ClientEvent::End(reason) => ended = reason == EndReason::Finished,
            ClientEvent::Lost(e) => eprintln!("bsor-stream: {e}; reconnecting"),
            _ => {}
        }
        if last_print.elapsed() > Duration::from_millis(500) {
            eprintln!(
                "song time {song_time:7.2} s, {frames} frames, {bytes} bytes, latency {:4.0} ms (worst {:.0} ms), {skipped} chunks skipped",
                latency.last * 1000.0,
                latency.worst * 1000.0
            );
            last_print = Instant::now();
        }
        ControlFlow::Continue(())
    };
    let result = runtime()?.block_on(viewer::watch(
        addr,
        websocket,
        subscription,
        ClientConfig::default(),
        on,
    ));
    if let Some(f) = failed {
        return Err(f);
    }
    result.map_err(|e| Failure(format!("{addr}: {e}")))?;
    d.finish();
    while let Ok(Some(_)) = d.next_item() {}
    if let Some(f) = out {
        // A finished stream gets its footer, as the publisher's file has.
        f.finish(ended)
            .map_err(|e| Failure(format!("writing: {e}")))?;
    }
    eprintln!(
        "received {frames} frames, {bytes} bytes, worst latency {:.0} ms, {skipped} chunks skipped; stream {}",
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
        println!("relay listening on {addr}; publishing {} at {speed}x to 3 viewers", path.display());
        let relay = Server::new(RelayConfig::default(), Tokens::parse("demo-token"), ServerConfig::default())
            .map_err(|e| Failure(e.to_string()))?;
        let server = tokio::spawn(tcp::serve(listener, relay));
        // The viewers connect first; the song starts a moment later.
        let start = Instant::now() + Duration::from_millis(200);
        let mut viewers = Vec::new();
        for n in 0..3 {
            let addr = addr.clone();
            viewers.push(tokio::spawn(async move {
                let sub = Subscription { session: "demo".into(), mode: ViewMode::Live, wait_ms: 10_000 };
                let mut d = StreamDecoder::new();
                let (mut frames, mut bytes, mut worst_ms) = (0u64, 0u64, 0f64);
                let mut last = Instant::now();
                let on = |e: ClientEvent| {
                    let (ClientEvent::Header(b) | ClientEvent::Chunk(b)) = e else {
                        return ControlFlow::Continue(());
                    };
                    bytes += b.len() as u64;
                    d.push(&b);
                    while let Ok(Some(item)) = d.next_item() {
                        if let StreamItem::Frame { frame, .. } = item {
                            frames += 1;
                            // Latency: arrival against when the publisher had the frame.
                            let due = ((frame.time - first_t) / speed.max(1e-3)).max(0.0);
                            let now = Instant::now().saturating_duration_since(start);
                            let late = now.as_secs_f64() - f64::from(due);
                            worst_ms = worst_ms.max(late * 1000.0);
                            if n == 0 && last.elapsed() > Duration::from_secs(1) {
                                let secs = Instant::now()
                                    .saturating_duration_since(start)
                                    .as_secs_f64()
                                    .max(1e-3);
                                println!(
                                    "viewer 1: song time {:6.2} s, {frames} frames ({:.0} fps), {:.1} kB/s on the wire, latency {:.0} ms",
                                    frame.time,
                                    frames as f64 / secs,
                                    bytes as f64 / secs / 1000.0,
                                    late * 1000.0
                                );
                                last = Instant::now();
                            }
                        }
                    }
                    ControlFlow::Continue(())
                };
                viewer::watch(&addr, false, sub, ClientConfig::default(), on)
                    .await
                    .map_err(|e| Failure(format!("viewer {}: {e}", n + 1)))?;
                Ok::<_, Failure>((frames, bytes, worst_ms))
            }));
        }
        tokio::time::sleep_until(start.into()).await;
        let target = target(&addr, false, "demo", "demo-token");
        publish_paced(target, parts, speed, start).await?;
        for (i, v) in viewers.into_iter().enumerate() {
            let (frames, bytes, worst) = v.await.map_err(|e| Failure(e.to_string()))??;
            println!("viewer {}: {frames} frames, {bytes} bytes, worst latency {worst:.0} ms", i + 1);
        }
        server.abort();
        println!(
            "sizes: BSOR {bsor_bytes} bytes, stream {stream_bytes} bytes ({:.1}%)",
            100.0 * stream_bytes as f64 / bsor_bytes.max(1) as f64
        );
        Ok(Outcome::Done)
    })
}

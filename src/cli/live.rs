//! `publish` and `watch` over TCP.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use bsor_stream::bsor;
use bsor_stream::net::wire::{EndReason, Message, Role, ViewMode, WireCodec};
use bsor_stream::stream::{ChunkHeader, Settings, StreamDecoder, StreamEvent, StreamHeader};
use bsor_stream::transcode;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::{read_all, Failure, Outcome};

type Conn = Framed<TcpStream, WireCodec>;

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))
}

async fn hello(addr: &str, role: Role) -> Result<Conn, Failure> {
    let socket = TcpStream::connect(addr)
        .await
        .map_err(|e| Failure(format!("{addr}: {e}")))?;
    let _ = socket.set_nodelay(true);
    let mut c = Framed::new(socket, WireCodec::default());
    let agent = concat!("bsor-stream ", env!("CARGO_PKG_VERSION")).to_string();
    send(
        &mut c,
        Message::Hello {
            min_version: 1,
            max_version: 1,
            role,
            agent,
        },
    )
    .await?;
    match next(&mut c).await? {
        Message::Hello { .. } => Ok(c),
        m => Err(refused(m)),
    }
}

async fn send(c: &mut Conn, m: Message) -> Result<(), Failure> {
    c.send(m)
        .await
        .map_err(|e| Failure(format!("sending: {e}")))
}

async fn next(c: &mut Conn) -> Result<Message, Failure> {
    match c.next().await {
        Some(Ok(m)) => Ok(m),
        Some(Err(e)) => Err(Failure(format!("receiving: {e}"))),
        None => Err(Failure("the relay closed the connection".into())),
    }
}

fn refused(m: Message) -> Failure {
    match m {
        Message::Error { code, message } => Failure(format!("relay: {code:?}: {message}")),
        m => Failure(format!("unexpected {m:?} from the relay")),
    }
}

/// The stream header and chunks of a `.bsors`, or of a `.bsor` encoded live.
fn stream_parts(file: &Path, settings: Settings) -> Result<(Bytes, Vec<(f32, Bytes)>), Failure> {
    let bytes = read_all(file)?;
    let stream = if super::is_stream(&bytes) {
        bytes
    } else {
        let r = bsor::parse(&bytes).map_err(|e| Failure::from((file, e)))?;
        transcode::encode_replay(&r, settings)
    };
    let header_len = (1..=stream.len())
        .find(|&n| {
            StreamHeader::parse_prefix(&stream[..n])
                .ok()
                .flatten()
                .is_some()
        })
        .ok_or_else(|| Failure(format!("{}: no stream header", file.display())))?;
    let mut chunks = Vec::new();
    let mut at = header_len;
    while let Some((h, hlen)) = ChunkHeader::parse_at(&stream[at..]) {
        let end = at + hlen + h.len as usize;
        chunks.push((h.t0, Bytes::copy_from_slice(&stream[at..end])));
        at = end;
    }
    Ok((Bytes::copy_from_slice(&stream[..header_len]), chunks))
}

/// A key for this publishing run: it proves to the relay that a reconnection is this run.
fn publisher_key() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut key = [0u8; 16];
    for half in key.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    key
}

/// `publish FILE --to ADDR --session NAME --token TOKEN [--speed X]`: sends the song as a
/// recorder would, paced at X times the song's speed (0: as fast as possible), and resumes
/// after a lost connection.
pub fn publish(
    file: &Path,
    addr: &str,
    session: &str,
    token: &str,
    speed: f32,
    settings: Settings,
) -> Result<Outcome, Failure> {
    let (header, chunks) = stream_parts(file, settings)?;
    let key = publisher_key();
    runtime()?.block_on(async {
        let start = Instant::now();
        let first_t = chunks
            .iter()
            .map(|c| c.0)
            .find(|t| t.is_finite())
            .unwrap_or(0.0);
        let mut attempts = 0;
        loop {
            match publish_once(
                addr,
                session,
                token,
                key,
                attempts > 0,
                &header,
                &chunks,
                speed,
                start,
                first_t,
            )
            .await
            {
                Ok(()) => return Ok(Outcome::Done),
                Err(e) if attempts < 10 && !e.0.starts_with("relay:") => {
                    attempts += 1;
                    eprintln!("bsor-stream: {}; reconnecting ({attempts})", e.0);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        }
    })
}

#[allow(clippy::too_many_arguments)]
async fn publish_once(
    addr: &str,
    session: &str,
    token: &str,
    key: [u8; 16],
    resume: bool,
    header: &Bytes,
    chunks: &[(f32, Bytes)],
    speed: f32,
    start: Instant,
    first_t: f32,
) -> Result<(), Failure> {
    let mut c = hello(addr, Role::Publisher).await?;
    let publish = Message::Publish {
        session: session.into(),
        token: token.into(),
        resume,
        publisher_key: key,
    };
    send(&mut c, publish).await?;
    let from = match next(&mut c).await? {
        Message::Resume(n) => n as usize,
        m => return Err(refused(m)),
    };
    let (mut sink, mut stream) = c.split();
    // Acknowledgements are read as they come; an error ends the run.
    let reader = tokio::spawn(async move {
        while let Some(m) = stream.next().await {
            match m {
                Ok(Message::Error { code, message }) => {
                    return Err(Failure(format!("relay: {code:?}: {message}")))
                }
                Ok(_) => {}
                Err(e) => return Err(Failure(format!("receiving: {e}"))),
            }
        }
        Ok(())
    });
    let sent = async {
        sink.send(Message::StreamHeader(header.clone()))
            .await
            .map_err(|e| Failure(format!("sending: {e}")))?;
        for (t, chunk) in chunks.iter().skip(from) {
            if speed > 0.0 && t.is_finite() {
                let due = Duration::from_secs_f32(((t - first_t) / speed).max(0.0));
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
            sink.send(Message::Chunk(chunk.clone()))
                .await
                .map_err(|e| Failure(format!("sending: {e}")))?;
        }
        sink.send(Message::End(EndReason::Finished))
            .await
            .map_err(|e| Failure(format!("sending: {e}")))
    };
    let result = sent.await;
    // The relay closes the connection after End; any error it sent comes first.
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(10), reader).await {
        return Err(e);
    }
    result
}

/// `watch ADDR --session NAME [--complete] [--wait S] [-o OUT.bsors]`.
pub fn watch(
    addr: &str,
    session: &str,
    complete: bool,
    wait: f32,
    output: Option<&Path>,
) -> Result<Outcome, Failure> {
    let mut out = match output {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| (p, e))?),
        None => None,
    };
    let complete = complete || output.is_some();
    runtime()?.block_on(async {
        let mut c = hello(addr, Role::Viewer).await?;
        let mode = if complete { ViewMode::Complete } else { ViewMode::Live };
        let wait_ms = (wait.max(0.0) * 1000.0).min(u32::MAX as f32) as u32;
        send(&mut c, Message::Subscribe { session: session.into(), mode, wait_ms }).await?;
        let mut d = StreamDecoder::new();
        let (mut frames, mut song_time, mut skipped, mut bytes) = (0u64, 0f32, 0u64, 0u64);
        let mut last_print = Instant::now();
        let mut ended = false;
        loop {
            let m = match c.next().await {
                Some(Ok(m)) => m,
                Some(Err(e)) => return Err(Failure(format!("receiving: {e}"))),
                None => break,
            };
            match m {
                Message::StreamHeader(b) | Message::Chunk(b) => {
                    bytes += b.len() as u64;
                    if let Some(f) = &mut out {
                        f.write_all(&b).map_err(|e| Failure(format!("writing: {e}")))?;
                    }
                    d.push(&b);
                    while let Ok(Some(ev)) = d.next_event() {
                        if let StreamEvent::Frame { frame, .. } = ev {
                            frames += 1;
                            song_time = frame.time;
                        }
                    }
                }
                Message::Skipped { chunks, .. } => skipped += u64::from(chunks),
                Message::End(reason) => {
                    ended = reason == EndReason::Finished;
                    break;
                }
                Message::Ping(n) => send(&mut c, Message::Pong(n)).await?,
                m @ Message::Error { .. } => return Err(refused(m)),
                _ => {}
            }
            if last_print.elapsed() > Duration::from_millis(500) {
                eprintln!("song time {song_time:7.2} s, {frames} frames, {bytes} bytes, {skipped} chunks skipped");
                last_print = Instant::now();
            }
        }
        d.finish();
        while let Ok(Some(_)) = d.next_event() {}
        eprintln!("received {frames} frames, {bytes} bytes, {skipped} chunks skipped; stream {}", if ended { "ended" } else { "cut off" });
        Ok(if ended && (!complete || skipped == 0) { Outcome::Done } else { Outcome::Partial })
    })
}

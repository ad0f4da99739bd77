//! The hostile clients' raw pieces: sockets bound to 127.0.0.2 and up, hand-made frames,
//! and what a relay answered. The honest clients use the library's client; these speak the
//! wire by hand, so that they can break it.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bsor_stream::net::wire::{self, ErrorCode, Message, Role, ViewMode, DEFAULT_MAX_FRAME};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// The source address of hostile connection `i`: `per_address` connections from each of
/// 127.0.0.2, 127.0.0.3, ... (Linux routes all of 127.0.0.0/8 to the loopback device), so
/// that a relay's cap on connections per address lets them in, while the honest clients
/// come from 127.0.0.1.
pub fn source(i: usize, per_address: usize) -> Ipv4Addr {
    let k = (i / per_address.max(1)).min(0x00FF_FF00) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 0, 0, 2)) + k)
}

/// Connects to `addr` from hostile connection `i`'s source address, with a small receive
/// buffer: a client that never reads then holds little in the kernel.
pub async fn connect(i: usize, per_address: usize, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(16 * 1024)?;
    socket.bind(SocketAddr::new(source(i, per_address).into(), 0))?;
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// One message as a frame.
pub fn frame(m: &Message) -> Vec<u8> {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b.to_vec()
}

pub fn hello(role: Role) -> Vec<u8> {
    frame(&Message::Hello {
        min_version: wire::VERSION,
        max_version: wire::VERSION,
        role,
        agent: "bsor-stream-hostile".into(),
    })
}

pub fn publish(session: &str, token: &str, key: u8) -> Vec<u8> {
    frame(&Message::Publish {
        session: session.into(),
        token: token.into(),
        resume: false,
        publisher_key: [key; 16],
    })
}

pub fn subscribe(session: &str, mode: ViewMode, wait_ms: u32) -> Vec<u8> {
    frame(&Message::Subscribe {
        session: session.into(),
        mode,
        wait_ms,
        from: 0,
    })
}

/// The name of an error code, the contract's new ones (15 to 17) included.
pub fn code_name(code: u16) -> String {
    match code {
        15 => "OverBudget".into(),
        16 => "BadStreamHeader".into(),
        17 => "SessionExists".into(),
        c => match ErrorCode::from_code(c) {
            ErrorCode::Other(c) => format!("code {c}"),
            e => format!("{e:?}"),
        },
    }
}

/// How a hostile connection ended, as the relay made it end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The relay sent `Error` with this code.
    Error(u16),
    /// The relay sent the message awaited (its name).
    Answered(&'static str),
    /// The relay closed the connection without an `Error`.
    Closed,
    /// Still open when the scenario ended.
    Open,
    /// Could not connect or send (the words say which).
    Failed(String),
}

impl Outcome {
    /// The line the report counts it under.
    pub fn label(&self) -> String {
        match self {
            Outcome::Error(c) => format!("error {c} {}", code_name(*c)),
            Outcome::Answered(m) => format!("answered {m}"),
            Outcome::Closed => "closed without an error".into(),
            Outcome::Open => "still open".into(),
            Outcome::Failed(e) => format!("failed: {e}"),
        }
    }
}

/// Reads what the relay sends until an `Error` (its code), the message `until` accepts,
/// the end of the stream, or `deadline`. Reads drain the socket (at most one frame of the
/// relay's frame limit is held here).
pub async fn read_outcome(
    stream: &mut TcpStream,
    deadline: Instant,
    until: impl Fn(&Message) -> bool,
) -> Outcome {
    let mut codec = wire::WireCodec::new(DEFAULT_MAX_FRAME);
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        loop {
            match codec.decode_from(&mut buf) {
                Ok(Some(Message::Error { code, .. })) => return Outcome::Error(code.code()),
                Ok(Some(m)) if until(&m) => return Outcome::Answered(m.name()),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return Outcome::Failed(format!("the relay sent a bad frame: {e}")),
            }
        }
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Err(_) => return Outcome::Open,
            Ok(Ok(0)) | Ok(Err(_)) => return Outcome::Closed,
            Ok(Ok(_)) => {}
        }
    }
}

/// Writes `bytes`; a relay that closed the connection first shows as `Closed`.
pub async fn send(stream: &mut TcpStream, bytes: &[u8], deadline: Instant) -> Result<(), Outcome> {
    match tokio::time::timeout_at(deadline, stream.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Outcome::Closed),
        Err(_) => Err(Outcome::Open),
    }
}

/// Says Hello as a publisher, publishes `session` with `token` and waits for the relay's
/// `Resume` (a publisher sends its stream header only after it, `wire.md` §3.1); any other
/// end is the outcome.
pub async fn start_publishing(
    stream: &mut TcpStream,
    session: &str,
    token: &str,
    key: u8,
    deadline: Instant,
) -> Result<(), Outcome> {
    let mut b = hello(Role::Publisher);
    b.extend(publish(session, token, key));
    send(stream, &b, deadline).await?;
    match read_outcome(stream, deadline, |m| matches!(m, Message::Resume(_))).await {
        Outcome::Answered(_) => Ok(()),
        o => Err(o),
    }
}

/// Sends `bytes` and reads how the relay answers (see [`read_outcome`]).
pub async fn exchange(stream: &mut TcpStream, bytes: &[u8], deadline: Instant) -> Outcome {
    if let Err(o) = send(stream, bytes, deadline).await {
        return o;
    }
    read_outcome(stream, deadline, |_| false).await
}

/// A fast generator for bytes of no particular meaning (xorshift64*): random bytes need no
/// quality here, only variety, so no crate is taken for them.
pub struct Noise(u64);

impl Noise {
    pub fn new(seed: u64) -> Noise {
        Noise(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn fill(&mut self, out: &mut [u8]) {
        for b in out {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            *b = (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
        }
    }
}

/// What a WebSocket upgrade request got: the HTTP status and the subprotocol echoed, or
/// how the socket ended without a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpReply {
    Status(u16, Option<String>),
    ClosedWithoutReply,
    NoReply,
}

/// Sends `request` and reads the HTTP reply's head.
pub async fn http_exchange(stream: &mut TcpStream, request: &[u8], deadline: Instant) -> HttpReply {
    if stream.write_all(request).await.is_err() {
        return HttpReply::ClosedWithoutReply;
    }
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.lines();
            let status = lines
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let protocol = lines.find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("sec-websocket-protocol")
                    .then(|| v.trim().to_string())
            });
            return HttpReply::Status(status, protocol);
        }
        if buf.len() > 8192 {
            return HttpReply::Status(0, None);
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => return HttpReply::NoReply,
            Ok(Ok(0)) | Ok(Err(_)) => return HttpReply::ClosedWithoutReply,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The check that case `name` was answered only with `accepted` statuses (`got`: how many
/// times each status came, 0 for a close), and at least once when `answered`.
pub(crate) fn statuses(
    name: &str,
    accepted: &[u16],
    got: &std::sync::Mutex<std::collections::BTreeMap<u16, u64>>,
    answered: bool,
) -> super::Check {
    let got = got.lock().map(|m| m.clone()).unwrap_or_default();
    let all: u64 = got.values().sum();
    let good: u64 = accepted
        .iter()
        .map(|s| got.get(s).copied().unwrap_or(0))
        .sum();
    let seen: Vec<String> = got.iter().map(|(s, c)| format!("{s} x{c}")).collect();
    super::check(
        good == all && (all > 0 || !answered),
        format!("{name}: want one of {accepted:?}, got {}", seen.join(", ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_spread_over_addresses_from_127_0_0_2() {
        assert_eq!(source(0, 10), Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(source(9, 10), Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(source(10, 10), Ipv4Addr::new(127, 0, 0, 3));
        // Past 127.0.0.255 into the next octet, never 127.0.0.1.
        assert_eq!(source(2540, 10), Ipv4Addr::new(127, 0, 1, 0));
        assert_eq!(source(9999, 10), Ipv4Addr::new(127, 0, 3, 233));
        assert_eq!(source(5, 0), Ipv4Addr::new(127, 0, 0, 7));
    }

    #[test]
    fn new_error_codes_have_the_contract_names() {
        assert_eq!(code_name(7), "BadSessionName");
        assert_eq!(code_name(15), "OverBudget");
        assert_eq!(code_name(16), "BadStreamHeader");
        assert_eq!(code_name(17), "SessionExists");
        assert_eq!(code_name(99), "code 99");
    }
}

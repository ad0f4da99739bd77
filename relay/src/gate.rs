//! How far the relay reads ahead of a connection's last whole message: a [`ReadGate`] wraps
//! a socket and stops reading from it once it is `limit` bytes (plus a little framing
//! slack) past the end of the last message the relay took. A peer that starts a large frame
//! before it may (a connection still in its handshake, or a viewer) then makes the relay
//! buffer no more than that: its bytes wait in its own socket buffers until its handshake or
//! idle timeout closes it. The same gate serves TCP and WebSocket, whose library
//! (tungstenite) would otherwise buffer a whole message before the relay sees it.
//!
//! Written here rather than taken from a crate: tokio's `take` limits a reader once, while
//! this limit moves on with every message and changes when a connection becomes a publisher.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes allowed past a frame limit: a length field and a WebSocket frame header.
const SLACK: u64 = 64;

#[derive(Debug, Default)]
struct State {
    /// Bytes read from the socket so far.
    read: AtomicU64,
    /// Bytes that may be read in all (`read` stops there).
    allowed: AtomicU64,
    /// The connection's frame limit now.
    limit: AtomicU32,
    waker: AtomicWaker,
}

/// The read-ahead limit of one connection (cheap to clone; the clones share it).
#[derive(Clone, Debug, Default)]
pub struct ReadGate(Arc<State>);

impl ReadGate {
    /// A gate letting `first` bytes in before the first message, and frames up to `limit`.
    pub fn new(first: u64, limit: u32) -> Self {
        let gate = ReadGate::default();
        gate.0.allowed.store(first, Ordering::Release);
        gate.0.limit.store(limit, Ordering::Release);
        gate
    }

    /// The connection's frame limit now.
    pub fn limit(&self) -> u32 {
        self.0.limit.load(Ordering::Acquire)
    }

    /// A whole message was taken: the peer may now send up to one frame of `limit` bytes
    /// beyond what was read so far.
    pub fn taken(&self, limit: u32) {
        self.0.limit.store(limit, Ordering::Release);
        let read = self.0.read.load(Ordering::Acquire);
        let allowed = read + u64::from(limit) + SLACK;
        self.0.allowed.fetch_max(allowed, Ordering::AcqRel);
        self.0.waker.wake();
    }

    /// Lets the peer send `more` bytes (plus the slack) beyond what was read so far, the
    /// frame limit unchanged: for a body whose framing (HTTP/1.1 chunks) the gate counts
    /// but the body's own limit does not.
    pub fn allow(&self, more: u64) {
        let read = self.0.read.load(Ordering::Acquire);
        self.0.allowed.fetch_max(
            read.saturating_add(more).saturating_add(SLACK),
            Ordering::AcqRel,
        );
        self.0.waker.wake();
    }

    /// Bytes read through the gate so far.
    pub fn read(&self) -> u64 {
        self.0.read.load(Ordering::Acquire)
    }

    /// `io` read through this gate.
    pub fn wrap<T>(&self, io: T) -> Gated<T> {
        Gated {
            io,
            gate: self.clone(),
        }
    }
}

/// A socket whose reads stop at its gate (writes pass through).
#[derive(Debug)]
pub struct Gated<T> {
    io: T,
    gate: ReadGate,
}

impl<T: AsyncRead + Unpin> AsyncRead for Gated<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let state = &self.gate.0;
        let room = || {
            state
                .allowed
                .load(Ordering::Acquire)
                .saturating_sub(state.read.load(Ordering::Acquire))
        };
        let mut left = room();
        if left == 0 {
            state.waker.register(cx.waker());
            left = room();
            if left == 0 {
                return Poll::Pending;
            }
        }
        let n = left.min(buf.remaining() as u64) as usize;
        // Safe code only: the part read into is initialized first (zeroed once; tokio
        // remembers it is initialized).
        let mut part = ReadBuf::new(buf.initialize_unfilled_to(n));
        let me = &mut *self;
        match Pin::new(&mut me.io).poll_read(cx, &mut part) {
            Poll::Ready(Ok(())) => {
                let got = part.filled().len();
                buf.advance(got);
                me.gate.0.read.fetch_add(got as u64, Ordering::AcqRel);
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Gated<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_stop_at_the_gate_until_a_message_is_taken() {
        let (mut peer, relay) = tokio::io::duplex(1 << 16);
        peer.write_all(&[7u8; 5000]).await.unwrap();
        let gate = ReadGate::new(100, 1000);
        let mut r = gate.wrap(relay);
        let mut buf = vec![0u8; 10_000];
        assert_eq!(r.read(&mut buf).await.unwrap(), 100);
        let stalled = tokio::time::timeout(std::time::Duration::from_millis(50), r.read(&mut buf));
        assert!(stalled.await.is_err(), "read past the gate");
        // A message taken: one more frame of 1000 bytes (and the slack) may come.
        gate.taken(1000);
        let mut got = 0;
        while got < 1000 + SLACK as usize {
            got += r.read(&mut buf).await.unwrap();
        }
        assert_eq!(got, 1000 + SLACK as usize);
        assert_eq!(gate.read(), 1100 + SLACK);
    }
}

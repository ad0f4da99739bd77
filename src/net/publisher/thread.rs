//! The publisher on one plain thread over `std::net` TCP, for the recorder's live sink: no
//! async runtime, nothing on the game thread. The thread carries out what the
//! [`Client`](crate::net::client::Client) asks; each connection has a small reader thread
//! that turns the socket's bytes into messages, so the publisher thread only ever waits on
//! one channel (chunks from the owner, messages and faults from the reader, or the client's
//! next deadline).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::{Input, Pending, Progress, PublishError, Target};
use crate::net::client::ClientEvent;
use crate::net::wire::{Message, WireCodec, DEFAULT_MAX_FRAME};

/// What reaches the publisher thread.
enum Event {
    Input(Input),
    /// The owner stopped without finishing.
    Closed,
    /// A message from the relay on connection `.0`.
    Received(u64, Message),
    /// Connection `.0` failed or closed.
    Lost(u64, String),
}

/// A publisher running on its own thread. Dropping it without [`Publisher::finish`]
/// abandons the session (the relay ends it after its publisher timeout).
pub struct Publisher {
    tx: mpsc::Sender<Event>,
    thread: Option<JoinHandle<Result<(), PublishError>>>,
}

impl Publisher {
    /// Starts publishing `header` to `target` on a new thread named `name`; `progress` is
    /// called on that thread.
    pub fn spawn(
        name: &str,
        target: Target,
        header: Bytes,
        progress: impl FnMut(Progress) + Send + 'static,
    ) -> std::io::Result<Publisher> {
        let (tx, rx) = mpsc::channel();
        let back = tx.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(target, header, rx, back, progress))?;
        Ok(Publisher {
            tx,
            thread: Some(thread),
        })
    }

    /// A whole chunk to publish.
    pub fn send(&self, chunk: Bytes) {
        // A closed channel means the thread ended (and said why at join).
        let _ = self.tx.send(Event::Input(Input::Chunk(chunk)));
    }

    /// Ends publishing, with `End` after the last acknowledgement when `complete` (within
    /// the target's finish timeout), else at once, and waits for the thread.
    pub fn finish(self, complete: bool) -> Result<(), PublishError> {
        self.end(complete);
        self.join()
    }

    /// Asks the thread to end as [`finish`](Self::finish) does, without waiting for it:
    /// it ends on its own, at the latest after the target's finish timeout (`complete`) or
    /// its current connection attempt (not `complete`).
    pub fn end(&self, complete: bool) {
        let last = if complete {
            Event::Input(Input::Finished)
        } else {
            Event::Closed
        };
        let _ = self.tx.send(last);
    }

    /// The thread has ended (it finished, gave up, or failed): [`join`](Self::join) will
    /// not block.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the thread and returns how it ended.
    pub fn join(mut self) -> Result<(), PublishError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(PublishError::Panicked),
            None => Ok(()),
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.tx.send(Event::Closed);
        }
    }
}

/// One open connection to the relay: the socket the publisher writes, and its number
/// (events from an older connection's reader are stale).
struct Link {
    socket: TcpStream,
    id: u64,
}

fn run(
    target: Target,
    header: Bytes,
    rx: mpsc::Receiver<Event>,
    back: mpsc::Sender<Event>,
    mut progress: impl FnMut(Progress),
) -> Result<(), PublishError> {
    let mut shell = Shell {
        p: Pending::new(&target, header, 0),
        target,
        conn: None,
        next_id: 0,
        out: BytesMut::new(),
        start: Instant::now(),
        back,
    };
    loop {
        shell.carry_out(&mut progress)?;
        if shell.p.client.is_closed() {
            return Ok(());
        }
        if let Some(c) = &mut shell.conn {
            if let Err(e) = transmit(&mut shell.p, c, &mut shell.out)? {
                let now = ms(shell.start);
                shell.p.client.connection_lost(now, e);
            }
        }
        if shell.p.client.has_events() {
            continue;
        }
        let wait = shell
            .p
            .client
            .poll_timeout()
            .map_or(Duration::from_secs(3600), |t| {
                Duration::from_millis(t.saturating_sub(shell.now()))
            });
        let event = rx.recv_timeout(wait);
        let (now, current) = (shell.now(), shell.conn.as_ref().map(|c| c.id));
        let client = &mut shell.p.client;
        match event {
            Ok(Event::Input(Input::Chunk(c))) => {
                if shell.p.take(c)? && shell.p.client.spilled() == 1 {
                    progress(Progress::Spilling);
                }
            }
            Ok(Event::Input(Input::Finished)) => client.finish(now),
            Ok(Event::Closed) if !client.is_finishing() => client.abandon(),
            Ok(Event::Closed) => {}
            Ok(Event::Received(id, m)) if Some(id) == current => client.handle_message(m, now),
            Ok(Event::Lost(id, e)) if Some(id) == current => client.connection_lost(now, e),
            Ok(Event::Received(..) | Event::Lost(..)) => {}
            Err(RecvTimeoutError::Timeout) => client.handle_timeout(now),
            // Not while this thread holds `back`.
            Err(RecvTimeoutError::Disconnected) => client.abandon(),
        }
    }
}

/// Milliseconds since `start`: the client's clock.
fn ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The publisher thread's state: the client with its spill file, the open connection, and
/// the sender its reader threads report on.
struct Shell {
    p: Pending,
    target: Target,
    conn: Option<Link>,
    next_id: u64,
    out: BytesMut,
    start: Instant,
    back: mpsc::Sender<Event>,
}

impl Shell {
    fn now(&self) -> u64 {
        ms(self.start)
    }

    /// Carries out the client's events.
    fn carry_out(&mut self, progress: &mut impl FnMut(Progress)) -> Result<(), PublishError> {
        while let Some(event) = self.p.client.poll_event() {
            match event {
                ClientEvent::Connect => {
                    self.next_id += 1;
                    let timeout = self.p.client.config().handshake_timeout_ms;
                    match open(&self.target.addr, timeout, self.next_id, &self.back) {
                        Ok(c) => {
                            self.conn = Some(c);
                            self.p.client.connected(self.now());
                        }
                        Err(e) => self.p.client.connection_lost(self.now(), e),
                    }
                }
                ClientEvent::Disconnect => {
                    if let Some(mut c) = self.conn.take() {
                        // What the client queued last (its End) goes out first.
                        let _ = transmit(&mut self.p, &mut c, &mut self.out);
                        let _ = c.socket.shutdown(Shutdown::Both);
                    }
                }
                other => self.p.report(other, progress)?,
            }
        }
        Ok(())
    }
}

/// Writes everything the client has to send; the outer error is the spill file's, the
/// inner one the socket's.
fn transmit(
    p: &mut Pending,
    c: &mut Link,
    out: &mut BytesMut,
) -> Result<Result<(), String>, PublishError> {
    out.clear();
    while let Some(m) = p.next_message()? {
        m.encode(out);
        // Large enough to write, small enough not to hold every chunk of a backlog at once.
        if out.len() >= 64 << 10 {
            if let Err(e) = c.socket.write_all(out) {
                return Ok(Err(e.to_string()));
            }
            out.clear();
        }
    }
    if !out.is_empty() {
        if let Err(e) = c.socket.write_all(out) {
            return Ok(Err(e.to_string()));
        }
    }
    Ok(Ok(()))
}

/// Connects within `timeout_ms` and starts the connection's reader thread.
fn open(addr: &str, timeout_ms: u64, id: u64, back: &mpsc::Sender<Event>) -> Result<Link, String> {
    let timeout = Duration::from_millis(timeout_ms.max(1));
    let addrs = addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))?;
    let mut last = format!("{addr}: no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(socket) => {
                let setup = socket
                    .set_nodelay(true)
                    .and_then(|()| socket.set_write_timeout(Some(timeout)))
                    .and_then(|()| socket.try_clone());
                let reader = setup.map_err(|e| format!("{addr}: {e}"))?;
                let back = back.clone();
                std::thread::Builder::new()
                    .name("bsor-live-reader".into())
                    .spawn(move || read_messages(reader, id, back))
                    .map_err(|e| format!("starting the reader thread: {e}"))?;
                return Ok(Link { socket, id });
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    Err(last)
}

/// The reader thread: whole messages out of the socket until it fails or closes.
fn read_messages(mut socket: TcpStream, id: u64, back: mpsc::Sender<Event>) {
    let mut codec = WireCodec::new(DEFAULT_MAX_FRAME);
    let mut buf = BytesMut::with_capacity(8 << 10);
    let mut piece = [0u8; 8 << 10];
    loop {
        loop {
            match codec.decode_from(&mut buf) {
                Ok(Some(m)) => {
                    if back.send(Event::Received(id, m)).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = back.send(Event::Lost(id, format!("from the relay: {e}")));
                    return;
                }
            }
        }
        match socket.read(&mut piece) {
            Ok(0) => {
                let _ = back.send(Event::Lost(id, "the relay closed the connection".into()));
                return;
            }
            Ok(n) => buf.extend_from_slice(&piece[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = back.send(Event::Lost(id, e.to_string()));
                return;
            }
        }
    }
}

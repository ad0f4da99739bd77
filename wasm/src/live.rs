//! The live viewer of the browser player: the core's sans-IO client (`net::client`,
//! `proto-spec/wire.md`) and its stream decoder, driven by the page's worker, which only
//! moves bytes between a WebSocket and these exports and keeps the timer they ask for.
//!
//! - `live_begin(now, wait_ms)`: the input is the session's name; starts a viewer of its
//!   live edge (the relay waits up to `wait_ms` for a session that has not started).
//! - `live_connected(now)`: the WebSocket the client asked for is open.
//! - `live_message(now)`: the input is one binary WebSocket message (one wire frame).
//! - `live_lost(now)`: the WebSocket closed or failed; the input is why, in UTF-8.
//! - `live_timeout(now)`: the time `live_deadline()` gave has come.
//! - `live_stop()`: the page moved on.
//!
//! Times are milliseconds on the page's monotonic clock (`performance.now()`). After each
//! call, the frames and events decoded are in the result buffers (as after `stream_push`)
//! and the output's JSON messages hold, in order, what the decoder said and what the worker
//! must do: `{"type":"live","do":"connect"}` (open a WebSocket, then `live_connected` or
//! `live_lost`), `{"type":"live","do":"close"}`, `{"type":"send","from","to"}` (send bytes
//! `from..to` of the send buffer, `send_ptr()`/`send_len()`, as one binary message),
//! `{"type":"net","state","detail"}` (`subscribed`, `reconnecting`, `skipped`, `ended`,
//! `error`: for the page to show), `{"type":"backlog","before"}` (joined late: the events of
//! the chunks before `before` come from the relay's HTTP) and `{"type":"gap","after",
//! "before"}` (chunks skipped: their events too). `live_deadline()` is when to call
//! `live_timeout`, or -1.
//!
//! `backlog_events(before, after)` decodes a session's events as the relay's HTTP gives them
//! (`proto-spec/http.md` 4.1: the stream header, then each event chunk after a byte saying
//! whether a keyframe chunk came before it): the events of the chunks after `after` (-1:
//! from the start) and before `before`.

use std::cell::RefCell;

use bsor_stream_core::net::client::{Client, ClientConfig, ClientEvent, Outgoing, Subscription};
use bsor_stream_core::net::wire::{decode_frame, EndReason, ViewMode, DEFAULT_MAX_FRAME};
use bsor_stream_core::stream::{ChunkHeader, StreamDecoder, StreamHeader};
use bytes::{Bytes, BytesMut};
use serde_json::json;

use crate::{drain, Out, DECODER, INPUT};

/// One live session's viewer: the client, and the last chunk it delivered.
struct Live {
    client: Client,
    last_seq: Option<u32>,
}

thread_local! {
    static LIVE: RefCell<Option<Live>> = const { RefCell::new(None) };
    static SEND: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A JavaScript time in milliseconds as the client's clock (negative and NaN as 0).
fn ms(now: f64) -> u64 {
    if now.is_finite() && now > 0.0 {
        now as u64
    } else {
        0
    }
}

/// The client's configuration for the page: its name, and a first retry sooner than a
/// recorder's (a spectator waits on it); the rest as the library's defaults (a relay that
/// stays away about ten minutes is given up).
fn config() -> ClientConfig {
    let mut c = ClientConfig::default();
    c.agent = "bsor-stream-web".into();
    c.retry_every_ms = 250;
    c
}

/// Runs `f` on the live viewer (none: an error message), then carries out what the client
/// asks and publishes the results.
fn with_live(f: impl FnOnce(&mut Client)) -> i32 {
    SEND.with_borrow_mut(Vec::clear);
    let mut out = Out::default();
    LIVE.with_borrow_mut(|slot| match slot {
        Some(live) => {
            f(&mut live.client);
            pump(live, &mut out);
        }
        None => {
            out.messages
                .push(json!({"type": "error", "message": "no live session was begun"}));
            out.failed = true;
        }
    });
    out.publish()
}

fn net(out: &mut Out, state: &str, detail: String) {
    out.messages
        .push(json!({"type": "net", "state": state, "detail": detail}));
}

/// What the client asks for, as messages to the worker; chunks go to the decoder.
fn pump(live: &mut Live, out: &mut Out) {
    loop {
        let mut busy = false;
        while let Some(e) = live.client.poll_event() {
            busy = true;
            event(live, e, out);
        }
        while let Some(t) = live.client.poll_transmit() {
            busy = true;
            // A viewer has nothing spilled: only messages.
            if let Outgoing::Message(m) = t {
                let mut frame = BytesMut::new();
                m.encode(&mut frame);
                SEND.with_borrow_mut(|send| {
                    let from = send.len();
                    send.extend_from_slice(&frame);
                    out.messages
                        .push(json!({"type": "send", "from": from, "to": send.len()}));
                });
            }
        }
        if !busy {
            return;
        }
    }
}

fn event(live: &mut Live, e: ClientEvent, out: &mut Out) {
    match e {
        ClientEvent::Connect => out.messages.push(json!({"type": "live", "do": "connect"})),
        ClientEvent::Disconnect => out.messages.push(json!({"type": "live", "do": "close"})),
        ClientEvent::Established { .. } => net(out, "subscribed", String::new()),
        ClientEvent::Lost(e) => net(out, "reconnecting", format!("connection lost: {e}")),
        ClientEvent::Header(h) => decode(out, |d| {
            *d = StreamDecoder::new();
            d.push(&h);
        }),
        ClientEvent::Chunk(c) => {
            if let Some((h, _)) = ChunkHeader::parse_at(&c) {
                match live.last_seq {
                    // Joined late (the relay starts a viewer at the newest keyframe group).
                    None if h.seq > 0 => out
                        .messages
                        .push(json!({"type": "backlog", "before": h.seq})),
                    // Chunks skipped (fallen behind, or resumed at the newest keyframe
                    // group after a reconnection): their frames are gone, not their events.
                    Some(last) if h.seq > last.wrapping_add(1) => out
                        .messages
                        .push(json!({"type": "gap", "after": last, "before": h.seq})),
                    _ => {}
                }
                live.last_seq = Some(h.seq);
            }
            decode(out, |d| d.push(&c));
        }
        ClientEvent::Skipped { chunks, bytes } if bytes > 0 => net(
            out,
            "skipped",
            format!("fell behind: skipped {chunks} chunks to the next keyframe group"),
        ),
        ClientEvent::End(reason) => {
            decode(out, StreamDecoder::finish);
            let why = match reason {
                EndReason::Finished => "the song finished",
                _ => "the publisher is gone",
            };
            net(out, "ended", why.into());
        }
        ClientEvent::Failed(e) => net(out, "error", e.to_string()),
        // Witness statements are for verifiers, not for the page; a reconnection's gap is
        // told by the chunk after it.
        _ => {}
    }
}

fn decode(out: &mut Out, f: impl FnOnce(&mut StreamDecoder)) {
    DECODER.with_borrow_mut(|slot| {
        let d = slot.get_or_insert_with(StreamDecoder::new);
        f(d);
        drain(d, out);
    });
}

/// Starts watching the session named by the input (drops any earlier one).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn live_begin(now: f64, wait_ms: u32) -> i32 {
    let session = INPUT.with_borrow(|i| String::from_utf8_lossy(i).into_owned());
    let subscription = Subscription {
        session,
        mode: ViewMode::Live,
        wait_ms,
    };
    DECODER.with_borrow_mut(|d| *d = None);
    LIVE.with_borrow_mut(|slot| {
        *slot = Some(Live {
            client: Client::viewer(config(), subscription, ms(now)),
            last_seq: None,
        })
    });
    with_live(|_| {})
}

/// The WebSocket is open.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn live_connected(now: f64) -> i32 {
    with_live(|c| c.connected(ms(now)))
}

/// One binary WebSocket message from the relay (the input): one whole frame.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn live_message(now: f64) -> i32 {
    let frame = INPUT.with_borrow(|i| Bytes::copy_from_slice(i));
    with_live(|c| match decode_frame(frame, DEFAULT_MAX_FRAME) {
        Ok(m) => c.handle_message(m, ms(now)),
        Err(e) => c.connection_lost(ms(now), format!("a frame from the relay: {e}")),
    })
}

/// The WebSocket closed or failed; the input says why.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn live_lost(now: f64) -> i32 {
    let why = INPUT.with_borrow(|i| String::from_utf8_lossy(i).into_owned());
    with_live(|c| c.connection_lost(ms(now), why))
}

/// The deadline `live_deadline` gave has come.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn live_timeout(now: f64) -> i32 {
    with_live(|c| c.handle_timeout(ms(now)))
}

/// When to call `live_timeout` (ms), or -1 for never.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn live_deadline() -> f64 {
    LIVE.with_borrow(|slot| {
        slot.as_ref()
            .and_then(|l| l.client.poll_timeout())
            .map_or(-1.0, |t| t as f64)
    })
}

/// Stops watching: the client is dropped (the worker closes its WebSocket).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn live_stop() {
    LIVE.with_borrow_mut(|slot| *slot = None);
}

/// Where the bytes to send start (valid until the next call).
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn send_ptr() -> *const u8 {
    SEND.with_borrow(|s| s.as_ptr())
}

/// How many bytes to send the last call left.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn send_len() -> usize {
    SEND.with_borrow(|s| s.len())
}

/// Decodes the input as a session's events from the relay's HTTP (see the module docs):
/// the events of the chunks numbered after `after` (-1: all) and before `before`. Returns
/// 0, or -1 when the input does not start with a stream header.
#[allow(unsafe_code)] // an export: see the crate docs
#[no_mangle]
pub extern "C" fn backlog_events(before: f64, after: f64) -> i32 {
    let mut out = Out::default();
    INPUT.with_borrow(|input| backlog(input, before, after, &mut out));
    out.publish()
}

fn backlog(input: &[u8], before: f64, after: f64, out: &mut Out) {
    let header = match StreamHeader::parse_prefix_len(input) {
        Ok(Some(h)) => h,
        Ok(None) => {
            out.messages.push(json!({
                "type": "error", "message": "the session's events end inside the stream header",
            }));
            out.failed = true;
            return;
        }
        Err(e) => {
            out.messages.push(json!({
                "type": "error", "message": format!("the session's events: {e}"),
            }));
            out.failed = true;
            return;
        }
    };
    let (header, mut at) = header;
    let mut d = StreamDecoder::with_header(header);
    while let Some((&new_group, rest)) = input.get(at..).and_then(<[u8]>::split_first) {
        let Some((h, head)) = ChunkHeader::parse_at(rest) else {
            break;
        };
        let len = head.saturating_add(h.len as usize);
        let Some(chunk) = rest.get(..len) else {
            break;
        };
        at += 1 + len;
        if f64::from(h.seq) >= before {
            break; // the viewer has these from the relay itself
        }
        if new_group != 0 {
            d.new_group();
        }
        // Decoded even when the viewer has them: an event chunk may be coded against the
        // ones before it in its keyframe group.
        match d.decode_events_chunk(chunk) {
            Ok(batch) if f64::from(h.seq) > after => out.batch(&batch),
            Ok(_) => {}
            Err(e) => out.messages.push(json!({
                "type": "damage", "message": format!("event chunk {}: {e}", h.seq),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use bsor_stream_core::net::wire::{ErrorCode, Message, Role};
    use bsor_stream_core::stream::ChunkType;
    use serde_json::Value;

    use super::*;
    use crate::{EVENTS, EVENT_FLOATS, FRAMES, OUTPUT};

    fn vector(name: &str) -> Vec<u8> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto-spec/vectors/");
        std::fs::read(format!("{dir}{name}")).unwrap()
    }

    /// A stream file as a relay holds it: its header and its chunks (up to the index).
    fn split(file: &[u8]) -> (Vec<u8>, Vec<(ChunkHeader, Vec<u8>)>) {
        let (_, mut at) = StreamHeader::parse_prefix_len(file).unwrap().unwrap();
        let header = file[..at].to_vec();
        let mut chunks = Vec::new();
        while let Some((h, head)) = ChunkHeader::parse_at(&file[at..]) {
            if h.kind == ChunkType::Index {
                break;
            }
            let len = head + h.len as usize;
            chunks.push((h, file[at..at + len].to_vec()));
            at += len;
        }
        (header, chunks)
    }

    fn frame(m: &Message) -> Vec<u8> {
        let mut out = BytesMut::new();
        m.encode(&mut out);
        out.to_vec()
    }

    /// What one call gave: the messages, the frames to send, frame and event floats.
    #[derive(Debug, Default)]
    struct Step {
        messages: Vec<Value>,
        sent: Vec<Message>,
        frames: Vec<f32>,
        events: Vec<f32>,
    }

    impl Step {
        fn has(&self, kind: &str, field: &str, value: &str) -> bool {
            self.messages
                .iter()
                .any(|m| m["type"] == kind && m[field] == value)
        }
    }

    fn step(input: &[u8], call: impl FnOnce() -> i32) -> Step {
        INPUT.with_borrow_mut(|i| *i = input.to_vec());
        call();
        let messages: Vec<Value> = OUTPUT
            .with_borrow(|o| serde_json::from_slice::<Value>(o))
            .unwrap()
            .as_array()
            .unwrap()
            .clone();
        let send = SEND.with_borrow(|s| s.clone());
        let sent = messages
            .iter()
            .filter(|m| m["type"] == "send")
            .map(|m| {
                let (from, to) = (m["from"].as_u64().unwrap(), m["to"].as_u64().unwrap());
                let bytes = Bytes::copy_from_slice(&send[from as usize..to as usize]);
                decode_frame(bytes, DEFAULT_MAX_FRAME).unwrap()
            })
            .collect();
        Step {
            messages,
            sent,
            frames: FRAMES.with_borrow(|v| v.clone()),
            events: EVENTS.with_borrow(|v| v.clone()),
        }
    }

    fn relay(m: &Message, now: f64) -> Step {
        step(&frame(m), || live_message(now))
    }

    /// Begins watching `session` and completes the handshake as a relay would.
    fn subscribed(session: &str) {
        let s = step(session.as_bytes(), || live_begin(0.0, 10_000));
        assert!(s.has("live", "do", "connect"), "{:?}", s.messages);
        assert!(s.sent.is_empty(), "nothing is sent before the socket opens");
        let s = step(b"", || live_connected(1.0));
        assert!(matches!(
            &s.sent[..],
            [Message::Hello { role: Role::Viewer, agent, .. }] if agent == "bsor-stream-web"
        ));
        let hello = Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Relay,
            agent: "relay".into(),
        };
        let s = relay(&hello, 2.0);
        assert_eq!(
            s.sent,
            vec![Message::Subscribe {
                session: session.into(),
                mode: ViewMode::Live,
                wait_ms: 10_000,
                from: 0,
            }]
        );
        assert!(s.has("net", "state", "subscribed"));
    }

    /// The whole file through the push decoder, for comparison.
    fn whole(file: &[u8]) -> (Vec<f32>, Vec<f32>) {
        let mut d = StreamDecoder::new();
        d.push(file);
        d.finish();
        let mut out = Out::default();
        drain(&mut d, &mut out);
        (out.frames, out.events)
    }

    #[test]
    fn a_live_session_decodes_as_the_whole_file_does_and_pings_are_answered() {
        let file = vector("synthetic.compact.bsors");
        let (header, chunks) = split(&file);
        subscribed("song-1");
        let mut got = relay(&Message::StreamHeader(header.into()), 3.0);
        assert!(
            got.has("header", "profile", "compact"),
            "{:?}",
            got.messages
        );
        for (k, (_, c)) in chunks.iter().enumerate() {
            let s = relay(&Message::Chunk(c.clone().into()), 4.0 + k as f64);
            assert!(!s.messages.iter().any(|m| m["type"] == "backlog"));
            got.frames.extend(s.frames);
            got.events.extend(s.events);
            if k == 1 {
                let pong = relay(&Message::Ping(77), 5.0);
                assert_eq!(pong.sent, vec![Message::Pong(77)]);
                // A chunk sent again (as after a reconnection) is not decoded twice.
                let again = relay(&Message::Chunk(c.clone().into()), 5.0);
                assert!(again.frames.is_empty() && again.events.is_empty());
            }
        }
        let end = relay(&Message::End(EndReason::Finished), 100.0);
        assert!(end.has("net", "state", "ended"));
        assert!(end.has("live", "do", "close"));
        got.frames.extend(end.frames);
        got.events.extend(end.events);
        let (frames, events) = whole(&file);
        assert!(!frames.is_empty() && !events.is_empty());
        assert_eq!(got.frames, frames);
        assert_eq!(got.events, events);
        assert_eq!(live_deadline(), -1.0, "an ended client asks for no timer");
    }

    #[test]
    fn a_late_join_asks_for_the_backlog_which_decodes_the_events_before_it() {
        let file = vector("synthetic.compact.bsors");
        let (header, chunks) = split(&file);
        // The relay starts the viewer at the last keyframe group.
        let join = chunks
            .iter()
            .rposition(|(h, _)| h.kind == ChunkType::Keyframes)
            .unwrap();
        assert!(join > 0, "the vector has several keyframe groups");
        subscribed("late");
        relay(&Message::StreamHeader(header.clone().into()), 3.0);
        let first = relay(&Message::Chunk(chunks[join].1.clone().into()), 4.0);
        let before = chunks[join].0.seq;
        assert!(first
            .messages
            .iter()
            .any(|m| m["type"] == "backlog" && m["before"] == before));
        // The relay's HTTP body (http.md 4.1): the header, then each event chunk after its
        // byte saying whether a keyframe chunk came before it.
        let mut body = header.clone();
        let mut new_group = 0;
        let mut expected = Vec::new();
        let mut d =
            StreamDecoder::with_header(StreamHeader::parse_prefix_len(&header).unwrap().unwrap().0);
        for (h, c) in &chunks {
            match h.kind {
                ChunkType::Keyframes => new_group = 1,
                ChunkType::Events => {
                    body.push(new_group);
                    body.extend_from_slice(c);
                    if new_group == 1 {
                        d.new_group();
                    }
                    new_group = 0;
                    if h.seq < before {
                        let mut out = Out::default();
                        out.batch(&d.decode_events_chunk(c).unwrap());
                        expected.extend(out.events);
                    }
                }
                _ => {}
            }
        }
        assert!(!expected.is_empty());
        let s = step(&body, || backlog_events(f64::from(before), -1.0));
        assert_eq!(s.events, expected);
        // A gap after chunk 0: the events after it only.
        let s = step(&body, || backlog_events(f64::from(before), 0.0));
        let first_events = expected.len() - s.events.len();
        assert_eq!(s.events, expected[first_events..]);
        assert_eq!(s.events.len() % EVENT_FLOATS, 0);
        // Cut anywhere, the body gives what it holds and no panic.
        for cut in [0, 5, header.len() - 1, header.len() + 3, body.len() - 1] {
            step(&body[..cut], || backlog_events(f64::from(before), -1.0));
        }
        let s = step(b"not a stream", || backlog_events(1.0, -1.0));
        assert!(s.messages.iter().any(|m| m["type"] == "error"));
    }

    #[test]
    fn a_lost_connection_is_retried_at_the_deadline_and_a_skip_is_a_gap() {
        let file = vector("synthetic.compact.bsors");
        let (header, chunks) = split(&file);
        subscribed("flaky");
        relay(&Message::StreamHeader(header.clone().into()), 3.0);
        relay(&Message::Chunk(chunks[0].1.clone().into()), 4.0);
        let s = step(b"socket closed", || live_lost(10.0));
        assert!(s.has("net", "state", "reconnecting"), "{:?}", s.messages);
        let at = live_deadline();
        assert_eq!(at, 260.0, "the first retry 250 ms after the loss");
        let s = step(b"", || live_timeout(at - 1.0));
        assert!(!s.has("live", "do", "connect"), "not before the deadline");
        let s = step(b"", || live_timeout(at));
        assert!(s.has("live", "do", "connect"));
        step(b"", || live_connected(at + 1.0));
        let hello = Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Relay,
            agent: "relay".into(),
        };
        relay(&hello, at + 2.0);
        // The same header again is the same stream; the relay resumes at a later group.
        let s = relay(&Message::StreamHeader(header.into()), at + 3.0);
        assert!(!s.has("net", "state", "error"));
        let later = chunks
            .iter()
            .rposition(|(h, _)| h.kind == ChunkType::Keyframes)
            .unwrap();
        let s = relay(&Message::Chunk(chunks[later].1.clone().into()), at + 4.0);
        let seq = chunks[later].0.seq;
        assert!(s
            .messages
            .iter()
            .any(|m| m["type"] == "gap" && m["after"] == 0 && m["before"] == seq));
        assert!(
            !s.frames.is_empty(),
            "a keyframe group decodes after the gap"
        );
        // A frame that is not one: the connection is dropped and retried, nothing panics.
        let s = step(&[1, 0, 0], || live_message(at + 5.0));
        assert!(s.has("live", "do", "close") && s.has("net", "state", "reconnecting"));
    }

    #[test]
    fn a_final_refusal_ends_the_client_without_retrying() {
        subscribed("nobody");
        let s = relay(
            &Message::Error {
                code: ErrorCode::NoSuchSession,
                message: "no session nobody".into(),
            },
            5.0,
        );
        assert!(s.has("live", "do", "close"));
        assert!(s.messages.iter().any(|m| m["type"] == "net"
            && m["state"] == "error"
            && m["detail"].as_str().unwrap().contains("no session nobody")));
        assert_eq!(live_deadline(), -1.0);
        live_stop();
        let s = step(b"", || live_timeout(1e9));
        assert!(s.messages.iter().any(|m| m["type"] == "error"));
    }
}

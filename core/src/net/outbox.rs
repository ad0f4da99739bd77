//! The publisher's outbox, without I/O: the chunks the relay has not acknowledged yet,
//! bounded in bytes, which chunk goes out next, and what a `Resume` or an `Ack` removes.
//! Chunks beyond the memory bound may live in a spill file that the shell owns
//! ([`super::spool`]); the outbox then keeps only their place in it.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::stream::ChunkHeader;

/// The outbox would hold more than its bound: the relay has been away too long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{held} bytes wait for the relay's acknowledgement; the bound is {limit}")]
pub struct Overflow {
    /// Bytes held, with the chunk that did not fit.
    pub held: usize,
    /// The bound.
    pub limit: usize,
}

/// Where a chunk waiting in the outbox is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    /// In memory.
    Memory(Bytes),
    /// In the spill file, at this offset, this long.
    Spilled {
        /// Offset in the spill file.
        at: u64,
        /// Length.
        len: usize,
    },
}

impl Held {
    fn memory(&self) -> usize {
        match self {
            Held::Memory(b) => b.len(),
            Held::Spilled { .. } => 0,
        }
    }
}

/// Chunks on their way to the relay: sent or not, kept until acknowledged, in memory up to
/// a bound and beyond it (when the owner has a spill file) as offsets into that file.
#[derive(Debug)]
pub struct Outbox {
    chunks: VecDeque<(u32, Held)>,
    /// How many of `chunks` went out on the current connection.
    sent: usize,
    bytes: usize,
    limit: usize,
    spilled: usize,
    acked: u64,
}

impl Outbox {
    /// An empty outbox that holds at most `limit` bytes of chunks in memory.
    pub fn new(limit: usize) -> Self {
        Outbox {
            chunks: VecDeque::new(),
            sent: 0,
            bytes: 0,
            limit,
            spilled: 0,
            acked: 0,
        }
    }

    /// Adds a whole chunk (header and payload) to send, in memory. Its sequence number is
    /// read from its header; a chunk without a valid header is refused as `None`.
    pub fn push(&mut self, chunk: Bytes) -> Result<Option<()>, Overflow> {
        let Some((h, _)) = ChunkHeader::parse_at(&chunk) else {
            return Ok(None);
        };
        let held = self.bytes + chunk.len();
        if held > self.limit {
            return Err(Overflow {
                held,
                limit: self.limit,
            });
        }
        self.bytes = held;
        self.chunks.push_back((h.seq, Held::Memory(chunk)));
        Ok(Some(()))
    }

    /// Adds a chunk that the owner wrote to its spill file: its sequence number and where.
    pub fn push_spilled(&mut self, seq: u32, at: u64, len: usize) {
        self.spilled += 1;
        self.chunks.push_back((seq, Held::Spilled { at, len }));
    }

    /// The next chunk to send on this connection.
    pub fn next_to_send(&mut self) -> Option<Held> {
        let c = self.chunks.get(self.sent)?.1.clone();
        self.sent += 1;
        Some(c)
    }

    /// The relay stored every chunk up to and including `seq`.
    pub fn ack(&mut self, seq: u32) {
        while let Some(&(s, _)) = self.chunks.front() {
            if s > seq {
                break;
            }
            self.drop_front();
        }
    }

    /// A new connection: the relay expects `next_seq`; what it has is dropped and the rest
    /// goes out again from the start.
    pub fn resume(&mut self, next_seq: u32) {
        self.sent = 0;
        if let Some(seq) = next_seq.checked_sub(1) {
            self.ack(seq);
        }
    }

    fn drop_front(&mut self) {
        if let Some((_, c)) = self.chunks.pop_front() {
            self.bytes -= c.memory();
            if let Held::Spilled { .. } = c {
                self.spilled -= 1;
            }
            self.sent = self.sent.saturating_sub(1);
            self.acked += 1;
        }
    }

    /// Chunks waiting for an acknowledgement.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Nothing waits for an acknowledgement.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes held in memory.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Chunks held in the spill file.
    pub fn spilled(&self) -> usize {
        self.spilled
    }

    /// Chunks acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::ChunkType;

    fn chunk(seq: u32, payload: usize) -> Bytes {
        let mut out = Vec::new();
        ChunkHeader::new(ChunkType::Frames, seq, 0, 1, 0.0).write_to(&vec![7; payload], &mut out);
        Bytes::from(out)
    }

    #[test]
    fn outbox_resends_what_the_relay_lacks_and_forgets_what_it_acked() {
        let mut o = Outbox::new(1 << 20);
        for s in 0..5 {
            o.push(chunk(s, 10)).unwrap().unwrap();
        }
        let sent: Vec<_> = std::iter::from_fn(|| o.next_to_send()).collect();
        assert_eq!(sent.len(), 5);
        assert_eq!(sent[4], Held::Memory(chunk(4, 10)));
        o.ack(1);
        assert_eq!(o.acked(), 2);
        // Reconnected: the relay stored up to 2 (expects 3).
        o.resume(3);
        let again: Vec<_> = std::iter::from_fn(|| o.next_to_send()).collect();
        assert_eq!(
            again,
            vec![Held::Memory(chunk(3, 10)), Held::Memory(chunk(4, 10))]
        );
        o.ack(4);
        assert!(o.is_empty());
        assert_eq!(o.bytes(), 0);
    }

    #[test]
    fn outbox_is_bounded_and_refuses_non_chunks() {
        let one = chunk(0, 100).len();
        let mut o = Outbox::new(one * 2);
        o.push(chunk(0, 100)).unwrap().unwrap();
        o.push(chunk(1, 100)).unwrap().unwrap();
        let e = o.push(chunk(2, 100)).unwrap_err();
        assert_eq!(e.held, one * 3);
        assert_eq!(o.push(Bytes::from_static(b"junk")).unwrap(), None);
        // An ack makes room.
        o.ack(0);
        o.push(chunk(2, 100)).unwrap().unwrap();
    }

    #[test]
    fn spilled_chunks_keep_their_place_and_leave_memory_alone() {
        let one = chunk(0, 100).len();
        let mut o = Outbox::new(one);
        o.push(chunk(0, 100)).unwrap().unwrap();
        o.push_spilled(1, 0, one);
        o.push_spilled(2, one as u64, one);
        assert_eq!((o.bytes(), o.spilled()), (one, 2));
        assert_eq!(o.next_to_send(), Some(Held::Memory(chunk(0, 100))));
        assert_eq!(o.next_to_send(), Some(Held::Spilled { at: 0, len: one }));
        o.resume(2);
        assert_eq!((o.bytes(), o.spilled()), (0, 1));
        assert_eq!(
            o.next_to_send(),
            Some(Held::Spilled {
                at: one as u64,
                len: one
            })
        );
        assert_eq!(o.next_to_send(), None);
    }
}

//! Bit-level coding of frame and event chunks: residuals (integers made small and unsigned
//! by prediction), each sent as its bit length, coded against an adaptive centre in an
//! Exp-Golomb code, and the bits below its leading one, raw; all through a bit packer that
//! writes least significant bits first.
//!
//! Why not an entropy coder: an adaptive binary range coder (the LZMA design) coding the
//! lengths through a 6-bit tree was the first design. It made lossless streams 1.7% of BSOR
//! smaller on the corpus, but its six dependent steps per value held encoding and decoding
//! to about 60 MB/s; this code runs at 120 to 200 MB/s and keeps the lossless stream within
//! its size targets. Specified bit for bit in `proto-spec/format.md`, sections 7 to 9.

/// Maps float bits to an unsigned integer whose order is the floats' order, so that close
/// floats have close integers (negative floats are reflected below positive ones).
pub(crate) fn ordered(bits: u32) -> u32 {
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

pub(crate) fn unordered(o: u32) -> u32 {
    if o >> 31 == 1 {
        o & 0x7fff_ffff
    } else {
        !o
    }
}

pub(crate) fn zigzag(d: i32) -> u32 {
    ((d << 1) ^ (d >> 31)) as u32
}

pub(crate) fn unzigzag(z: u32) -> i32 {
    ((z >> 1) as i32) ^ -((z & 1) as i32)
}

/// The coder of one column of residuals. A residual is sent as its bit length `L` (0 to 32)
/// and the `L − 1` bits below its leading one, raw. The length is sent as its difference from
/// an adaptive centre (a running average of the column's recent lengths), zigzagged, in an
/// order-1 Exp-Golomb code.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LengthModel {
    /// Running average of the lengths, in sixteenths.
    avg: i32,
}

impl Default for LengthModel {
    fn default() -> Self {
        LengthModel { avg: 12 * 16 }
    }
}

impl LengthModel {
    fn center(&self) -> i32 {
        (self.avg + 8) >> 4
    }

    fn learn(&mut self, len: i32) {
        self.avg += (len * 16 - self.avg) >> 2;
    }

    /// Codes the residual `z`.
    #[inline]
    pub(crate) fn encode(&mut self, raw: &mut BitWriter, z: u32) {
        let len = (32 - z.leading_zeros()) as i32;
        let d = len - self.center();
        let zz = ((d << 1) ^ (d >> 31)) as u32;
        // Exp-Golomb, order 1, least significant bit first: q zeros, a one, then the q + 1
        // bits of zz + 2 below its leading one.
        let v = zz + 2;
        let q = 30 - v.leading_zeros();
        // As one value: bit q is the one, the bits of v below its leading one above it
        // (2q + 2 bits; q is at most 5 for lengths within 0..=32).
        let low = v & ((1 << (q + 1)) - 1);
        raw.put((1 << q) | (low << (q + 1)), 2 * q + 2);
        if len >= 2 {
            raw.put(z, len as u32 - 1);
        }
        self.learn(len);
    }

    /// Decodes a residual.
    #[inline]
    pub(crate) fn decode(&mut self, raw: &mut BitReader) -> u32 {
        // One look at the next 56 bits serves the whole residual when q <= 5 (every valid
        // stream): 12 bits of length code and at most 31 raw bits.
        let window = raw.peek56();
        let q = window.trailing_zeros().min(15);
        if q <= 5 {
            let code = 2 * q + 2;
            let v = (1u32 << (q + 1)) | ((window >> (q + 1)) as u32 & ((1 << (q + 1)) - 1));
            let len = self.length_of(v);
            let extra = if len >= 2 { len as u32 - 1 } else { 0 };
            raw.consume(code + extra);
            let low = ((window >> code) & ((1u64 << extra) - 1)) as u32;
            return match len {
                0 => 0,
                1 => 1,
                n => (1u32 << (n - 1)) | low,
            };
        }
        // Forged input only: held to something bounded.
        let bits = raw.get(2 * q + 2);
        let v = (1u32 << (q + 1)) | (bits >> (q + 1));
        let len = self.length_of(v);
        match len {
            0 => 0,
            1 => 1,
            n => (1u32 << (n - 1)) | raw.get(n as u32 - 1),
        }
    }

    /// The length a code value `v = zz + 2` stands for, learned.
    #[inline]
    fn length_of(&mut self, v: u32) -> i32 {
        let zz = v - 2;
        let d = ((zz >> 1) as i32) ^ -((zz & 1) as i32);
        let len = (self.center() + d).clamp(0, 32);
        self.learn(len);
        len
    }
}

/// Packs raw bits, least significant first, into bytes.
#[derive(Debug, Default)]
pub(crate) struct BitWriter {
    acc: u64,
    n: u32,
    out: Vec<u8>,
}

impl BitWriter {
    /// Appends the low `n` bits of `v` (`n` at most 32).
    #[inline]
    pub(crate) fn put(&mut self, v: u32, n: u32) {
        if n == 0 {
            return;
        }
        self.acc |= u64::from(v & (u32::MAX >> (32 - n))) << self.n;
        self.n += n;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.n -= 32;
        }
    }

    /// The packed bytes, without trailing zero bytes (the reader reads zeros past the end);
    /// the writer is reset.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        while self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n = self.n.saturating_sub(8);
        }
        while self.out.last() == Some(&0) {
            self.out.pop();
        }
        self.acc = 0;
        self.n = 0;
        std::mem::take(&mut self.out)
    }
}

/// Reads bits packed by [`BitWriter`]; past the end it yields zeros and counts the overrun.
#[derive(Debug)]
pub(crate) struct BitReader<'a> {
    input: &'a [u8],
    pos: usize,
    acc: u64,
    n: u32,
    overrun_bits: u64,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        BitReader {
            input,
            pos: 0,
            acc: 0,
            n: 0,
            overrun_bits: 0,
        }
    }

    /// Makes at least 56 bits available (zeros past the end of the input).
    #[inline]
    fn refill(&mut self) {
        if let Some(w) = self.input.get(self.pos..self.pos + 8) {
            let word = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            self.acc |= word << self.n;
            let taken = (63 - self.n) >> 3;
            self.pos += taken as usize;
            self.n += taken * 8;
            return;
        }
        while self.n <= 56 {
            match self.input.get(self.pos) {
                Some(&b) => self.acc |= u64::from(b) << self.n,
                None => self.overrun_bits += 8,
            }
            self.pos += 1;
            self.n += 8;
        }
    }

    /// The next `n` bits (`n` at most 32).
    #[inline]
    pub(crate) fn get(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        if self.n < n {
            self.refill();
        }
        let v = (self.acc & (u64::MAX >> (64 - n))) as u32;
        self.acc >>= n;
        self.n -= n;
        v
    }

    /// The next 56 bits (zeros past the end of the input), without consuming them.
    #[inline]
    pub(crate) fn peek56(&mut self) -> u64 {
        if self.n < 56 {
            self.refill();
        }
        self.acc & ((1 << 56) - 1)
    }

    /// Consumes `n` bits (at most 56) after [`peek56`](Self::peek56).
    #[inline]
    pub(crate) fn consume(&mut self, n: u32) {
        let n = n.min(self.n);
        self.acc >>= n;
        self.n -= n;
    }

    /// Bytes read beyond the input (trailing zero bytes are left out by the writer, so a
    /// few of these are normal).
    #[cfg(test)]
    pub(crate) fn overrun(&self) -> u64 {
        self.overrun_bits / 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residuals_and_raw_bits_round_trip() {
        let mut raw = BitWriter::default();
        let mut model = LengthModel::default();
        let mut state = 12345u32;
        let mut sent = Vec::new();
        for i in 0..10_000u32 {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            // Residuals of every bit length, and stretches of similar lengths.
            let shift = if i % 100 < 50 {
                state % 33
            } else {
                20 + state % 3
            };
            let z = if shift == 32 {
                0
            } else {
                (state >> 3) >> shift.min(31)
            };
            model.encode(&mut raw, z);
            raw.put(state & 1, 1);
            sent.push((z, state & 1));
        }
        let bytes = raw.finish();
        let mut rr = BitReader::new(&bytes);
        let mut model = LengthModel::default();
        for (i, &(z, b)) in sent.iter().enumerate() {
            assert_eq!(model.decode(&mut rr), z, "residual {i}");
            assert_eq!(rr.get(1), b, "bit {i}");
        }
        assert!(rr.overrun() <= 8);
    }

    #[test]
    fn decoding_garbage_or_nothing_is_bounded() {
        let mut model = LengthModel::default();
        let mut rr = BitReader::new(&[]);
        for _ in 0..1000 {
            model.decode(&mut rr);
        }
        assert!(rr.overrun() > 0, "reads past the end are counted");
        let mut rr = BitReader::new(&[0xff]);
        assert_eq!(rr.get(8), 0xff);
        assert_eq!(rr.get(32), 0);
        assert!(rr.overrun() >= 4, "reads past the end are counted");
        let junk = [0u8; 64];
        let mut rr = BitReader::new(&junk);
        for _ in 0..100 {
            // All zeros: the longest prefix a reader accepts, then a bounded value.
            let _ = model.decode(&mut rr);
        }
    }

    #[test]
    fn zigzag_and_ordered_are_inverse() {
        for v in [0i32, 1, -1, i32::MAX, i32::MIN, 12345, -54321] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        for bits in [
            0u32,
            0x8000_0000,
            0x3f80_0000,
            0xbf80_0000,
            0x7fc0_1234,
            u32::MAX,
        ] {
            assert_eq!(unordered(ordered(bits)), bits);
        }
        assert!(ordered((-1.0f32).to_bits()) < ordered((-0.5f32).to_bits()));
        assert!(ordered((-0.0f32).to_bits()) < ordered(0.0f32.to_bits()));
        assert!(ordered(1.0f32.to_bits()) < ordered(2.0f32.to_bits()));
    }
}

//! The entropy coder of the lossy profiles' frame chunks: an adaptive binary range coder
//! (the LZMA design, with probabilities that learn fast at first), and the residual model
//! built on it. Specified bit for bit in `proto-spec/format.md`, section 10.6.
//!
//! Why a range coder here and not in the lossless profile: lossy residuals are small (a few
//! bits each), so how well their lengths and signs are modelled is most of their cost. On
//! the corpus this coder makes compact frames 10% smaller than the bit code of section 8 in
//! archive groups (5% in 1-second live groups), at about a third of its speed; the lossless
//! profile, whose speed targets bind and whose residuals are mostly raw low bits, keeps the
//! bit code. Written by hand because the format pins down every bit of it (a decoder in
//! another language must reproduce it exactly), which no general-purpose crate promises.

/// Probabilities are 12-bit: the chance that the next bit is 0, in 1/4096.
const PROB_BITS: u32 = 12;
const PROB_INIT: u16 = 1 << (PROB_BITS - 1);
/// The adaptation settles at moving 1/16 of the way per bit.
const MAX_SHIFT: u8 = 4;
const TOP: u32 = 1 << 24;

use super::bits::CODE_LENGTHS;

/// An adaptive probability of a 0 bit, with the number of bits it has seen (capped at 15).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prob {
    p: u16,
    seen: u8,
}

impl Prob {
    /// A new probability: 1/2, nothing seen.
    pub(crate) const NEW: Prob = Prob {
        p: PROB_INIT,
        seen: 0,
    };
}

impl Default for Prob {
    fn default() -> Self {
        Prob::NEW
    }
}

/// The shift after `seen` bits: `1 + floor(log2(seen + 1))`, at most `MAX_SHIFT` (a new
/// probability moves about `1/(n+1)` of the way, like a count, so short groups learn fast).
const SHIFT: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        let s = 1 + (31 - (i as u32 + 1).leading_zeros()) as u8;
        t[i] = if s < MAX_SHIFT { s } else { MAX_SHIFT };
        i += 1;
    }
    t
};

impl Prob {
    /// Moves the probability toward the bit seen. `p` stays within 15..=4081 (from 2048 by
    /// these shifts), so both outcomes always keep a share of the range.
    #[inline(always)]
    fn update(&mut self, bit: bool) {
        let shift = SHIFT[usize::from(self.seen & 15)];
        self.seen = (self.seen + 1).min(15);
        if bit {
            self.p -= self.p >> shift;
        } else {
            self.p += ((1 << PROB_BITS) - self.p) >> shift;
        }
    }
}

/// The range encoder. The first byte of LZMA's design is always 0 and is left out.
#[derive(Debug)]
pub(crate) struct RangeEncoder {
    low: u64,
    range: u32,
    cache: u8,
    cache_size: u64,
    out: Vec<u8>,
    skip_first: bool,
}

impl Default for RangeEncoder {
    fn default() -> Self {
        RangeEncoder {
            low: 0,
            range: u32::MAX,
            cache: 0,
            cache_size: 1,
            out: Vec::new(),
            skip_first: true,
        }
    }
}

impl RangeEncoder {
    fn shift_low(&mut self) {
        if (self.low as u32) < 0xFF00_0000 || (self.low >> 32) != 0 {
            let carry = (self.low >> 32) as u8;
            let mut temp = self.cache;
            loop {
                let byte = temp.wrapping_add(carry);
                if self.skip_first {
                    self.skip_first = false;
                } else {
                    self.out.push(byte);
                }
                temp = 0xFF;
                self.cache_size -= 1;
                if self.cache_size == 0 {
                    break;
                }
            }
            self.cache = (self.low >> 24) as u8;
        }
        self.cache_size += 1;
        self.low = (self.low & 0x00FF_FFFF) << 8;
    }

    #[inline(always)]
    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.shift_low();
        }
    }

    /// Codes one bit with an adaptive probability.
    #[inline(always)]
    pub(crate) fn bit(&mut self, p: &mut Prob, bit: bool) {
        let bound = (self.range >> PROB_BITS) * u32::from(p.p);
        if bit {
            self.low += u64::from(bound);
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit);
        self.normalize();
    }

    /// Codes the low `n` bits of `v` (`n` ≤ 32), most significant first, each with
    /// probability 1/2.
    #[inline]
    pub(crate) fn direct(&mut self, v: u32, n: u32) {
        for i in (0..n).rev() {
            self.range >>= 1;
            if (v >> i) & 1 == 1 {
                self.low += u64::from(self.range);
            }
            self.normalize();
        }
    }

    /// Ends the stream and returns its bytes; the encoder is reset for the next chunk.
    ///
    /// The decoder reads zeros past the end of its input, so the stream ends with the value
    /// in `[low, low + range)` that has the most trailing zero bits, and its trailing zero
    /// bytes are left out: a byte or two of flush instead of LZMA's five.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let end = self.low + u64::from(self.range);
        for k in (0..=32).rev() {
            let mask = (1u64 << k) - 1;
            let v = (self.low + mask) & !mask;
            if v < end {
                self.low = v;
                break;
            }
        }
        for _ in 0..5 {
            self.shift_low();
        }
        let mut out = std::mem::take(&mut self.out);
        while out.last() == Some(&0) {
            out.pop();
        }
        *self = RangeEncoder::default();
        out
    }
}

/// The range decoder. Past the end of its input it reads zero bytes: a forged chunk cannot
/// make it read out of bounds, and the frame count caps the work.
#[derive(Debug)]
pub(crate) struct RangeDecoder<'a> {
    input: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
}

impl<'a> RangeDecoder<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        let mut d = RangeDecoder {
            input,
            pos: 0,
            range: u32::MAX,
            code: 0,
        };
        for _ in 0..4 {
            d.code = (d.code << 8) | u32::from(d.next_byte());
        }
        d
    }

    #[inline]
    fn next_byte(&mut self) -> u8 {
        let b = self.input.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    /// Bytes read beyond the input.
    #[cfg(test)]
    pub(crate) fn overrun(&self) -> usize {
        self.pos.saturating_sub(self.input.len())
    }

    #[inline(always)]
    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.code = (self.code << 8) | u32::from(self.next_byte());
        }
    }

    #[inline(always)]
    pub(crate) fn bit(&mut self, p: &mut Prob) -> bool {
        let bound = (self.range >> PROB_BITS) * u32::from(p.p);
        // Forged input can put `code` above `range`; the comparison still picks a side
        // and the subtraction wraps, so decoding goes on with some bits.
        let bit = self.code >= bound;
        if bit {
            self.code = self.code.wrapping_sub(bound);
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit);
        self.normalize();
        bit
    }

    /// `n` bits (`n` ≤ 32) of probability 1/2, most significant first.
    #[inline]
    pub(crate) fn direct(&mut self, n: u32) -> u32 {
        let mut v = 0u32;
        for _ in 0..n {
            self.range >>= 1;
            let bit = self.code >= self.range;
            if bit {
                self.code = self.code.wrapping_sub(self.range);
            }
            v = (v << 1) | u32::from(bit);
            self.normalize();
        }
        v
    }
}

/// The model of one column of lossy residuals (format.md 10.6): a residual `r` (an `i32`)
/// is sent as the bit length `L` of `|r|` through a 6-level tree of adaptive bits, the bit
/// below the leading one as an adaptive bit of its own per `L`, the other `L − 2` bits
/// below it direct, then the sign as an adaptive bit whose context is the sign of the
/// column's previous residual.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResidualModel {
    tree: [Prob; 64],
    top: [Prob; 33],
    sign: [Prob; 3],
    /// 0: the previous residual was 0 (or there was none); 1: positive; 2: negative.
    last: u8,
}

impl ResidualModel {
    /// A model with every probability new. (Built from constants, so that arrays of models
    /// are copied from one image instead of written probability by probability: that code
    /// was 100 KB of the library.)
    pub(crate) const NEW: ResidualModel = ResidualModel {
        tree: [Prob::NEW; 64],
        top: [Prob::NEW; 33],
        sign: [Prob::NEW; 3],
        last: 0,
    };
}

impl Default for ResidualModel {
    fn default() -> Self {
        ResidualModel::NEW
    }
}

/// How many bits a starting probability counts for: its first updates then move it as if
/// it had already seen that many (format.md 10.6).
const PRIOR_SEEN: u8 = 4;

impl ResidualModel {
    /// A model whose length tree starts at the distribution the prefix code of section 8
    /// gives the lengths around `centre` (weight `2^(12 − code length)` for a length within
    /// ±10 of it, 1 for the other lengths up to 32, 0 above), as if it had seen
    /// [`PRIOR_SEEN`] bits at each node: a 1-second group does not spend its first
    /// residuals learning what every group looks like.
    #[inline(never)] // a few calls a group; inlined into array initialisers it grew the library by 250 KB
    pub(crate) fn with_prior(centre: u32) -> Self {
        let weight = |len: u32| -> u64 {
            let d = i64::from(len) - i64::from(centre);
            if len > 32 {
                0
            } else if (-10..=10).contains(&d) {
                1 << (12 - CODE_LENGTHS[(d + 10) as usize])
            } else {
                1
            }
        };
        // Subtree weights: node n (1..63) covers the lengths whose 6 bits start with the
        // bits of n below its leading one; leaves 64..127 are the lengths 0..63.
        let mut w = [0u64; 128];
        for (len, slot) in w[64..].iter_mut().enumerate() {
            *slot = weight(len as u32);
        }
        for n in (1..64).rev() {
            w[n] = w[2 * n] + w[2 * n + 1];
        }
        let mut model = ResidualModel {
            // The bit below the leading one is 0 about 60% of the time.
            top: [Prob {
                p: 2458,
                seen: PRIOR_SEEN,
            }; 33],
            ..ResidualModel::default()
        };
        for n in 1..64 {
            let total = w[n];
            if let Some(p) = (4096 * w[2 * n] + total / 2).checked_div(total) {
                model.tree[n] = Prob {
                    p: p.clamp(15, 4081) as u16,
                    seen: PRIOR_SEEN,
                };
            }
        }
        model
    }

    pub(crate) fn encode(&mut self, rc: &mut RangeEncoder, r: i32) {
        let m = r.unsigned_abs();
        let len = 32 - m.leading_zeros();
        let mut node = 1usize;
        for i in (0..6).rev() {
            let b = (len >> i) & 1;
            rc.bit(&mut self.tree[node & 63], b == 1);
            node = (node << 1) | b as usize;
        }
        if len >= 2 {
            rc.bit(&mut self.top[len as usize], (m >> (len - 2)) & 1 == 1);
            rc.direct(m, len - 2);
        }
        if m != 0 {
            let negative = r < 0;
            rc.bit(&mut self.sign[usize::from(self.last)], negative);
            self.last = if negative { 2 } else { 1 };
        } else {
            self.last = 0;
        }
    }

    pub(crate) fn decode(&mut self, rc: &mut RangeDecoder) -> i32 {
        let mut node = 1usize;
        for _ in 0..6 {
            node = (node << 1) | usize::from(rc.bit(&mut self.tree[node & 63]));
        }
        // A valid stream never sends a length above 32; forged ones are clamped.
        let len = ((node & 63) as u32).min(32);
        let m = match len {
            0 => 0,
            1 => 1,
            n => {
                let top = u32::from(rc.bit(&mut self.top[n as usize]));
                (1u32 << (n - 1)) | (top << (n - 2)) | rc.direct(n - 2)
            }
        };
        if m == 0 {
            self.last = 0;
            return 0;
        }
        let negative = rc.bit(&mut self.sign[usize::from(self.last)]);
        self.last = if negative { 2 } else { 1 };
        let r = m as i32; // 2^31 becomes i32::MIN, which negates to itself
        if negative {
            r.wrapping_neg()
        } else {
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_direct_bits_and_residuals_round_trip() {
        let mut enc = RangeEncoder::default();
        let mut p = [Prob::default(); 3];
        let mut model = ResidualModel::default();
        let mut state = 12345u32;
        let mut sent = Vec::new();
        for i in 0..10_000u32 {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let bit = (state >> 16) % 7 == 0;
            // Residuals of every bit length and both signs, and the extremes.
            let r = match i % 101 {
                0 => i32::MIN,
                1 => i32::MAX,
                _ => ((state >> 1) as i32) >> (state % 32),
            };
            let d = state.rotate_left(7);
            enc.bit(&mut p[(i % 3) as usize], bit);
            model.encode(&mut enc, r);
            enc.direct(d, i % 33);
            sent.push((bit, r, d & (((1u64 << (i % 33)) - 1) as u32)));
        }
        let bytes = enc.finish();
        let mut dec = RangeDecoder::new(&bytes);
        let mut p = [Prob::default(); 3];
        let mut model = ResidualModel::default();
        for (i, &(bit, r, d)) in sent.iter().enumerate() {
            assert_eq!(dec.bit(&mut p[i % 3]), bit, "bit {i}");
            assert_eq!(model.decode(&mut dec), r, "residual {i}");
            assert_eq!(dec.direct(i as u32 % 33), d, "direct bits {i}");
        }
        assert!(dec.overrun() <= 8);
    }

    #[test]
    fn skewed_bits_cost_their_entropy() {
        // 1-in-16 bits: 0.337 bits each in theory; a probability that keeps moving 1/16 of
        // the way toward every bit pays about 15% more (measured: 3857 bytes for 3370).
        let mut enc = RangeEncoder::default();
        let mut p = Prob::default();
        for i in 0..80_000u32 {
            enc.bit(&mut p, i % 16 == 0);
        }
        let bytes = enc.finish().len() as f64;
        let ideal = 80_000.0 * 0.337 / 8.0;
        assert!(bytes < ideal * 1.2, "{bytes} vs {ideal}");
    }

    #[test]
    fn decoding_garbage_or_nothing_is_bounded() {
        for input in [&[][..], &[0xff; 64][..], &[0x5a, 0xa5, 0xff, 0, 1][..]] {
            let mut dec = RangeDecoder::new(input);
            let mut model = ResidualModel::default();
            for _ in 0..1000 {
                model.decode(&mut dec);
                dec.direct(32);
            }
            assert!(dec.overrun() > 0, "reads past the end yield zeros");
        }
    }

    #[test]
    fn an_empty_stream_is_empty() {
        let mut enc = RangeEncoder::default();
        assert!(enc.finish().is_empty());
        // Zero bits at probability 1/2 and residuals of 0 may cost nothing at all.
        let mut model = ResidualModel::default();
        model.encode(&mut enc, 0);
        let bytes = enc.finish();
        let mut dec = RangeDecoder::new(&bytes);
        assert_eq!(ResidualModel::default().decode(&mut dec), 0);
    }
}

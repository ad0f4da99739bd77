//! Bit-level coding of frame and event chunks: residuals (integers made small and unsigned
//! by prediction), each sent as its bit length, coded against an adaptive centre in a fixed
//! prefix code, and the bits below its leading one, raw; all through a bit packer that
//! writes least significant bits first.
//!
//! Why not an entropy coder: an adaptive binary range coder (the LZMA design) coding the
//! lengths through a 6-bit tree was the first design. It made lossless streams 1.7% of BSOR
//! smaller on the corpus, but its six dependent steps per value held encoding and decoding
//! to about 60 MB/s. Measured on the corpus's residuals, an adaptive model of the lengths
//! would still save 13% of the compact profile's residual bits in archive groups, 7% in
//! 1-second live groups, over this code; the fixed prefix code (a Huffman code of the
//! length's distance from its centre) took most of that at no cost in speed, decoded by one
//! table look-up per residual. Specified bit for bit in `proto-spec/format.md`, sections 7 to 9.

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

/// The index of the component with the largest magnitude: scanning in order, a later one
/// replaces the current best only if its magnitude is strictly greater (the first wins ties;
/// a NaN never replaces, and a NaN first component is never replaced).
pub(crate) fn largest_of(q: &[u32]) -> usize {
    let mut best = 0;
    let mut mag = q.first().map_or(0.0, |&b| f32::from_bits(b).abs());
    for (i, &bits) in q.iter().enumerate().skip(1) {
        let m = f32::from_bits(bits).abs();
        if m > mag {
            best = i;
            mag = m;
        }
    }
    best
}

/// The magnitude of the component `skip` of a unit vector given the others:
/// `sqrt(max(0, 1 − Σ others²))` in `f32`, summed in index order (each square rounded, then
/// each subtraction; a NaN sum gives 0).
pub(crate) fn unit_rest(q: &[u32], skip: usize) -> f32 {
    let mut s = 1.0f32;
    for (i, &bits) in q.iter().enumerate() {
        if i != skip {
            let v = f32::from_bits(bits);
            s -= v * v;
        }
    }
    s.max(0.0).sqrt()
}

pub(crate) fn zigzag(d: i32) -> u32 {
    ((d << 1) ^ (d >> 31)) as u32
}

pub(crate) fn unzigzag(z: u32) -> i32 {
    ((z >> 1) as i32) ^ -((z & 1) as i32)
}

/// The length difference `d = L − centre` of a residual is sent in a prefix code over
/// `d = −10..=10` and an escape (format.md section 8): these are the code lengths of
/// `d = −10, …, 10` and then of the escape, which is followed by `L` itself in 6 bits. The
/// lengths are those of a Huffman code of `d` on the corpus (lossless and lossy frames, live
/// and archive, weighted alike); they fill the code space exactly (Kraft sum 1).
pub(crate) const CODE_LENGTHS: [u32; 22] = [
    10, 10, 10, 9, 8, 7, 6, 5, 3, 3, 2, 2, 3, 5, 7, 9, 10, 10, 10, 10, 10, 6,
];
/// The symbol of the escape in [`CODE_LENGTHS`] and [`CODES`].
const ESCAPE: usize = 21;

/// The code words, canonical: symbols in order of (length, position in [`CODE_LENGTHS`])
/// get consecutive values, each the previous plus one, shifted left when the length grows;
/// a word goes into the stream most significant bit first, so it is stored here bit-reversed
/// (ready for [`BitWriter::put`], which writes least significant bits first).
static CODES: [u32; 22] = canonical_codes();

const fn canonical_codes() -> [u32; 22] {
    let mut codes = [0u32; 22];
    let mut code = 0u32;
    let mut len = 1;
    while len <= 12 {
        let mut s = 0;
        while s < 22 {
            if CODE_LENGTHS[s] == len {
                // Reverse the `len` bits of `code`.
                let mut r = 0;
                let mut i = 0;
                while i < len {
                    r |= ((code >> i) & 1) << (len - 1 - i);
                    i += 1;
                }
                codes[s] = r;
                code += 1;
            }
            s += 1;
        }
        code <<= 1;
        len += 1;
    }
    codes
}

/// What the next 12 bits of a stream say, for every value of them (least significant bit
/// first, as they come): bits 0..8 hold the bits the length code takes (2 to 12, the
/// escape's 6 bits of `L` included), bits 8..16 the value plus 128, bit 16 whether the
/// value is `L` itself (after an escape) rather than `d`.
static LENGTH_CODE: [u32; 4096] = length_code_table();

const fn length_code_table() -> [u32; 4096] {
    let codes = canonical_codes();
    let mut t = [0u32; 4096];
    let mut w = 0usize;
    while w < 4096 {
        let mut s = 0;
        while s < 22 {
            let len = CODE_LENGTHS[s];
            if (w as u32) & ((1 << len) - 1) == codes[s] {
                t[w] = if s == ESCAPE {
                    let l = ((w as u32) >> len) & 63;
                    (len + 6) | ((l + 128) << 8) | (1 << 16)
                } else {
                    len | ((s as u32 + 128 - 10) << 8)
                };
            }
            s += 1;
        }
        w += 1;
    }
    t
}

/// The coder of one column of residuals. A residual is sent as its bit length `L` (0 to 32)
/// and the `L − 1` bits below its leading one, raw. The length is sent as its difference from
/// an adaptive centre (a running average of the column's recent lengths) in a fixed prefix
/// code, or escaped.
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
    /// A model whose centre starts at `center` bits.
    pub(crate) fn starting_at(center: i32) -> Self {
        LengthModel { avg: center * 16 }
    }

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
        if (-10..=10).contains(&d) {
            let s = (d + 10) as usize;
            raw.put(CODES[s], CODE_LENGTHS[s]);
        } else {
            raw.put(CODES[ESCAPE], CODE_LENGTHS[ESCAPE]);
            raw.put(len as u32, 6);
        }
        if len >= 2 {
            raw.put(z, len as u32 - 1);
        }
        self.learn(len);
    }

    /// Decodes a residual.
    #[inline(always)]
    pub(crate) fn decode(&mut self, raw: &mut BitReader) -> u32 {
        // One look at the next 57 bits serves the whole residual: at most 12 bits of length
        // code, found in a table (every 12-bit value starts with a code word), and at most
        // 31 raw bits.
        let window = raw.window();
        let entry = LENGTH_CODE[(window & 0xfff) as usize];
        let code = entry & 0xff;
        let value = ((entry >> 8) & 0xff) as i32 - 128;
        let len = if entry >> 16 == 0 {
            self.center() + value
        } else {
            value
        };
        if len as u32 > 32 {
            // Forged input only: the length is clamped.
            return self.decode_clamped(raw, code, len);
        }
        self.learn(len);
        // The code and the len − 1 bits below the leading one (none for len 0).
        let extra = (len - 1).max(0) as u32;
        let low = (window >> code) & ((1u64 << extra) - 1);
        raw.consume(code + extra);
        (((1u64 << len) >> 1) | low) as u32
    }

    /// The rest of [`decode`](Self::decode) for a length outside 0..=32.
    #[cold]
    #[inline(never)]
    fn decode_clamped(&mut self, raw: &mut BitReader, code: u32, len: i32) -> u32 {
        raw.consume(code);
        let len = len.clamp(0, 32);
        self.learn(len);
        match len {
            0 => 0,
            1 => 1,
            n => (1u32 << (n - 1)) | raw.get(n as u32 - 1),
        }
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

/// Reads bits packed by [`BitWriter`]; past the end it yields zeros.
#[derive(Debug)]
pub(crate) struct BitReader<'a> {
    input: &'a [u8],
    /// Bits consumed so far.
    pos: u64,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        BitReader { input, pos: 0 }
    }

    /// The next 57 bits or more, least significant first (zeros past the end of the
    /// input), without consuming them.
    #[inline(always)]
    pub(crate) fn window(&self) -> u64 {
        let byte = (self.pos >> 3) as usize;
        let word = match self.input.get(byte..).and_then(|r| r.first_chunk::<8>()) {
            Some(w) => u64::from_le_bytes(*w),
            None => self.tail_word(byte),
        };
        word >> (self.pos & 7)
    }

    /// The 8 bytes from `byte` on, near or past the end of the input.
    #[cold]
    fn tail_word(&self, byte: usize) -> u64 {
        let mut w = [0u8; 8];
        for (slot, &b) in w.iter_mut().zip(self.input.get(byte..).unwrap_or_default()) {
            *slot = b;
        }
        u64::from_le_bytes(w)
    }

    /// The next `n` bits (`n` at most 32).
    #[inline(always)]
    pub(crate) fn get(&mut self, n: u32) -> u32 {
        let v = (self.window() & ((1u64 << n) - 1)) as u32;
        self.pos += u64::from(n);
        v
    }

    /// Consumes `n` bits (at most 57) after [`window`](Self::window).
    #[inline(always)]
    pub(crate) fn consume(&mut self, n: u32) {
        self.pos += u64::from(n);
    }

    /// Bytes read beyond the input (trailing zero bytes are left out by the writer, so a
    /// few of these are normal).
    #[cfg(test)]
    pub(crate) fn overrun(&self) -> u64 {
        self.pos.div_ceil(8).saturating_sub(self.input.len() as u64)
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

    /// The code words of format.md section 8's table, most significant (first) bit first.
    const SPEC_CODES: [&str; 22] = [
        "1111111000",
        "1111111001",
        "1111111010",
        "111111010",
        "11111100",
        "1111100",
        "111100",
        "11100",
        "100",
        "101",
        "00",
        "01",
        "110",
        "11101",
        "1111101",
        "111111011",
        "1111111011",
        "1111111100",
        "1111111101",
        "1111111110",
        "1111111111",
        "111101",
    ];

    /// format.md section 8's decode(), bit by bit, as the spec writes it.
    fn spec_decode(bytes: &[u8], pos: &mut u64, avg: &mut i32) -> u32 {
        let bit = |p: u64| {
            bytes
                .get((p / 8) as usize)
                .map_or(0, |b| u32::from(b >> (p % 8)) & 1)
        };
        let mut word = String::new();
        let symbol = loop {
            word.push(if bit(*pos) == 1 { '1' } else { '0' });
            *pos += 1;
            if let Some(s) = SPEC_CODES.iter().position(|c| *c == word) {
                break s;
            }
            assert!(word.len() <= 10, "the code is complete");
        };
        let mut get = |n: u32| {
            let mut v = 0;
            for i in 0..n {
                v |= bit(*pos) << i;
                *pos += 1;
            }
            v
        };
        let len = if symbol == 21 {
            get(6) as i32
        } else {
            ((*avg + 8) >> 4) + symbol as i32 - 10
        };
        let len = len.clamp(0, 32);
        *avg += (len * 16 - *avg) >> 2;
        match len {
            0 => 0,
            1 => 1,
            n => (1 << (n - 1)) + get(n as u32 - 1),
        }
    }

    #[test]
    fn the_code_is_the_specs() {
        for (s, word) in SPEC_CODES.iter().enumerate() {
            assert_eq!(CODE_LENGTHS[s] as usize, word.len(), "symbol {s}");
            let reversed: String = (0..CODE_LENGTHS[s])
                .map(|i| if CODES[s] >> i & 1 == 1 { '1' } else { '0' })
                .collect();
            assert_eq!(&reversed, word, "symbol {s}");
        }
        let kraft: f64 = CODE_LENGTHS.iter().map(|&l| 0.5f64.powi(l as i32)).sum();
        assert_eq!(kraft, 1.0);
    }

    #[test]
    fn any_bits_decode_as_the_spec_says() {
        let mut state = 99u32;
        for round in 0..200 {
            // Random bytes, sparse ones (long zero runs: q > 5) and dense ones.
            let bytes: Vec<u8> = (0..64 + round)
                .map(|_| {
                    state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    let b = (state >> 16) as u8;
                    match round % 3 {
                        0 => b,
                        1 => b & (b >> 3) & 0x91,
                        _ => b | 0x5a,
                    }
                })
                .collect();
            let mut rr = BitReader::new(&bytes);
            let mut model = LengthModel::default();
            let (mut pos, mut avg) = (0u64, 12 * 16);
            for i in 0..300 {
                let want = spec_decode(&bytes, &mut pos, &mut avg);
                assert_eq!(model.decode(&mut rr), want, "round {round}, residual {i}");
                assert_eq!(model.avg, avg, "round {round}, residual {i}");
                assert_eq!(rr.pos, pos, "round {round}, residual {i}");
            }
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

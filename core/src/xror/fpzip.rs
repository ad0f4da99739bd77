//! A decoder of fpzip 1.3 streams of `f32`s (LLNL's lossless floating-point compressor,
//! what XROR stores frames and event floats in), written from its format in safe Rust.
//!
//! Why not a binding: the crates.io binding (`fpzip-sys`) is raw FFI, which this crate
//! cannot call (`forbid(unsafe_code)`), and XROR needs only decoding of single-precision
//! arrays. Supported: the header, single precision at any precision of 2 to 32 bits, and all
//! four of the codec's floating-point modes, which its header names (the library picks one
//! when it is compiled): `FAST` (1, the library's default and BOXRR-23's), `SAFE` (2),
//! `EMUL` (3, the prediction in fpzip's own integer emulation of float arithmetic, `fpe`
//! here) and `INT` (4). Double precision is refused by name. Each mode is checked bit for
//! bit against the reference library's output (core/tests/data/fpzip/, made by
//! scripts/fpzip-vectors/). Input that is not a whole fpzip stream gives an error with the
//! byte offset, never a panic; the output size is bounded by the input's size.
//!
//! One limit: in `FAST` and `SAFE`, the prediction is float arithmetic on the previous
//! values, so a stream whose values include NaNs decodes as the encoder's machine did only
//! where both pick and quiet NaN payloads the same way. The vectors' NaNs (quiet and
//! signalling, with payloads) check it on x86-64, where the tests run; other targets (an
//! AArch64 given two NaNs, WebAssembly at all) may differ on such values. `EMUL` and `INT`
//! are integer arithmetic and exact everywhere.

use std::fmt;

/// What is wrong with an fpzip stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FpzipError {
    /// What.
    pub what: String,
    /// Byte offset in the stream where the decoder was.
    pub offset: u64,
}

impl fmt::Display for FpzipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fpzip: {} (at byte {} of the stream)",
            self.what, self.offset
        )
    }
}

impl std::error::Error for FpzipError {}

/// A decoded array: `values.len() == nx * ny * nz * nf`, x varying fastest.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// Samples along x (XROR: values per row).
    pub nx: usize,
    /// Along y (XROR: rows).
    pub ny: usize,
    /// Along z.
    pub nz: usize,
    /// Fields.
    pub nf: usize,
    /// The values.
    pub values: Vec<f32>,
}

/// At most this many values per byte of input (fpzip's adaptive model cannot code a value
/// in fewer than about 1/5600 of a byte), so that a forged header cannot ask for more memory
/// than its stream could describe.
const MAX_VALUES_PER_BYTE: u64 = 8192;

/// The range decoder.
struct Rc<'a> {
    buf: &'a [u8],
    pos: usize,
    low: u32,
    range: u32,
    code: u32,
    /// Bytes asked for past the end.
    overrun: bool,
}

impl<'a> Rc<'a> {
    fn new(buf: &'a [u8]) -> Self {
        let mut rc = Rc {
            buf,
            pos: 0,
            low: 0,
            range: u32::MAX,
            code: 0,
            overrun: false,
        };
        rc.get(4);
        rc
    }

    fn err(&self, what: impl Into<String>) -> FpzipError {
        FpzipError {
            what: what.into(),
            offset: self.pos.min(self.buf.len()) as u64,
        }
    }

    fn get(&mut self, n: usize) {
        for _ in 0..n {
            let b = match self.buf.get(self.pos) {
                Some(&b) => b,
                None => {
                    self.overrun = true;
                    0
                }
            };
            self.pos += 1;
            self.code = (self.code << 8) | u32::from(b);
            self.low <<= 8;
        }
    }

    fn normalize(&mut self) {
        while (self.low ^ self.low.wrapping_add(self.range)) >> 24 == 0 {
            self.get(1);
            self.range <<= 8;
        }
        if self.range >> 16 == 0 {
            self.get(2);
            self.range = self.low.wrapping_neg();
        }
    }

    fn decode_shift(&mut self, n: u32) -> Result<u32, FpzipError> {
        self.range >>= n;
        let s = self
            .code
            .wrapping_sub(self.low)
            .checked_div(self.range)
            .ok_or_else(|| self.err("range underflow"))?;
        self.low = self.low.wrapping_add(self.range.wrapping_mul(s));
        self.normalize();
        Ok(s)
    }

    /// An `n`-bit unsigned value (n up to 32).
    fn bits32(&mut self, mut n: u32) -> Result<u32, FpzipError> {
        let mut s = 0u32;
        let mut m = 0;
        if n > 16 {
            s = s.wrapping_add(self.decode_shift(16)? << m);
            m += 16;
            n -= 16;
        }
        Ok((self.decode_shift(n)? << m).wrapping_add(s))
    }

    fn symbol(&mut self, model: &mut Model) -> Result<usize, FpzipError> {
        self.range >>= Model::BITS;
        let l = self
            .code
            .wrapping_sub(self.low)
            .checked_div(self.range)
            .ok_or_else(|| self.err("range underflow"))?;
        let (s, l, r) = model
            .decode(l)
            .ok_or_else(|| self.err("a symbol outside the model's range"))?;
        self.low = self.low.wrapping_add(self.range.wrapping_mul(l));
        self.range = self.range.wrapping_mul(r);
        self.normalize();
        Ok(s)
    }
}

/// fpzip's quasi-static adaptive frequency model (`RCqsmodel`, 16-bit frequencies, a
/// rescale period of 1024, a 128-entry search table).
struct Model {
    n: usize,
    left: u32,
    more: u32,
    incr: u32,
    rescale: u32,
    symf: Vec<u32>,
    cumf: Vec<u32>,
    search: Vec<usize>,
}

impl Model {
    const BITS: u32 = 16;
    const PERIOD: u32 = 0x400;
    const TBLSHIFT: u32 = 7;

    fn new(n: usize) -> Self {
        let mut m = Model {
            n,
            left: 0,
            more: 0,
            incr: 0,
            rescale: ((n as u32) >> 4) | 2,
            symf: vec![0; n + 1],
            cumf: vec![0; n + 1],
            search: vec![0; (1 << Self::TBLSHIFT) + 1],
        };
        m.cumf[n] = 1 << Self::BITS;
        let f = m.cumf[n] / n as u32;
        let r = (m.cumf[n] % n as u32) as usize;
        for (i, s) in m.symf.iter_mut().take(n).enumerate() {
            *s = if i < r { f + 1 } else { f };
        }
        m.update();
        m
    }

    fn update(&mut self) {
        if self.more > 0 {
            self.left = self.more;
            self.more = 0;
            self.incr = self.incr.wrapping_add(1);
            return;
        }
        if self.rescale != Self::PERIOD {
            self.rescale = (self.rescale * 2).min(Self::PERIOD);
        }
        let n = self.n;
        let mut cf = self.cumf[n];
        let mut count = cf;
        for i in (0..n).rev() {
            let sf = self.symf[i];
            cf = cf.wrapping_sub(sf);
            self.cumf[i] = cf;
            let sf = (sf >> 1) | 1;
            count = count.wrapping_sub(sf);
            self.symf[i] = sf;
        }
        self.incr = count / self.rescale;
        self.more = count % self.rescale;
        self.left = self.rescale - self.more;
        let shift = Self::BITS - Self::TBLSHIFT;
        let top = self.search.len() - 1;
        let mut h = 1usize << Self::TBLSHIFT;
        for i in (0..n).rev() {
            let lo = ((self.cumf[i] >> shift) as usize).min(top);
            for l in lo..=h.min(top) {
                self.search[l] = i;
            }
            h = (self.cumf[i] >> shift) as usize;
        }
    }

    fn touch(&mut self, s: usize) {
        if self.left == 0 {
            self.update();
        }
        self.left = self.left.wrapping_sub(1);
        self.symf[s] = self.symf[s].wrapping_add(self.incr);
    }

    /// The symbol whose cumulative frequency range holds `l`: (symbol, its low, its
    /// frequency).
    fn decode(&mut self, l: u32) -> Option<(usize, u32, u32)> {
        if l >= self.cumf[self.n] {
            return None;
        }
        let i = (l >> (Self::BITS - Self::TBLSHIFT)) as usize;
        let mut s = *self.search.get(i)?;
        let mut h = self.search.get(i + 1)? + 1;
        while s + 1 < h {
            let m = (s + h) / 2;
            if l < *self.cumf.get(m)? {
                h = m;
            } else {
                s = m;
            }
        }
        let lo = *self.cumf.get(s)?;
        let r = self.cumf.get(s + 1)?.wrapping_sub(lo);
        if s >= self.n || r == 0 {
            return None;
        }
        self.touch(s);
        Some((s, lo, r))
    }
}

/// `PCmap<float, bits>`: floats to unsigned integers ordered as the floats are.
#[derive(Clone, Copy)]
struct Map {
    bits: u32,
    shift: u32,
}

impl Map {
    fn forward(self, d: f32) -> u32 {
        let mut r = !d.to_bits();
        r >>= self.shift;
        r ^= (r >> (self.bits - 1)).wrapping_neg() >> (self.shift + 1);
        r
    }

    fn inverse(self, mut r: u32) -> f32 {
        r ^= (r >> (self.bits - 1)).wrapping_neg() >> (self.shift + 1);
        r = !r;
        f32::from_bits(r << self.shift)
    }

    fn identity(self, d: f32) -> f32 {
        f32::from_bits((d.to_bits() >> self.shift) << self.shift)
    }
}

/// The prediction residual coder (`PCdecoder`): a symbol for the residual's bit length
/// (or, at 8 bits or fewer, the residual itself), then its low bits.
struct Residuals {
    bits: u32,
    model: Model,
}

impl Residuals {
    fn new(bits: u32) -> Self {
        let n = if bits > 8 {
            2 * bits as usize + 1
        } else {
            2 * (1usize << bits) - 1
        };
        Residuals {
            bits,
            model: Model::new(n),
        }
    }

    /// The value `p` (in the mapped integer domain, `mask`ed) predicted becomes.
    fn decode(&mut self, rc: &mut Rc<'_>, p: u32) -> Result<Option<u32>, FpzipError> {
        let s = rc.symbol(&mut self.model)? as u32;
        if self.bits <= 8 {
            let bias = (1u32 << self.bits) - 1;
            return Ok(Some(p.wrapping_add(s).wrapping_sub(bias)));
        }
        let bias = self.bits;
        if s > bias {
            let k = s - bias - 1;
            let d = (1u32 << k).wrapping_add(rc.bits32(k)?);
            Ok(Some(p.wrapping_add(d)))
        } else if s < bias {
            let k = bias - 1 - s;
            let d = (1u32 << k).wrapping_add(rc.bits32(k)?);
            Ok(Some(p.wrapping_sub(d)))
        } else {
            Ok(None)
        }
    }
}

/// The circular buffer of the samples a prediction reads (`Front`).
struct Front<T: Copy> {
    dy: usize,
    dz: usize,
    m: usize,
    i: usize,
    a: Vec<T>,
    zero: T,
}

impl<T: Copy> Front<T> {
    fn new(nx: usize, ny: usize, zero: T) -> Self {
        let dy = nx + 1;
        let dz = dy * (ny + 1);
        let mut m = 1 + dy + dz - 1;
        while m & (m + 1) != 0 {
            m |= m + 1;
        }
        Front {
            dy,
            dz,
            m,
            i: 0,
            a: vec![zero; m + 1],
            zero,
        }
    }

    fn at(&self, x: usize, y: usize, z: usize) -> T {
        let back = x + self.dy * y + self.dz * z;
        self.a[self.i.wrapping_sub(back) & self.m]
    }

    fn push(&mut self, v: T) {
        self.a[self.i & self.m] = v;
        self.i = self.i.wrapping_add(1);
    }

    fn advance(&mut self, x: usize, y: usize, z: usize) {
        for _ in 0..(x + self.dy * y + self.dz * z) {
            self.push(self.zero);
        }
    }
}

/// fpzip's emulated float arithmetic (`FPE<float>`, the `EMUL` mode's predictor): IEEE
/// single-precision bits added and subtracted with integer operations, exactly as the
/// library does (including its approximations: no rounding to nearest, no special cases
/// for denormals, infinities or NaNs).
mod fpe {
    /// Significand bits.
    const M: u32 = 23;
    /// The exponent's least significant bit.
    const E: u32 = 1 << M;
    /// The sign bit.
    const S: u32 = 1 << 31;

    fn same_sign(a: u32, b: u32) -> bool {
        (a ^ b) & S == 0
    }

    /// `a + b`.
    pub(super) fn add(a: u32, b: u32) -> u32 {
        if same_sign(a, b) {
            if a > b {
                effective_add(a, b)
            } else {
                effective_add(b, a)
            }
        } else {
            difference(a, b ^ S)
        }
    }

    /// `a - b`.
    pub(super) fn sub(a: u32, b: u32) -> u32 {
        if same_sign(a, b) {
            difference(a, b)
        } else {
            let b = b ^ S;
            if a > b {
                effective_add(a, b)
            } else {
                effective_add(b, a)
            }
        }
    }

    /// `a - b` for `a` and `b` of the same sign.
    fn difference(a: u32, b: u32) -> u32 {
        if a > b {
            effective_sub(a, b)
        } else if a < b {
            effective_sub(b, a) ^ S
        } else {
            0
        }
    }

    /// `f + g`, same signs, `|f| >= |g|`.
    fn effective_add(f: u32, g: u32) -> u32 {
        let k = (f >> M).wrapping_sub(g >> M);
        if k > M {
            return f;
        }
        let c = E - (f & (E - 1));
        let mut d = (E + (g & (E - 1))) >> k;
        if c < d {
            d = (c + d) >> 1;
        }
        f.wrapping_add(d)
    }

    /// `f - g`, same signs, `|f| > |g|`.
    fn effective_sub(f: u32, g: u32) -> u32 {
        let k = (f >> M).wrapping_sub(g >> M);
        if k > M {
            return f;
        }
        let mut c = (f & (E - 1)) << 1;
        let mut d = ((E + (g & (E - 1))) << 1) >> k;
        // The library's normalisation loop. With |f| > |g|, d - c < 2E and the gap to 2E
        // doubles each round, so it ends within 25 rounds; the bound is only a guard.
        for _ in 0..64 {
            if c >= d {
                break;
            }
            d = d.wrapping_add(d.wrapping_sub(c));
            c = c.wrapping_add(E << 1);
        }
        f.wrapping_sub(d >> 1)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Fast,
    Safe,
    Emul,
    Int,
}

/// Decodes a whole fpzip stream of single-precision floats.
pub fn decompress(buf: &[u8]) -> Result<Array, FpzipError> {
    let mut rc = Rc::new(buf);
    for &c in b"fpz\0" {
        if rc.bits32(8)? != u32::from(c) {
            return Err(FpzipError {
                what: "not an fpzip stream (no \"fpz\" magic)".into(),
                offset: 0,
            });
        }
    }
    let major = rc.bits32(16)?;
    let minor = rc.bits32(8)?;
    if major != 0x0110 {
        return Err(rc.err(format!(
            "format version 0x{major:04x} (this decoder reads 0x0110, fpzip 1.2 and 1.3)"
        )));
    }
    let mode = match minor {
        1 => Mode::Fast,
        2 => Mode::Safe,
        3 => Mode::Emul,
        4 => Mode::Int,
        m => return Err(rc.err(format!("unknown floating-point mode {m}"))),
    };
    let double = rc.bits32(1)? == 1;
    let prec = rc.bits32(7)?;
    if double {
        return Err(rc.err("double precision is not supported (XROR stores single)"));
    }
    let bits = if prec == 0 { 32 } else { prec };
    if !(2..=32).contains(&bits) {
        return Err(rc.err(format!("precision {bits} (2 to 32 bits)")));
    }
    let mut dims = [0usize; 4];
    for d in &mut dims {
        *d = rc.bits32(32)? as usize;
    }
    let [nx, ny, nz, nf] = dims;
    let total = (nx as u64)
        .checked_mul(ny as u64)
        .and_then(|v| v.checked_mul(nz as u64))
        .and_then(|v| v.checked_mul(nf as u64));
    let limit = (buf.len() as u64).saturating_mul(MAX_VALUES_PER_BYTE);
    // The loops' work and the front's size, zero dimensions included.
    let work = [nx, ny, nz, nf]
        .iter()
        .try_fold(1u64, |w, &d| w.checked_mul(d as u64 + 1));
    match (total, work) {
        (Some(t), Some(w)) if t <= limit && w <= limit.saturating_mul(16).max(1 << 24) => {}
        _ => {
            return Err(rc.err(format!(
                "dimensions {nx}×{ny}×{nz}×{nf} are more than {} bytes can hold",
                buf.len()
            )))
        }
    }
    let mut values = Vec::with_capacity(total.unwrap_or(0) as usize);
    let map = Map {
        bits,
        shift: 32 - bits,
    };
    for _ in 0..nf {
        let mut res = Residuals::new(bits);
        if mode == Mode::Int {
            let mask = u32::MAX >> (32 - bits);
            let mut f = Front::new(nx, ny, map.forward(0.0));
            f.advance(0, 0, 1);
            for _ in 0..nz {
                f.advance(0, 1, 0);
                for _ in 0..ny {
                    f.advance(1, 0, 0);
                    for _ in 0..nx {
                        let p = f
                            .at(1, 0, 0)
                            .wrapping_sub(f.at(0, 1, 1))
                            .wrapping_add(f.at(0, 1, 0))
                            .wrapping_sub(f.at(1, 0, 1))
                            .wrapping_add(f.at(0, 0, 1))
                            .wrapping_sub(f.at(1, 1, 0))
                            .wrapping_add(f.at(1, 1, 1));
                        let p = p & mask;
                        let a = res.decode(&mut rc, p)?.unwrap_or(p) & mask;
                        values.push(map.inverse(a));
                        f.push(a);
                    }
                }
                if rc.overrun {
                    return Err(rc.err("the stream ends early"));
                }
            }
        } else {
            let mut f = Front::new(nx, ny, 0.0f32);
            f.advance(0, 0, 1);
            for _ in 0..nz {
                f.advance(0, 1, 0);
                for _ in 0..ny {
                    f.advance(1, 0, 0);
                    for _ in 0..nx {
                        let p = match mode {
                            Mode::Fast => {
                                f.at(1, 0, 0) - f.at(0, 1, 1) + f.at(0, 1, 0) - f.at(1, 0, 1)
                                    + f.at(0, 0, 1)
                                    - f.at(1, 1, 0)
                                    + f.at(1, 1, 1)
                            }
                            Mode::Safe => {
                                let mut p = f.at(1, 1, 1);
                                p += f.at(1, 0, 0);
                                p -= f.at(0, 1, 1);
                                p += f.at(0, 1, 0);
                                p -= f.at(1, 0, 1);
                                p += f.at(0, 0, 1);
                                p -= f.at(1, 1, 0);
                                p
                            }
                            _ => {
                                let b = |x, y, z| f.at(x, y, z).to_bits();
                                let mut p = fpe::sub(b(1, 0, 0), b(0, 1, 1));
                                p = fpe::add(p, b(0, 1, 0));
                                p = fpe::sub(p, b(1, 0, 1));
                                p = fpe::add(p, b(0, 0, 1));
                                p = fpe::sub(p, b(1, 1, 0));
                                p = fpe::add(p, b(1, 1, 1));
                                f32::from_bits(p)
                            }
                        };
                        let a = match res.decode(&mut rc, map.forward(p))? {
                            Some(r) => map.inverse(r),
                            None => map.identity(p),
                        };
                        values.push(a);
                        f.push(a);
                    }
                    if rc.overrun {
                        return Err(rc.err("the stream ends early"));
                    }
                }
            }
        }
    }
    if rc.overrun {
        return Err(rc.err("the stream ends early"));
    }
    Ok(Array {
        nx,
        ny,
        nz,
        nf,
        values,
    })
}

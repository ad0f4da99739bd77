//! The lossless coding of frames (format.md 9): every column predicted from the decoded
//! history, its residual coded by bit length (an adaptive centre per column) plus raw low
//! bits (`bits.rs`), the parts that did not change left out by the inclusion mask.

use super::super::bits::{ordered, unordered, unzigzag, zigzag, BitReader, BitWriter, LengthModel};
use super::predict::{derived, largest, time_prediction, History};
use super::{frame_from, COLUMNS, PARTS};
use crate::bsor::Frame;

/// The per-frame coding plan of the lossless columns (see [`Lossless::plan`]).
struct Plan {
    plain: [u32; COLUMNS],
    order: [u8; COLUMNS],
    ends: [u8; PARTS],
    /// Per device: first rotation column, derived component, its sign.
    derive: [(usize, usize, bool); 3],
}

/// The lossless codec state of one keyframe group (encoder and decoder alike).
#[derive(Clone, Debug)]
pub(crate) struct Lossless {
    /// Residual lengths, per column.
    length: Box<[LengthModel; COLUMNS]>,
    history: History,
    /// The previous frame's mask of the six device parts.
    prev_mask: u8,
}

impl Lossless {
    /// Models whose centres start near the lengths of the columns' residuals (format.md
    /// 9.5): the time 8 bits, fps 2, poses 18. In 1-second groups this saves what the
    /// first residuals would spend moving a centre of 12 there.
    pub(crate) fn new() -> Self {
        Lossless {
            length: Box::new(std::array::from_fn(|col| {
                LengthModel::starting_at(match col {
                    0 => 8,
                    1 => 2,
                    _ => 18,
                })
            })),
            history: History::default(),
            prev_mask: 0,
        }
    }

    /// The inclusion mask of the six device parts (mask bits 2 to 7): one bit "same as the
    /// previous frame's", or a zero bit and the six bits. Time and fps (bits 0 and 1) are
    /// always coded: their bits are always set.
    fn mask_enc(&mut self, raw: &mut BitWriter, mask: u8) {
        let parts = mask >> 2;
        if parts == self.prev_mask {
            raw.put(1, 1);
        } else {
            raw.put(0, 1);
            raw.put(u32::from(parts), 6);
        }
        self.prev_mask = parts;
    }

    fn mask_dec(&mut self, raw: &mut BitReader) -> u8 {
        let parts = if raw.get(1) == 1 {
            self.prev_mask
        } else {
            raw.get(6) as u8
        };
        self.prev_mask = parts;
        (parts << 2) | 3
    }

    /// What the next frame's coding needs from the history: the plain prediction of every
    /// column, the order in which the columns are coded (each device's derived rotation
    /// component last), where each part ends in that order, and for each device which
    /// rotation component is derived and with which sign.
    fn plan(&self) -> Plan {
        let plain = self.history.plain_predictions();
        let mut order = [0u8; COLUMNS];
        let mut ends = [0u8; PARTS];
        let mut derive = [(0usize, 0usize, false); 3];
        // fps before time: the time is predicted from the fps.
        order[0] = 1;
        order[1] = 0;
        ends[0] = 1;
        ends[1] = 2;
        let mut n = 2;
        for d in 0..3 {
            let b = 2 + d * 7;
            for k in 0..3 {
                order[n] = (b + k) as u8;
                n += 1;
            }
            ends[2 + 2 * d] = n as u8;
            let q0 = b + 3;
            let prev = self.history.h1.as_ref().map(|h| &h[q0..q0 + 4]);
            let skip = largest(prev);
            for k in (0..4).filter(|&k| k != skip) {
                order[n] = (q0 + k) as u8;
                n += 1;
            }
            order[n] = (q0 + skip) as u8;
            n += 1;
            ends[3 + 2 * d] = n as u8;
            let negative = prev.is_some_and(|q| q[skip] >> 31 == 1);
            derive[d] = (q0, skip, negative);
        }
        Plan {
            plain,
            order,
            ends,
            derive,
        }
    }

    /// The prediction of column `c`, given the columns decoded so far in this frame.
    #[inline]
    fn predict(&self, plan: &Plan, c: usize, actual: &[u32; COLUMNS]) -> u32 {
        if c == 0 {
            return time_prediction(self.history.h1.as_ref(), actual[1], plan.plain[0]);
        }
        if c >= 5 {
            let d = (c - 2) / 7;
            let (q0, skip, negative) = plan.derive[d];
            if c == q0 + skip {
                let q = [actual[q0], actual[q0 + 1], actual[q0 + 2], actual[q0 + 3]];
                return derived(&q, skip, negative);
            }
        }
        plan.plain[c]
    }

    fn residual_of(&self, plan: &Plan, c: usize, actual: &[u32; COLUMNS]) -> u32 {
        let pred = self.predict(plan, c, actual);
        if c == 1 {
            zigzag((actual[1] as i32).wrapping_sub(pred as i32))
        } else {
            zigzag(ordered(actual[c]).wrapping_sub(ordered(pred)) as i32)
        }
    }

    /// Codes the frame whose columns are `actual`; returns it (the decoder rebuilds it bit
    /// for bit).
    pub(crate) fn encode(&mut self, actual: &[u32; COLUMNS], raw: &mut BitWriter) -> Frame {
        let plan = self.plan();
        let mut residuals = [0u32; COLUMNS];
        let mut mask = 0u8;
        let mut start = 0;
        for (part, &end) in plan.ends.iter().enumerate() {
            for &c in &plan.order[start..usize::from(end)] {
                let c = usize::from(c);
                residuals[c] = self.residual_of(&plan, c, actual);
                if residuals[c] != 0 {
                    mask |= 1 << part;
                }
            }
            start = usize::from(end);
        }
        // Time and fps are always coded.
        mask |= 3;
        self.mask_enc(raw, mask);
        let mut start = 0;
        for (part, &end) in plan.ends.iter().enumerate() {
            if mask & (1 << part) != 0 {
                for &c in &plan.order[start..usize::from(end)] {
                    let c = usize::from(c);
                    self.length[c].encode(raw, residuals[c]);
                }
            }
            start = usize::from(end);
        }
        self.history.push(*actual);
        frame_from(actual)
    }

    /// Decodes a frame.
    pub(crate) fn decode(&mut self, raw: &mut BitReader) -> Frame {
        frame_from(&self.decode_columns(raw))
    }

    /// Decodes a frame's columns (in order, the 23 little-endian words of its BSOR frame
    /// record): the same walk as [`plan`](Self::plan) and [`encode`](Self::encode), written
    /// out part by part.
    #[inline]
    pub(crate) fn decode_columns(&mut self, raw: &mut BitReader) -> [u32; COLUMNS] {
        #[inline(always)]
        fn add(pred: u32, z: u32) -> u32 {
            unordered(ordered(pred).wrapping_add(unzigzag(z) as u32))
        }
        let mask = self.mask_dec(raw);
        let mut actual = self.history.plain_predictions();
        let models = &mut self.length;
        actual[1] = (actual[1] as i32).wrapping_add(unzigzag(models[1].decode(raw))) as u32;
        let time = time_prediction(self.history.h1.as_ref(), actual[1], actual[0]);
        actual[0] = add(time, models[0].decode(raw));
        for d in 0..3 {
            let b = 2 + 7 * d;
            if mask & (4 << (2 * d)) != 0 {
                for c in b..b + 3 {
                    actual[c] = add(actual[c], models[c].decode(raw));
                }
            }
            let q0 = b + 3;
            let prev = self.history.h1.as_ref().map(|h| &h[q0..q0 + 4]);
            let skip = largest(prev);
            let negative = prev.is_some_and(|q| q[skip] >> 31 == 1);
            let included = mask & (8 << (2 * d)) != 0;
            if included {
                for c in (q0..q0 + 4).filter(|&c| c != q0 + skip) {
                    actual[c] = add(actual[c], models[c].decode(raw));
                }
            }
            let q = [actual[q0], actual[q0 + 1], actual[q0 + 2], actual[q0 + 3]];
            let pred = derived(&q, skip, negative);
            actual[q0 + skip] = if included {
                add(pred, models[q0 + skip].decode(raw))
            } else {
                pred
            };
        }
        self.history.push(actual);
        actual
    }
}

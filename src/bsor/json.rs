//! JSON export helpers: JSON has no NaN or infinity, so non-finite floats are written as the
//! strings `"NaN"`, `"Infinity"` and `"-Infinity"` (never as `null`, which would lose them).
//! Raw byte sections are written as lowercase hex strings.

use serde::Serializer;

/// An `f32` that serializes with the non-finite rule above.
pub(crate) struct F(pub f32);

impl serde::Serialize for F {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v == f32::INFINITY {
            s.serialize_str("Infinity")
        } else if v == f32::NEG_INFINITY {
            s.serialize_str("-Infinity")
        } else {
            s.serialize_f32(v)
        }
    }
}

/// For `#[serde(with = "...")]` on `f32` fields.
pub(crate) mod f32 {
    use serde::Serializer;

    pub(crate) fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&super::F(*v), s)
    }
}

fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(b.len() * 2);
    for &x in b {
        out.push(char::from(DIGITS[usize::from(x >> 4)]));
        out.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    out
}

pub(crate) fn bytes<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(b))
}

pub(crate) fn opt_bytes<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match b {
        Some(b) => s.serialize_str(&hex(b)),
        None => s.serialize_none(),
    }
}

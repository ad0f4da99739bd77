//! The byte reader of the stream's own structures (stream header, chunk headers, trailer,
//! index, event counts): little-endian words and LEB128 varints from a slice, with "more
//! bytes needed" told apart from "these bytes cannot be right".

use super::error::{ChunkHeaderError, Field, FieldError, HeaderError};

/// Why a read from a byte slice stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Short<E> {
    /// More bytes are needed.
    More,
    /// The bytes cannot be what was expected.
    Bad(E),
}

impl From<Short<FieldError>> for Short<HeaderError> {
    fn from(s: Short<FieldError>) -> Self {
        match s {
            Short::More => Short::More,
            Short::Bad(e) => Short::Bad(HeaderError::Field(e)),
        }
    }
}

impl From<Short<FieldError>> for Short<ChunkHeaderError> {
    fn from(s: Short<FieldError>) -> Self {
        match s {
            Short::More => Short::More,
            Short::Bad(e) => Short::Bad(ChunkHeaderError::Field(e)),
        }
    }
}

/// A cursor over a byte slice.
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Short<FieldError>> {
        let s = self
            .buf
            .get(self.pos..)
            .and_then(|r| r.get(..n))
            .ok_or(Short::More)?;
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Short<FieldError>> {
        Ok(self.bytes(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Short<FieldError>> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn f32(&mut self) -> Result<f32, Short<FieldError>> {
        Ok(f32::from_bits(self.u32()?))
    }

    /// An unsigned LEB128 varint of at most 10 bytes that fits in a `u64`: `field` names
    /// it in an error.
    pub(crate) fn varint(&mut self, field: Field) -> Result<u64, Short<FieldError>> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                return Err(Short::Bad(FieldError::VarintOverflow { field }));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Short::Bad(FieldError::VarintTooLong { field }))
    }

    /// A varint that must fit in a `u32`.
    pub(crate) fn varint_u32(&mut self, field: Field) -> Result<u32, Short<FieldError>> {
        u32::try_from(self.varint(field)?).map_err(|_| Short::Bad(FieldError::TooLarge { field }))
    }
}

//! A bounds-checked little-endian reader over a byte slice; every read names
//! what it was reading so that a short or bad input yields a precise error.

use crate::error::DecodeError;

#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DecodeError::Truncated {
                what,
                need: n,
                have: self.buf.len() - self.pos,
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let s = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn str(&mut self, n: usize, what: &'static str) -> Result<&'a str, DecodeError> {
        let s = self.bytes(n, what)?;
        std::str::from_utf8(s).map_err(|e| DecodeError::NotUtf8 {
            what,
            at: e.valid_up_to(),
        })
    }

    /// A string with a u8 length prefix.
    pub(crate) fn short_str(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let n = self.u8(what)? as usize;
        self.str(n, what)
    }

    /// A string with a u16 length prefix, at most `max` bytes.
    pub(crate) fn str16(&mut self, max: usize, what: &'static str) -> Result<&'a str, DecodeError> {
        let n = self.u16(what)? as usize;
        if n > max {
            return Err(DecodeError::TooLong { what, len: n, max });
        }
        self.str(n, what)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    /// Fails unless every byte was consumed.
    pub(crate) fn finish(&self, what: &'static str) -> Result<(), DecodeError> {
        if self.pos != self.buf.len() {
            return Err(DecodeError::TrailingBytes {
                what,
                count: self.buf.len() - self.pos,
            });
        }
        Ok(())
    }
}

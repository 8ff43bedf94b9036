//! The writing side of the wire format's primitives (the counterpart of
//! [`crate::reader`]): length-prefixed strings that refuse what does not
//! fit, and a frame's length prefix written once its body is. Every frame
//! encoder (client frames, link frames, pulls) builds on these.

use bytes::{BufMut, BytesMut};

use crate::error::EncodeError;
use crate::limits::MAX_TEXT_LEN;

/// Bytes before a frame's body: the length and the type.
pub const FRAME_HEADER_LEN: usize = 5;

/// Writes a `str8` (u8 length, bytes), refusing one over 255 bytes.
pub(crate) fn put_short_str(
    out: &mut BytesMut,
    what: &'static str,
    s: &str,
) -> Result<(), EncodeError> {
    if s.len() > u8::MAX as usize {
        return Err(EncodeError::TooLong {
            what,
            len: s.len(),
            max: u8::MAX as usize,
        });
    }
    out.put_u8(s.len() as u8);
    out.put_slice(s.as_bytes());
    Ok(())
}

/// Writes a `str16` (u16 length, bytes), refusing one over `MAX_TEXT_LEN`.
pub(crate) fn put_str16(
    out: &mut BytesMut,
    what: &'static str,
    s: &str,
) -> Result<(), EncodeError> {
    if s.len() > MAX_TEXT_LEN {
        return Err(EncodeError::TooLong {
            what,
            len: s.len(),
            max: MAX_TEXT_LEN,
        });
    }
    out.put_u16_le(s.len() as u16);
    out.put_slice(s.as_bytes());
    Ok(())
}

/// Writes the length of the frame that starts at `start` into its prefix.
pub(crate) fn patch_len(out: &mut BytesMut, start: usize) -> Result<(), EncodeError> {
    let len = out.len() - start - 4;
    let len32 = u32::try_from(len).map_err(|_| EncodeError::FrameTooLarge {
        len,
        max: u32::MAX as usize,
    })?;
    out[start..start + 4].copy_from_slice(&len32.to_le_bytes());
    Ok(())
}

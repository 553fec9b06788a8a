//! The field encodings every Seata-codec message is made of: big-endian integers,
//! `[i16 len][UTF-8]` and `[i32 len][UTF-8]` strings, one-byte enums.
//!
//! As in Java (`docs/seata-messages.md` §2): null and `""` are both written as length 0,
//! and a length of 0 or less reads back as absent, consuming nothing. Unlike Java, a
//! string too long for its length prefix is refused on encode (Java writes a corrupt
//! length), and every read that runs past the end is an error naming the field.

use bytes::{Buf, BufMut, BytesMut};

use super::MessageError;

/// A one-byte enum of the Seata codec (`ResultCode`, `BranchType`, ...).
pub(crate) trait WireEnum: Sized + Copy {
    /// The byte Java writes.
    fn code(self) -> u8;
    /// The constant for a byte, if it is one Java defines.
    fn from_code(code: u8) -> Option<Self>;
}

/// Reads fields from a body, naming the message type and field in every error.
pub(crate) struct Reader<'a> {
    pub buf: &'a [u8],
    pub type_code: i16,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], type_code: i16) -> Self {
        Reader { buf, type_code }
    }

    pub fn truncated(&self, field: &'static str) -> MessageError {
        MessageError::Truncated {
            type_code: self.type_code,
            field,
        }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// `Ok` when `n` more bytes of `field` are there to read.
    fn need(&self, field: &'static str, n: usize) -> Result<(), MessageError> {
        if self.buf.len() < n {
            return Err(self.truncated(field));
        }
        Ok(())
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, MessageError> {
        self.need(field, 1)?;
        Ok(self.buf.get_u8())
    }

    pub fn i16(&mut self, field: &'static str) -> Result<i16, MessageError> {
        self.need(field, 2)?;
        Ok(self.buf.get_i16())
    }

    pub fn i32(&mut self, field: &'static str) -> Result<i32, MessageError> {
        self.need(field, 4)?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self, field: &'static str) -> Result<i64, MessageError> {
        self.need(field, 8)?;
        Ok(self.buf.get_i64())
    }

    /// A one-byte enum; a byte Java does not define is an error naming the field.
    pub fn enumeration<E: WireEnum>(&mut self, field: &'static str) -> Result<E, MessageError> {
        let code = self.u8(field)?;
        E::from_code(code).ok_or(MessageError::UnknownCode {
            type_code: self.type_code,
            field,
            code,
        })
    }

    /// `len` bytes as UTF-8.
    fn utf8(&mut self, field: &'static str, len: usize) -> Result<String, MessageError> {
        self.need(field, len)?;
        let (s, rest) = self.buf.split_at(len);
        self.buf = rest;
        match std::str::from_utf8(s) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(MessageError::NotUtf8 {
                type_code: self.type_code,
                field,
            }),
        }
    }

    /// `[i16 len][UTF-8]`; a length of 0 or less is absent (Java reads only when the
    /// length is positive).
    pub fn str16(&mut self, field: &'static str) -> Result<Option<String>, MessageError> {
        let len = self.i16(field)?;
        if len <= 0 {
            return Ok(None);
        }
        self.utf8(field, len as usize).map(Some)
    }

    /// `[i32 len][UTF-8]`; a length of 0 or less is absent.
    pub fn str32(&mut self, field: &'static str) -> Result<Option<String>, MessageError> {
        let len = self.i32(field)?;
        if len <= 0 {
            return Ok(None);
        }
        self.utf8(field, len as usize).map(Some)
    }

    /// A `str16` that is absent when empty, as the empty string.
    pub fn str16_or_empty(&mut self, field: &'static str) -> Result<String, MessageError> {
        Ok(self.str16(field)?.unwrap_or_default())
    }

    /// Nothing may follow the last field.
    pub fn finish(&self) -> Result<(), MessageError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(MessageError::Trailing {
                type_code: self.type_code,
                extra: self.buf.len(),
            })
        }
    }
}

/// Writes fields; strings that do not fit their length prefix are refused.
pub(crate) struct Writer<'a> {
    pub buf: &'a mut BytesMut,
}

impl Writer<'_> {
    pub fn u8(&mut self, v: u8) {
        self.buf.put_u8(v);
    }

    pub fn i16(&mut self, v: i16) {
        self.buf.put_i16(v);
    }

    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }

    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v);
    }

    pub fn enumeration<E: WireEnum>(&mut self, v: E) {
        self.buf.put_u8(v.code());
    }

    /// `[i16 len][UTF-8]`; absent and empty are both length 0.
    pub fn str16(&mut self, field: &'static str, s: Option<&str>) -> Result<(), MessageError> {
        let bytes = fitting(field, s, i16::MAX as usize)?;
        self.buf.put_i16(bytes.len() as i16);
        self.buf.put_slice(bytes);
        Ok(())
    }

    /// `[i32 len][UTF-8]`; absent and empty are both length 0.
    pub fn str32(&mut self, field: &'static str, s: Option<&str>) -> Result<(), MessageError> {
        let bytes = fitting(field, s, i32::MAX as usize)?;
        self.buf.put_i32(bytes.len() as i32);
        self.buf.put_slice(bytes);
        Ok(())
    }
}

/// The bytes of string `field` (absent: none), or an error when there are more than
/// `max`, the most its length prefix can count.
fn fitting<'s>(
    field: &'static str,
    s: Option<&'s str>,
    max: usize,
) -> Result<&'s [u8], MessageError> {
    let s = s.unwrap_or("");
    if s.len() > max {
        return Err(MessageError::FieldTooLong {
            field,
            len: s.len(),
            max,
        });
    }
    Ok(s.as_bytes())
}

/// `s` cut to at most `max` bytes on a character boundary (Java truncates a failed
/// result's `msg` to 32767 characters; for ASCII text that is the same bytes).
pub(crate) fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

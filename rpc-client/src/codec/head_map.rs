//! The frame's head map ([`HeadMap`]) and its one-buffer builder ([`HeadMapWriter`]):
//! how its entries are kept (owned, static or spans of the decoded frame), written and
//! read.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::FrameError;

/// The frame's head map: string keys and nullable string values, in wire order.
///
/// Java clients normally send none; meshline uses it to carry routing identity (a
/// player id, a session id) next to an opaque body, so a gateway never has to decode
/// the body to route it. Small on purpose: a `Vec`, no hashing; an empty map does not
/// allocate. Keys are `Cow<'static, str>`, so the constant keys a program writes on
/// every message cost no allocation. The entries are shared copy-on-write: cloning a
/// map (as the client does for every send attempt, so a retry can resend the payload)
/// is one reference count, and only a clone that is then changed copies them.
///
/// A decoded map copies nothing: its keys and values stay where they arrived, in the
/// frame's buffer (shared with the body, which is a slice of it too), validated as UTF-8
/// once when decoded; one allocation (the entries) per decoded map instead of one per
/// string. Values set later are owned strings beside them.
#[derive(Clone, Default)]
pub struct HeadMap {
    entries: Option<Arc<Vec<HeadEntry>>>,
    /// The decoded head map's bytes: [`Text::Span`]s point into it (empty for a map
    /// built in code).
    text: Bytes,
}

/// A key or value: owned (or static), or a span of the decoded map's bytes.
#[derive(Clone, Debug)]
pub(super) enum Text {
    Cow(Cow<'static, str>),
    /// `start..start + len` of [`HeadMap::text`], valid UTF-8 (checked when decoded).
    Span {
        start: u32,
        len: u32,
    },
}

/// One head-map entry: key and nullable value.
pub(super) type HeadEntry = (Text, Option<Text>);

impl PartialEq for HeadMap {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for HeadMap {}

impl std::fmt::Debug for HeadMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl HeadMap {
    /// An empty map.
    pub fn new() -> Self {
        HeadMap::default()
    }

    /// An empty map with room for `n` entries (one allocation for a map built key by
    /// key).
    pub fn with_capacity(n: usize) -> Self {
        HeadMap {
            entries: (n > 0).then(|| Arc::new(Vec::with_capacity(n))),
            text: Bytes::new(),
        }
    }

    pub(super) fn slice(&self) -> &[HeadEntry] {
        self.entries.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The bytes of `t`.
    fn bytes_of<'a>(&'a self, t: &'a Text) -> &'a [u8] {
        match t {
            Text::Cow(c) => c.as_bytes(),
            Text::Span { start, len } => self
                .text
                .get(*start as usize..(*start as usize + *len as usize))
                .unwrap_or_default(),
        }
    }

    /// The text of `t` (a span was checked to be UTF-8 when it was decoded).
    fn str_of<'a>(&'a self, t: &'a Text) -> &'a str {
        match t {
            Text::Cow(c) => c,
            Text::Span { .. } => std::str::from_utf8(self.bytes_of(t)).unwrap_or_default(),
        }
    }

    /// The entries to change: copied first if a clone shares them.
    fn entries_mut(&mut self) -> &mut Vec<HeadEntry> {
        Arc::make_mut(self.entries.get_or_insert_with(Default::default))
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.slice()
            .iter()
            .position(|(k, _)| self.bytes_of(k) == key.as_bytes())
    }

    /// Sets `key` to `value`, replacing an earlier value of the same key. A `&'static
    /// str` key is stored without a copy.
    pub fn insert(&mut self, key: impl Into<Cow<'static, str>>, value: impl Into<String>) {
        self.insert_opt(key, Some(value.into()));
    }

    /// Sets `key` to a nullable value (Java `null` is written as length -1).
    pub fn insert_opt(&mut self, key: impl Into<Cow<'static, str>>, value: Option<String>) {
        let key = key.into();
        let value = value.map(|v| Text::Cow(Cow::Owned(v)));
        match self.position(&key) {
            Some(i) => self.entries_mut()[i].1 = value,
            None => self.entries_mut().push((Text::Cow(key), value)),
        }
    }

    /// The value of `key`; `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self.position(key)?;
        self.slice()[i].1.as_ref().map(|v| self.str_of(v))
    }

    /// Removes `key` and returns its value.
    pub fn remove(&mut self, key: &str) -> Option<Option<String>> {
        let i = self.position(key)?;
        let value = self.slice()[i]
            .1
            .as_ref()
            .map(|v| self.str_of(v).to_string());
        self.entries_mut().remove(i);
        Some(value)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.slice().is_empty()
    }

    /// The entries in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.slice()
            .iter()
            .map(|(k, v)| (self.str_of(k), v.as_ref().map(|v| self.str_of(v))))
    }

    /// Bytes this map takes on the wire, or an error naming the entry that cannot be
    /// written (a key or value longer than `i16::MAX` bytes).
    pub fn encoded_len(&self) -> Result<usize, FrameError> {
        let mut n = 0usize;
        for (k, v) in self.slice() {
            let k = self.bytes_of(k);
            if k.len() > i16::MAX as usize {
                return Err(FrameError::HeadEntryTooLong { len: k.len() });
            }
            n += 2 + k.len() + 2;
            if let Some(v) = v {
                let v = self.bytes_of(v);
                if v.len() > i16::MAX as usize {
                    return Err(FrameError::HeadEntryTooLong { len: v.len() });
                }
                n += v.len();
            }
        }
        Ok(n)
    }

    pub(super) fn encode_into(&self, dst: &mut BytesMut) {
        for (k, v) in self.slice() {
            let k = self.bytes_of(k);
            dst.put_i16(k.len() as i16);
            dst.put_slice(k);
            match v {
                Some(v) => {
                    let v = self.bytes_of(v);
                    dst.put_i16(v.len() as i16);
                    dst.put_slice(v);
                }
                None => dst.put_i16(-1),
            }
        }
    }

    /// Parses a head map that must fill `buf` exactly (a copy of it: see
    /// [`HeadMap::decode_shared`]).
    #[cfg(test)]
    pub(super) fn decode(buf: &[u8]) -> Result<HeadMap, FrameError> {
        HeadMap::decode_shared(Bytes::copy_from_slice(buf))
    }

    /// Parses a head map that must fill `head` exactly, keeping its strings in `head`.
    ///
    /// A key that appears twice keeps its **last** value, as Java's `HashMap` does when
    /// Seata decodes the same bytes: otherwise a gateway could check one value while a
    /// Java backend acts on another.
    pub(super) fn decode_shared(head: Bytes) -> Result<HeadMap, FrameError> {
        // Sized once: growing entry by entry reallocated three times for a typical map.
        let mut entries: Vec<HeadEntry> = Vec::with_capacity(count_entries(&head));
        let mut at = 0usize;
        // Small maps (the norm) dedupe by scanning; large ones through an index, so a
        // 32 KiB head of tiny entries stays linear.
        let mut index: Option<std::collections::HashMap<&[u8], usize>> = None;
        while at < head.len() {
            let key = read_head_span(&head, &mut at, "key")?
                .ok_or(FrameError::BadHeadMap { reason: "null key" })?;
            let value = read_head_span(&head, &mut at, "value")?;
            let key_bytes = span_bytes(&head, &key);
            if entries.len() >= 16 && index.is_none() {
                index = Some(
                    entries
                        .iter()
                        .enumerate()
                        .map(|(i, (k, _))| (span_bytes(&head, k), i))
                        .collect(),
                );
            }
            let existing = match &index {
                Some(ix) => ix.get(key_bytes).copied(),
                None => entries
                    .iter()
                    .position(|(k, _)| span_bytes(&head, k) == key_bytes),
            };
            match existing {
                Some(i) => entries[i].1 = value,
                None => {
                    if let Some(ix) = &mut index {
                        ix.insert(key_bytes, entries.len());
                    }
                    entries.push((key, value));
                }
            }
        }
        drop(index);
        Ok(HeadMap {
            entries: (!entries.is_empty()).then(|| Arc::new(entries)),
            text: head,
        })
    }
}

impl HeadMap {
    /// A writer for a map of up to `entries` entries whose values take about
    /// `text_bytes` bytes in all: see [`HeadMapWriter`].
    pub fn writer(entries: usize, text_bytes: usize) -> HeadMapWriter {
        HeadMapWriter {
            entries: Vec::with_capacity(entries),
            text: BytesMut::with_capacity(text_bytes),
        }
    }
}

/// Builds a [`HeadMap`] whose values are written into one buffer: two allocations for
/// the whole map (the entries and the values' bytes) instead of one per value. For a
/// caller that stamps the same keys on every message (a gateway writing a player's
/// identity on each forwarded request), where a `String` per value was most of the
/// cost of building the map. Keys are `&'static str`, stored without a copy.
///
/// The map it makes is like any other: it reads, changes, clones and encodes the same.
///
/// ```
/// use meshline_rpc_client::HeadMap;
/// let mut w = HeadMap::writer(2, 16);
/// w.entry("player", "alice").entry("seq", "7");
/// let head = w.finish();
/// assert_eq!(head.get("player"), Some("alice"));
/// assert_eq!(head.get("seq"), Some("7"));
/// ```
#[derive(Debug)]
pub struct HeadMapWriter {
    entries: Vec<HeadEntry>,
    text: BytesMut,
}

impl HeadMapWriter {
    /// Sets `key` to `value` (replacing an earlier value of the same key, as
    /// [`HeadMap::insert`] does).
    pub fn entry(&mut self, key: &'static str, value: &str) -> &mut Self {
        let start = self.text.len();
        self.text.extend_from_slice(value.as_bytes());
        let span = Text::Span {
            start: start as u32,
            len: value.len() as u32,
        };
        let at = self.entries.iter().position(|(k, _)| match k {
            Text::Cow(k) => k == key,
            Text::Span { .. } => false,
        });
        match at {
            Some(i) => self.entries[i].1 = Some(span),
            None => self
                .entries
                .push((Text::Cow(Cow::Borrowed(key)), Some(span))),
        }
        self
    }

    /// The map.
    pub fn finish(self) -> HeadMap {
        HeadMap {
            entries: (!self.entries.is_empty()).then(|| Arc::new(self.entries)),
            text: self.text.freeze(),
        }
    }
}

/// How many entries `head` seems to hold, from its length fields alone (the entries are
/// checked as they are read; this only sizes the list, at most 64 ahead).
fn count_entries(head: &[u8]) -> usize {
    let mut at = 0usize;
    let mut n = 0usize;
    let skip = |at: &mut usize| -> bool {
        let Some(&[hi, lo]) = head.get(*at..*at + 2) else {
            return false;
        };
        *at += 2 + usize::try_from(i16::from_be_bytes([hi, lo])).unwrap_or(0);
        true
    };
    while n < 64 && skip(&mut at) && skip(&mut at) {
        n += 1;
    }
    n
}

/// The bytes of a decoded span of `head` (spans of [`HeadMap::decode_shared`] only).
fn span_bytes<'a>(head: &'a [u8], t: &Text) -> &'a [u8] {
    match t {
        Text::Span { start, len } => head
            .get(*start as usize..(*start as usize + *len as usize))
            .unwrap_or_default(),
        Text::Cow(_) => &[],
    }
}

impl<K: Into<Cow<'static, str>>, V: Into<String>> FromIterator<(K, V)> for HeadMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = HeadMap::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// Reads `[i16 len][bytes]` of `head` at `*at`: the bytes' span (checked to be UTF-8),
/// `None` for length -1 (Java's null).
fn read_head_span(
    head: &[u8],
    at: &mut usize,
    what: &'static str,
) -> Result<Option<Text>, FrameError> {
    let Some(&[hi, lo]) = head.get(*at..*at + 2) else {
        return Err(FrameError::BadHeadMap {
            reason: if what == "key" {
                "truncated key length"
            } else {
                "truncated value length"
            },
        });
    };
    *at += 2;
    let len = i16::from_be_bytes([hi, lo]);
    if len == -1 {
        return Ok(None);
    }
    if len < 0 {
        return Err(FrameError::BadHeadMap {
            reason: "negative string length other than -1",
        });
    }
    let len = len as usize;
    let Some(s) = head.get(*at..*at + len) else {
        return Err(FrameError::BadHeadMap {
            reason: "entry runs past the declared head length",
        });
    };
    if std::str::from_utf8(s).is_err() {
        return Err(FrameError::BadHeadMap {
            reason: "entry is not UTF-8",
        });
    }
    let span = Text::Span {
        start: *at as u32,
        len: len as u32,
    };
    *at += len;
    Ok(Some(span))
}

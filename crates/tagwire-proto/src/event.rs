//! The event model: header, typed filterable fields and an opaque payload,
//! with a byte-exact encoding shared by `Publish` and `Deliver` frames.
//!
//! [`Event`] is the owned form applications build; [`EventRef`] is a
//! zero-allocation, fully validated view over encoded bytes, which is what the
//! router and the filter engine read on the hot path.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::DecodeError;
use crate::limits::{MAX_FIELDS, MAX_NAME_LEN, MAX_TAG_LEN};
use crate::reader::Reader;

/// A typed value of a filterable field.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Signed 64-bit integer (type code 1).
    Int(i64),
    /// IEEE-754 double (type code 2).
    Float(f64),
    /// Boolean (type code 3).
    Bool(bool),
    /// UTF-8 string (type code 4).
    Str(String),
    /// Opaque bytes (type code 5).
    Bytes(Bytes),
}

macro_rules! value_from {
    ($($t:ty => $v:ident $(as $c:ty)?),*) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Self { Value::$v(x $(as $c)?) }
        }
    )*};
}
value_from!(i64 => Int, i32 => Int as i64, u32 => Int as i64, f64 => Float, bool => Bool, String => Str, Bytes => Bytes);

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}

/// A borrowed [`Value`], as read from encoded bytes without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// Signed 64-bit integer.
    Int(i64),
    /// IEEE-754 double.
    Float(f64),
    /// Boolean.
    Bool(bool),
    /// UTF-8 string.
    Str(&'a str),
    /// Opaque bytes.
    Bytes(&'a [u8]),
}

/// A field's value as [`EventRef::raw_fields`] reads it: a string is left
/// as its bytes, which [`EventRef::parse`] already checked are UTF-8, so
/// reading the fields again costs no second check (issue 24 item 9: a
/// 15 MiB string that no filter reads was validated again for every
/// filtered subscription).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RawValueRef<'a> {
    /// Signed 64-bit integer.
    Int(i64),
    /// IEEE-754 double.
    Float(f64),
    /// Boolean.
    Bool(bool),
    /// A string's bytes: valid UTF-8, checked when the event was parsed.
    Str(&'a [u8]),
    /// Opaque bytes.
    Bytes(&'a [u8]),
}

impl<'a> RawValueRef<'a> {
    /// The value with its string checked as UTF-8 again (it is: the event
    /// was parsed); `None` only if it is not. Costs the string's length.
    pub fn checked(self) -> Option<ValueRef<'a>> {
        Some(match self {
            RawValueRef::Int(i) => ValueRef::Int(i),
            RawValueRef::Float(f) => ValueRef::Float(f),
            RawValueRef::Bool(b) => ValueRef::Bool(b),
            RawValueRef::Str(s) => ValueRef::Str(std::str::from_utf8(s).ok()?),
            RawValueRef::Bytes(b) => ValueRef::Bytes(b),
        })
    }
}

impl Value {
    /// Borrows this value.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Int(v) => ValueRef::Int(*v),
            Value::Float(v) => ValueRef::Float(*v),
            Value::Bool(v) => ValueRef::Bool(*v),
            Value::Str(v) => ValueRef::Str(v),
            Value::Bytes(v) => ValueRef::Bytes(v),
        }
    }
}

impl ValueRef<'_> {
    /// Copies this value into an owned [`Value`].
    pub fn to_owned(&self) -> Value {
        match *self {
            ValueRef::Int(v) => Value::Int(v),
            ValueRef::Float(v) => Value::Float(v),
            ValueRef::Bool(v) => Value::Bool(v),
            ValueRef::Str(v) => Value::Str(v.to_owned()),
            ValueRef::Bytes(v) => Value::Bytes(Bytes::copy_from_slice(v)),
        }
    }
}

/// When an event stops being worth delivering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expiry {
    /// Never expires.
    #[default]
    Never,
    /// Expires this many nanoseconds after its source timestamp (TAO `timeout`).
    AfterNs(u64),
    /// Expires at this absolute time, ns since the Unix epoch (TAO `stop_time`).
    AtNs(u64),
}

/// Event header: everything but the fields and the payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// The tag (named stream) the event is published on, e.g. `/cam/left`.
    pub tag: String,
    /// Name of the publishing endpoint.
    pub publisher: String,
    /// Per-publisher sequence number.
    pub seq: u64,
    /// Source timestamp, ns since the Unix epoch (synchronised clock).
    pub source_time_ns: u64,
    /// Virtual time: the event's position in its stream (DROPS).
    pub virtual_time: Option<u64>,
    /// Priority, 0 (lowest) to 255 (highest).
    pub priority: u8,
    /// Relative timeout or absolute stop time.
    pub expiry: Expiry,
    /// Earliest delivery time, ns since the Unix epoch.
    pub start_time_ns: Option<u64>,
    /// Structured-event type name (TAO), e.g. `CommunicationsAlarm`.
    pub type_name: Option<String>,
    /// Structured-event name (TAO), e.g. `lost_packet`.
    pub event_name: Option<String>,
    /// The application's flags: all 16 bits are the publisher's own, carried
    /// through to subscribers unchanged (as protocol version 1 documented);
    /// the protocol assigns none of them.
    pub flags: u16,
    /// The payload is a 24-byte [`ShmRef`]: the bytes lie in a shared-memory
    /// region on this host (`docs/protocol.md`, "ShmRegion"). Encoded as
    /// presence bit `0x80`, which versions 1 and 2 reserved (must be 0), so
    /// no older client's event can set it by accident.
    pub payload_in_shm: bool,
}

/// An event: header, filterable fields and an opaque, shared payload.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Event {
    /// The header.
    pub header: Header,
    /// Filterable fields, in the order they were added. Names are unique.
    pub fields: Vec<(String, Value)>,
    /// The payload, shared by reference across fan-out.
    pub payload: Bytes,
}

// Presence bits of the optional header parts, in encoding order.
const HAS_VIRTUAL_TIME: u8 = 0x01;
const HAS_EXPIRY: u8 = 0x02;
const HAS_START_TIME: u8 = 0x04;
const HAS_TYPE_NAME: u8 = 0x08;
const HAS_EVENT_NAME: u8 = 0x10;
const HAS_FIELDS: u8 = 0x20;
const HAS_FLAGS: u8 = 0x40;
/// Not a part: the payload is a [`ShmRef`] (see [`Header::payload_in_shm`]).
const SHM_REF: u8 = 0x80;

const EXPIRY_AFTER: u8 = 1;
const EXPIRY_AT: u8 = 2;

const T_INT: u8 = 1;
const T_FLOAT: u8 = 2;
const T_BOOL: u8 = 3;
const T_STR: u8 = 4;
const T_BYTES: u8 = 5;

impl Event {
    /// A new event on `tag` with `payload` and default header values.
    pub fn new(tag: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        Event {
            header: Header {
                tag: tag.into(),
                ..Header::default()
            },
            fields: Vec::new(),
            payload: payload.into(),
        }
    }

    /// The value of field `name`, if present.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Number of bytes [`Event::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        let h = &self.header;
        let mut n = 2 + h.tag.len() + 1 + h.publisher.len() + 8 + 8 + 1 + 1;
        n += h.virtual_time.map_or(0, |_| 8);
        n += if h.expiry == Expiry::Never { 0 } else { 9 };
        n += h.start_time_ns.map_or(0, |_| 8);
        n += h.type_name.as_ref().map_or(0, |s| 1 + s.len());
        n += h.event_name.as_ref().map_or(0, |s| 1 + s.len());
        if !self.fields.is_empty() {
            n += 2;
            for (name, v) in &self.fields {
                n += 1 + name.len() + 1;
                n += match v {
                    Value::Int(_) | Value::Float(_) => 8,
                    Value::Bool(_) => 1,
                    Value::Str(s) => 4 + s.len(),
                    Value::Bytes(b) => 4 + b.len(),
                };
            }
        }
        n += if h.flags == 0 { 0 } else { 2 };
        n + self.payload.len()
    }

    /// Appends the encoding documented in `docs/protocol.md` ("Event") to `out`.
    ///
    /// Fails if a length exceeds its limit (the event could not be decoded).
    /// Everything is checked before the first byte is written, so on error
    /// `out` is left as it was.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), crate::EncodeError> {
        self.check()?;
        let h = &self.header;
        out.reserve(self.encoded_len());
        out.put_u16_le(h.tag.len() as u16);
        out.put_slice(h.tag.as_bytes());
        out.put_u8(h.publisher.len() as u8);
        out.put_slice(h.publisher.as_bytes());
        let mut present = 0u8;
        if h.virtual_time.is_some() {
            present |= HAS_VIRTUAL_TIME;
        }
        if h.expiry != Expiry::Never {
            present |= HAS_EXPIRY;
        }
        if h.start_time_ns.is_some() {
            present |= HAS_START_TIME;
        }
        if h.type_name.is_some() {
            present |= HAS_TYPE_NAME;
        }
        if h.event_name.is_some() {
            present |= HAS_EVENT_NAME;
        }
        if !self.fields.is_empty() {
            present |= HAS_FIELDS;
        }
        if h.flags != 0 {
            present |= HAS_FLAGS;
        }
        if h.payload_in_shm {
            present |= SHM_REF;
        }
        // Sequence number, source timestamp, priority and presence bits:
        // one append of their 18 bytes (an append costs a capacity check).
        let mut fixed = [0u8; 18];
        fixed[..8].copy_from_slice(&h.seq.to_le_bytes());
        fixed[8..16].copy_from_slice(&h.source_time_ns.to_le_bytes());
        fixed[16] = h.priority;
        fixed[17] = present;
        out.put_slice(&fixed);
        if let Some(vt) = h.virtual_time {
            out.put_u64_le(vt);
        }
        match h.expiry {
            Expiry::Never => {}
            Expiry::AfterNs(ns) => {
                out.put_u8(EXPIRY_AFTER);
                out.put_u64_le(ns);
            }
            Expiry::AtNs(ns) => {
                out.put_u8(EXPIRY_AT);
                out.put_u64_le(ns);
            }
        }
        if let Some(st) = h.start_time_ns {
            out.put_u64_le(st);
        }
        for s in [&h.type_name, &h.event_name].into_iter().flatten() {
            out.put_u8(s.len() as u8);
            out.put_slice(s.as_bytes());
        }
        if !self.fields.is_empty() {
            out.put_u16_le(self.fields.len() as u16);
            for (name, v) in &self.fields {
                out.put_u8(name.len() as u8);
                out.put_slice(name.as_bytes());
                match v {
                    Value::Int(i) => {
                        out.put_u8(T_INT);
                        out.put_i64_le(*i);
                    }
                    Value::Float(f) => {
                        out.put_u8(T_FLOAT);
                        out.put_f64_le(*f);
                    }
                    Value::Bool(b) => {
                        out.put_u8(T_BOOL);
                        out.put_u8(*b as u8);
                    }
                    Value::Str(s) => {
                        out.put_u8(T_STR);
                        out.put_u32_le(s.len() as u32); // checked ≤ u32::MAX
                        out.put_slice(s.as_bytes());
                    }
                    Value::Bytes(b) => {
                        out.put_u8(T_BYTES);
                        out.put_u32_le(b.len() as u32); // checked ≤ u32::MAX
                        out.put_slice(b);
                    }
                }
            }
        }
        if h.flags != 0 {
            out.put_u16_le(h.flags);
        }
        out.put_slice(&self.payload);
        Ok(())
    }

    /// Checks every length, name and field before encoding.
    fn check(&self) -> Result<(), crate::EncodeError> {
        use crate::EncodeError as E;
        let h = &self.header;
        check_tag_len(&h.tag)?;
        if h.payload_in_shm && self.payload.len() != ShmRef::LEN {
            return Err(E::BadValue {
                what: "shared-memory reference length",
                value: self.payload.len() as u64,
            });
        }
        check_name("publisher", &h.publisher)?;
        if let Some(s) = &h.type_name {
            check_name("type_name", s)?;
        }
        if let Some(s) = &h.event_name {
            check_name("event_name", s)?;
        }
        let count = self.fields.len();
        if count > MAX_FIELDS {
            return Err(E::TooManyFields {
                count,
                max: MAX_FIELDS,
            });
        }
        for (name, v) in &self.fields {
            check_name("field name", name)?;
            if name.is_empty() {
                return Err(E::EmptyName { what: "field name" });
            }
            let len = match v {
                Value::Str(s) => s.len(),
                Value::Bytes(b) => b.len(),
                _ => 0,
            };
            if u32::try_from(len).is_err() {
                return Err(E::ValueTooLong);
            }
        }
        let mut small = [""; SMALL_FIELDS];
        let mut large_buf;
        let names: &mut [&str] = if count <= SMALL_FIELDS {
            &mut small[..count]
        } else {
            large_buf = [""; MAX_FIELDS];
            &mut large_buf[..count]
        };
        for (slot, (n, _)) in names.iter_mut().zip(&self.fields) {
            *slot = n;
        }
        let dup = first_duplicate(names);
        if let Some(name) = dup {
            return Err(E::DuplicateField {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Decodes an owned event from `buf` (the whole encoded event). The
    /// payload is a zero-copy slice of `buf`.
    pub fn decode(buf: &Bytes) -> Result<Event, DecodeError> {
        let r = EventRef::parse(buf)?;
        let payload_start = buf.len() - r.payload.len();
        Ok(Event {
            header: Header {
                tag: r.tag.to_owned(),
                publisher: r.publisher.to_owned(),
                seq: r.seq,
                source_time_ns: r.source_time_ns,
                virtual_time: r.virtual_time,
                priority: r.priority,
                expiry: r.expiry,
                start_time_ns: r.start_time_ns,
                type_name: r.type_name.map(str::to_owned),
                event_name: r.event_name.map(str::to_owned),
                flags: r.flags,
                payload_in_shm: r.payload_in_shm,
            },
            fields: r
                .fields()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
            payload: buf.slice(payload_start..),
        })
    }
}

fn check_tag_len(tag: &str) -> Result<(), crate::EncodeError> {
    if tag.len() > MAX_TAG_LEN {
        return Err(crate::EncodeError::TooLong {
            what: "tag",
            len: tag.len(),
            max: MAX_TAG_LEN,
        });
    }
    Ok(())
}

fn check_name(what: &'static str, s: &str) -> Result<(), crate::EncodeError> {
    if s.len() > MAX_NAME_LEN {
        return Err(crate::EncodeError::TooLong {
            what,
            len: s.len(),
            max: MAX_NAME_LEN,
        });
    }
    Ok(())
}

/// A validated, borrowed view of an encoded event. Parsing checks every
/// length, every UTF-8 string and every field type, so code holding an
/// `EventRef` can trust it; nothing is allocated.
#[derive(Debug, Clone, Copy)]
pub struct EventRef<'a> {
    /// Tag.
    pub tag: &'a str,
    /// Publishing endpoint name.
    pub publisher: &'a str,
    /// Per-publisher sequence number.
    pub seq: u64,
    /// Source timestamp, ns since the Unix epoch.
    pub source_time_ns: u64,
    /// Virtual time, if set.
    pub virtual_time: Option<u64>,
    /// Priority.
    pub priority: u8,
    /// Expiry.
    pub expiry: Expiry,
    /// Earliest delivery time, if set.
    pub start_time_ns: Option<u64>,
    /// Type name, if set.
    pub type_name: Option<&'a str>,
    /// Event name, if set.
    pub event_name: Option<&'a str>,
    /// The application's flags (carried through unchanged).
    pub flags: u16,
    /// The payload is a 24-byte [`ShmRef`] (presence bit `0x80`); parsing
    /// checked its length, so [`EventRef::shm_ref`] returns it.
    pub payload_in_shm: bool,
    /// Encoded fields (validated); read them with [`EventRef::fields`].
    fields_raw: &'a [u8],
    /// The opaque payload.
    pub payload: &'a [u8],
}

/// Why [`EventRef::parse_named`] refused an event: the encoding, or what
/// its caller's `names` said about the tag or the publisher.
#[derive(Debug)]
pub enum NamedError<E> {
    /// The event is malformed.
    Decode(DecodeError),
    /// `names` refused its tag or publisher.
    Names(E),
}

impl<E> From<DecodeError> for NamedError<E> {
    fn from(e: DecodeError) -> Self {
        NamedError::Decode(e)
    }
}

impl<'a> EventRef<'a> {
    /// Parses and validates an encoded event.
    pub fn parse(buf: &'a [u8]) -> Result<EventRef<'a>, DecodeError> {
        let utf8 = |bytes: &'a [u8], what| {
            std::str::from_utf8(bytes).map_err(|e| DecodeError::NotUtf8 {
                what,
                at: e.valid_up_to(),
            })
        };
        Self::parse_named(buf, |tag, publisher| {
            Ok((utf8(tag, "tag")?, utf8(publisher, "publisher")?))
        })
        .map_err(|e| match e {
            NamedError::Decode(e) | NamedError::Names(e) => e,
        })
    }

    /// Parses and validates an encoded event, except its tag and publisher:
    /// once the rest is valid, `names` gets their raw bytes and returns them
    /// as strings, or refuses them. This is the hot path's parse: a daemon
    /// compares a publish's names with the endpoint's name and the tag it
    /// last validated, and returns its own copies on a match, instead of
    /// validating the same UTF-8 again for every event.
    #[inline]
    pub fn parse_named<E>(
        buf: &'a [u8],
        names: impl FnOnce(&'a [u8], &'a [u8]) -> Result<(&'a str, &'a str), E>,
    ) -> Result<EventRef<'a>, NamedError<E>> {
        let (mut ev, tag, publisher) = Self::parse_unnamed(buf)?;
        (ev.tag, ev.publisher) = names(tag, publisher).map_err(NamedError::Names)?;
        Ok(ev)
    }

    /// Parses and validates an encoded event except its tag and publisher,
    /// which it returns raw beside it (the event's are empty). Not generic,
    /// so that it is compiled here, with the reader's small steps inlined.
    fn parse_unnamed(buf: &'a [u8]) -> Result<(EventRef<'a>, &'a [u8], &'a [u8]), DecodeError> {
        let mut r = Reader::new(buf);
        let tag_len = r.u16("tag length")? as usize;
        if tag_len > MAX_TAG_LEN {
            return Err(DecodeError::TooLong {
                what: "tag",
                len: tag_len,
                max: MAX_TAG_LEN,
            });
        }
        let tag = r.bytes(tag_len, "tag")?;
        let pub_len = r.u8("publisher length")? as usize;
        let publisher = r.bytes(pub_len, "publisher")?;
        let seq = r.u64("sequence number")?;
        let source_time_ns = r.u64("source timestamp")?;
        let priority = r.u8("priority")?;
        // Every bit of the presence byte is assigned (0x80: SHM_REF).
        let present = r.u8("presence bits")?;
        let virtual_time = if present & HAS_VIRTUAL_TIME != 0 {
            Some(r.u64("virtual time")?)
        } else {
            None
        };
        let expiry = if present & HAS_EXPIRY != 0 {
            match r.u8("expiry kind")? {
                EXPIRY_AFTER => Expiry::AfterNs(r.u64("expiry")?),
                EXPIRY_AT => Expiry::AtNs(r.u64("expiry")?),
                k => {
                    return Err(DecodeError::BadValue {
                        what: "expiry kind",
                        value: k as u64,
                    })
                }
            }
        } else {
            Expiry::Never
        };
        let start_time_ns = if present & HAS_START_TIME != 0 {
            Some(r.u64("start time")?)
        } else {
            None
        };
        let type_name = if present & HAS_TYPE_NAME != 0 {
            let n = r.u8("type name length")? as usize;
            Some(r.str(n, "type name")?)
        } else {
            None
        };
        let event_name = if present & HAS_EVENT_NAME != 0 {
            let n = r.u8("event name length")? as usize;
            Some(r.str(n, "event name")?)
        } else {
            None
        };
        let fields_raw = if present & HAS_FIELDS != 0 {
            let start = r.pos();
            let count = r.u16("field count")? as usize;
            if count > MAX_FIELDS {
                return Err(DecodeError::TooMany {
                    what: "fields",
                    count,
                    max: MAX_FIELDS,
                });
            }
            // Names are unique: a duplicate would make filters ambiguous.
            // The names are collected on the stack (a small array for the
            // usual few fields) and checked without allocating.
            let dup = if count <= SMALL_FIELDS {
                let mut names = [""; SMALL_FIELDS];
                read_fields(&mut r, &mut names[..count])?;
                first_duplicate(&mut names[..count])
            } else {
                let mut names = [""; MAX_FIELDS];
                read_fields(&mut r, &mut names[..count])?;
                first_duplicate(&mut names[..count])
            };
            if let Some(name) = dup {
                return Err(DecodeError::DuplicateField {
                    name: name.to_owned(),
                });
            }
            &buf[start..r.pos()]
        } else {
            &[]
        };
        let flags = if present & HAS_FLAGS != 0 {
            r.u16("flags")?
        } else {
            0
        };
        let payload = r.rest();
        let payload_in_shm = present & SHM_REF != 0;
        if payload_in_shm && payload.len() != ShmRef::LEN {
            return Err(DecodeError::BadValue {
                what: "shared-memory reference length",
                value: payload.len() as u64,
            });
        }
        let ev = EventRef {
            tag: "",
            publisher: "",
            seq,
            source_time_ns,
            virtual_time,
            priority,
            expiry,
            start_time_ns,
            type_name,
            event_name,
            flags,
            payload_in_shm,
            fields_raw,
            payload,
        };
        Ok((ev, tag, publisher))
    }

    /// Iterates over the filterable fields in encoding order.
    pub fn fields(&self) -> FieldIter<'a> {
        if self.fields_raw.is_empty() {
            return FieldIter {
                r: Reader::new(&[]),
                left: 0,
            };
        }
        let mut r = Reader::new(self.fields_raw);
        let left = r.u16("field count").unwrap_or(0) as usize;
        FieldIter { r, left }
    }

    /// The value of field `name`, if present (a linear scan: events carry few fields).
    pub fn field(&self, name: &str) -> Option<ValueRef<'a>> {
        self.fields().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The shared-memory reference the payload is, if the event carries one
    /// ([`EventRef::payload_in_shm`]; parsing checked its length).
    pub fn shm_ref(&self) -> Option<ShmRef> {
        if !self.payload_in_shm {
            return None;
        }
        ShmRef::decode(self.payload).ok()
    }

    /// Iterates over the filterable fields in encoding order, names and
    /// string values as their bytes (valid UTF-8: [`EventRef::parse`]
    /// checked them). Unlike [`EventRef::fields`] it reads no string's
    /// contents, so its cost is the number of fields, whatever their size.
    pub fn raw_fields(&self) -> RawFieldIter<'a> {
        if self.fields_raw.is_empty() {
            return RawFieldIter {
                r: Reader::new(&[]),
                left: 0,
            };
        }
        let mut r = Reader::new(self.fields_raw);
        let left = r.u16("field count").unwrap_or(0) as usize;
        RawFieldIter { r, left }
    }
}

/// Up to this many field names are checked for duplicates pairwise; more are
/// sorted, which is faster from about 9 names on (re-parsing earlier fields
/// pairwise, as this once did, cost ~1.6 ms for a 256-field event; sorting
/// costs ~5 µs).
const SMALL_FIELDS: usize = 8;

/// Reads `names.len()` fields, storing their names.
fn read_fields<'a>(r: &mut Reader<'a>, names: &mut [&'a str]) -> Result<(), DecodeError> {
    for slot in names {
        let n = r.u8("field name length")? as usize;
        if n == 0 {
            return Err(DecodeError::Empty { what: "field name" });
        }
        *slot = r.str(n, "field name")?;
        read_value(r)?;
    }
    Ok(())
}

/// A name that occurs twice in `names` (which may be reordered), if any.
fn first_duplicate<'a>(names: &mut [&'a str]) -> Option<&'a str> {
    if names.len() <= SMALL_FIELDS {
        (1..names.len()).find_map(|i| names[..i].contains(&names[i]).then_some(names[i]))
    } else {
        names.sort_unstable();
        names.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
    }
}

fn read_value<'a>(r: &mut Reader<'a>) -> Result<ValueRef<'a>, DecodeError> {
    Ok(match read_raw_value(r)? {
        RawValueRef::Int(i) => ValueRef::Int(i),
        RawValueRef::Float(f) => ValueRef::Float(f),
        RawValueRef::Bool(b) => ValueRef::Bool(b),
        RawValueRef::Str(s) => {
            ValueRef::Str(std::str::from_utf8(s).map_err(|e| DecodeError::NotUtf8 {
                what: "string value",
                at: e.valid_up_to(),
            })?)
        }
        RawValueRef::Bytes(b) => ValueRef::Bytes(b),
    })
}

/// A value, its string (if it is one) not checked as UTF-8.
fn read_raw_value<'a>(r: &mut Reader<'a>) -> Result<RawValueRef<'a>, DecodeError> {
    Ok(match r.u8("field type")? {
        T_INT => RawValueRef::Int(r.u64("int value")? as i64),
        T_FLOAT => RawValueRef::Float(f64::from_bits(r.u64("float value")?)),
        T_BOOL => match r.u8("bool value")? {
            0 => RawValueRef::Bool(false),
            1 => RawValueRef::Bool(true),
            v => {
                return Err(DecodeError::BadValue {
                    what: "bool value",
                    value: v as u64,
                })
            }
        },
        T_STR => {
            let n = r.u32("string length")? as usize;
            RawValueRef::Str(r.bytes(n, "string value")?)
        }
        T_BYTES => {
            let n = r.u32("bytes length")? as usize;
            RawValueRef::Bytes(r.bytes(n, "bytes value")?)
        }
        t => {
            return Err(DecodeError::BadValue {
                what: "field type",
                value: t as u64,
            })
        }
    })
}

/// Iterator over an [`EventRef`]'s fields, yielding `(name, value)`.
#[derive(Debug, Clone)]
pub struct FieldIter<'a> {
    r: Reader<'a>,
    left: usize,
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = (&'a str, ValueRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The bytes were validated by `EventRef::parse`, so these reads succeed.
        let n = self.r.u8("field name length").ok()? as usize;
        let name = self.r.str(n, "field name").ok()?;
        let v = read_value(&mut self.r).ok()?;
        Some((name, v))
    }
}

/// Iterator over an [`EventRef`]'s fields without a second UTF-8 check,
/// yielding `(name bytes, value)` (see [`EventRef::raw_fields`]).
#[derive(Debug, Clone)]
pub struct RawFieldIter<'a> {
    r: Reader<'a>,
    left: usize,
}

impl<'a> Iterator for RawFieldIter<'a> {
    type Item = (&'a [u8], RawValueRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The bytes were validated by `EventRef::parse`, so these reads succeed.
        let n = self.r.u8("field name length").ok()? as usize;
        let name = self.r.bytes(n, "field name").ok()?;
        let v = read_raw_value(&mut self.r).ok()?;
        Some((name, v))
    }
}

/// Where an event's payload lies in shared memory (the payload of an event
/// with [`Header::payload_in_shm`], presence bit `0x80`): region, packet sequence number (its slot is
/// `seq mod slots`, its generation `seq`), length, and the data chunk that
/// holds it (as published: 0, the daemon reads the packet's descriptor; as
/// delivered: the chunk the daemon pinned for the subscriber, see `docs/shm.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmRef {
    /// The daemon's region id (see `Frame::ShmRegion`).
    pub region: u64,
    /// The packet's sequence number in the region's stream.
    pub seq: u64,
    /// The payload's length in bytes.
    pub len: u32,
    /// The data chunk that holds the payload.
    pub chunk: u32,
}

impl ShmRef {
    /// Encoded size: region u64, seq u64, len u32, chunk u32, little-endian.
    pub const LEN: usize = 24;

    /// The 24 bytes of the reference.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..8].copy_from_slice(&self.region.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..24].copy_from_slice(&self.chunk.to_le_bytes());
        b
    }

    /// Parses a reference; any length but 24 is an error.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() != Self::LEN {
            return Err(DecodeError::BadValue {
                what: "shared-memory reference length",
                value: b.len() as u64,
            });
        }
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |o: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(a)
        };
        Ok(ShmRef {
            region: u64_at(0),
            seq: u64_at(8),
            len: u32_at(16),
            chunk: u32_at(20),
        })
    }
}

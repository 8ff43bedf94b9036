//! Compression of events on links (`compression=lz4|zstd[:MIN]` on a tag or
//! the daemon; link version 5; docs/reliability.md, "Compression on links").
//!
//! The publisher's daemon decides, by the tag and daemon layers of its QoS:
//! an event of a compressed tag at least `MIN` bytes long is compressed once
//! when it is routed and queued on each link connection that speaks version
//! 5 as a `ForwardCompressed` (the same queue, bound and discard policy as a
//! `Forward`); older peers get the `Forward`. A receiving daemon
//! decompresses it (bounded by `limits.max_frame`, see
//! [`tagwire_core::compress::decompress`]) and handles it as the `Forward`
//! it was: later links get it compressed again only if their daemon's own
//! layers say so. Shared memory, Unix sockets and client connections never
//! see compressed events.

use bytes::{BufMut, Bytes, BytesMut};
use tagwire_core::compress::Compression;
use tagwire_core::qos::{resolve, Property};
use tagwire_proto::admin::CompressionInfo;
use tagwire_proto::{Codec, ErrorCode, COMPRESSED_HEADER_LEN};

use crate::state::State;

/// Tags whose compression is remembered; past it the cache starts over.
const CACHE_TAGS: usize = 4096;

/// After a daemon or tag layer changed: whether any tag compresses.
pub(crate) fn layers_changed(st: &mut State) {
    let on = |l: &tagwire_core::qos::QosLayer| {
        l.is_set(Property::Compression) && resolve(&[l]).values().compression.codec.is_some()
    };
    let enabled = on(&st.qos_daemon) || st.qos_tags.iter().any(|t| on(&t.layer));
    let c = &mut st.fed.compress;
    c.enabled = enabled;
    c.cache.clear();
}

/// The compression of events of `tag` published or routed here: a flag
/// test when no tag compresses or no link speaks version 5.
pub(crate) fn for_tag(st: &mut State, tag: &str) -> Compression {
    let c = &st.fed.compress;
    if !c.enabled || c.conns.is_empty() {
        return Compression::default();
    }
    if let Some(r) = c.cache.get(tag) {
        return *r;
    }
    let r = tagwire_core::qos::layer_for(&st.qos_daemon, &st.qos_tags, tag, Property::Compression)
        .map(|l| resolve(&[l]).values().compression)
        .unwrap_or_default();
    let cache = &mut st.fed.compress.cache;
    if cache.len() >= CACHE_TAGS {
        cache.clear();
    }
    cache.insert(Box::from(tag), r);
    r
}

/// Link connection `conn` closed.
pub(crate) fn conn_closed(st: &mut State, conn: u64) {
    st.fed.compress.conns.remove(&conn);
}

/// The body of a `ForwardCompressed` after its origin and hops (`u8 codec`,
/// `u32 raw_len`, the compressed event), or `None` if `event` does not
/// shrink (it goes as a `Forward`). Counted either way.
pub(crate) fn blob(counters: &mut CompressionInfo, codec: Codec, event: &[u8]) -> Option<Bytes> {
    let Some(data) = tagwire_core::compress::compress(codec, event) else {
        counters.not_smaller += 1;
        return None;
    };
    let mut b = BytesMut::with_capacity(COMPRESSED_HEADER_LEN + data.len());
    b.put_u8(codec.code());
    b.put_u32_le(event.len() as u32);
    b.put_slice(&data);
    counters.compressed += 1;
    counters.raw_bytes += event.len() as u64;
    counters.wire_bytes += b.len() as u64;
    Some(b.freeze())
}

/// Decompresses an arriving compressed event (`what`: "event") or piece of
/// one ("piece", `FragmentCompressed`), bounded by `limits.max_frame`; a
/// bad one is counted and closes the link connection (as a bad `Forward`
/// does), naming why.
pub(crate) fn decompress(
    st: &mut State,
    codec: Codec,
    raw_len: u32,
    data: &[u8],
    what: &str,
) -> Result<Bytes, (ErrorCode, String)> {
    let max = st.config.limits.max_frame as usize;
    // The buffer it decompresses into is charged to the memory budget for
    // the call (the event, once queued, is charged by its queues).
    let charge = (raw_len as usize).min(max);
    if !st.memory.try_reserve(charge) {
        st.fed.compress.counters.failed += 1;
        st.memory.note_refusal();
        return Err((
            ErrorCode::LimitReached,
            format!(
                "a compressed {what} on a link declares {raw_len} bytes; the memory budget has {} \
                 free (limits.max_buffered_bytes = {})",
                st.memory.room(),
                st.memory.max()
            ),
        ));
    }
    let result = tagwire_core::compress::decompress(codec, raw_len, data, max);
    st.memory.release(charge);
    match result {
        Ok(event) => {
            st.fed.compress.counters.decompressed += 1;
            Ok(Bytes::from(event))
        }
        Err(e) => {
            st.fed.compress.counters.failed += 1;
            Err((
                ErrorCode::Malformed,
                format!("bad compressed {what} on a link: {e}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Authenticator;
    use crate::config::RouterConfig;

    #[test]
    fn decompressing_is_charged_to_the_memory_budget_and_refused_past_it() {
        let mut config = RouterConfig::default();
        config.limits.max_frame = 1 << 20;
        config.limits.max_buffered_bytes = 1 << 20;
        let mut st = State::new(config, Authenticator::disabled(0));
        let raw = vec![b'a'; 64 << 10];
        let data = tagwire_core::compress::compress(Codec::Lz4, &raw).expect("it shrinks");
        // The budget has room: decompressed, and the charge given back.
        let e = decompress(&mut st, Codec::Lz4, raw.len() as u32, &data, "event").expect("room");
        assert_eq!(e.len(), raw.len());
        assert_eq!(st.memory.used(), 0);
        // Queues hold all but 1 KiB of it: refused naming the budget.
        assert!(st.memory.try_reserve((1 << 20) - 1024));
        let err =
            decompress(&mut st, Codec::Lz4, raw.len() as u32, &data, "piece").expect_err("no room");
        assert_eq!(err.0, ErrorCode::LimitReached);
        assert!(err.1.contains("max_buffered_bytes"), "{}", err.1);
        assert_eq!(st.fed.compress.counters.failed, 1);
    }
}

//! Property tests of the `Hello` body across protocol versions (see
//! docs/protocol.md, "Hello" and "Versions"): the frozen prefix (magic,
//! version, max_frame, name) decodes the same in every version; version 2
//! appends a token and a 16-byte session id; a `Hello` of a version this
//! crate does not speak decodes up to the name whatever follows, so that a
//! server can answer `UnsupportedVersion`; a `Hello` of versions 1 and 2
//! with bytes after its last field, or cut anywhere, is refused naming the
//! field. Version 3 replaces the token by a credential kind (0: none, 1:
//! a 32-byte nonce and a 32-byte token tag), before the session id.

use bytes::Bytes;
use proptest::prelude::*;
use tagwire_proto::{
    kind, DecodeError, Frame, TokenTag, MAGIC, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
    SESSION_ID_LEN,
};

/// A name or token of 0 to 255 bytes of UTF-8.
fn short_text() -> impl Strategy<Value = String> {
    "\\PC{0,40}".prop_filter("at most 255 bytes", |s| s.len() <= 255)
}

/// A `Hello` body, written by hand from the documented layout.
fn body(version: u16, max_frame: u32, name: &str, creds: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&max_frame.to_le_bytes());
    b.push(name.len() as u8);
    b.extend_from_slice(name.as_bytes());
    if let Some((token, session)) = creds {
        b.push(token.len() as u8);
        b.extend_from_slice(token.as_bytes());
        b.extend_from_slice(session);
    }
    b
}

fn decode(body: &[u8]) -> Result<Frame, DecodeError> {
    Frame::decode(kind::HELLO, Bytes::copy_from_slice(body))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_v2_hello_decodes_from_the_documented_layout_and_encodes_back_to_it(
        max_frame in any::<u32>(),
        name in short_text(),
        token in short_text(),
        session in any::<[u8; SESSION_ID_LEN]>(),
    ) {
        let bytes = body(2, max_frame, &name, Some((&token, &session)));
        let want = Frame::Hello { version: 2, max_frame, name, token, proof: None, session };
        prop_assert_eq!(decode(&bytes), Ok(want.clone()));
        let mut out = bytes::BytesMut::new();
        want.encode(&mut out).expect("encodes");
        prop_assert_eq!(&out[5..], &bytes[..]);
    }

    #[test]
    fn a_hello_of_another_version_decodes_its_frozen_prefix_whatever_follows(
        version in any::<u16>().prop_filter("not spoken", |v| {
            !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(v)
        }),
        max_frame in any::<u32>(),
        name in short_text(),
        tail in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = body(version, max_frame, &name, None);
        bytes.extend_from_slice(&tail);
        prop_assert_eq!(
            decode(&bytes),
            Ok(Frame::Hello {
                version,
                max_frame,
                name,
                token: String::new(),
                proof: None,
                session: [0; SESSION_ID_LEN],
            })
        );
    }

    #[test]
    fn a_spoken_hello_with_extra_bytes_is_refused_counting_them(
        v2 in any::<bool>(),
        name in short_text(),
        extra in prop::collection::vec(any::<u8>(), 1..32),
    ) {
        let creds = v2.then_some(("t", &[3u8; SESSION_ID_LEN][..]));
        let mut bytes = body(if v2 { 2 } else { 1 }, 4096, &name, creds);
        bytes.extend_from_slice(&extra);
        prop_assert_eq!(
            decode(&bytes),
            Err(DecodeError::TrailingBytes { what: "Hello", count: extra.len() })
        );
    }

    #[test]
    fn a_v2_hello_cut_anywhere_is_refused_naming_the_field(
        name in short_text(),
        token in short_text(),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = body(2, 4096, &name, Some((&token, &[9; SESSION_ID_LEN])));
        let at = cut.index(bytes.len());
        let what = match decode(&bytes[..at]) {
            Err(DecodeError::Truncated { what, .. }) => what,
            other => return Err(TestCaseError::fail(format!("cut at {at}: {other:?}"))),
        };
        let token_at = 4 + 2 + 4 + 1 + name.len();
        let expected = match at {
            0..=3 => "magic",
            4..=5 => "version",
            6..=9 => "max frame",
            _ if at < token_at => "client name",
            _ if at < token_at + 1 + token.len() => "token",
            _ => "session id",
        };
        prop_assert_eq!(what, expected, "cut at {}", at);
    }

    #[test]
    fn a_v3_hello_decodes_from_the_documented_layout_and_encodes_back_to_it(
        max_frame in any::<u32>(),
        name in short_text(),
        tag in prop::option::of((any::<[u8; 32]>(), any::<[u8; 32]>())),
        session in any::<[u8; SESSION_ID_LEN]>(),
    ) {
        let bytes = v3_body(max_frame, &name, tag, &session);
        let want = Frame::Hello {
            version: 3,
            max_frame,
            name,
            token: String::new(),
            proof: tag.map(|(nonce, tag)| Box::new(TokenTag { nonce, tag })),
            session,
        };
        prop_assert_eq!(decode(&bytes), Ok(want.clone()));
        let mut out = bytes::BytesMut::new();
        want.encode(&mut out).expect("encodes");
        prop_assert_eq!(&out[5..], &bytes[..]);
    }

    #[test]
    fn a_v3_hello_cut_anywhere_or_with_a_bad_credential_kind_is_refused_naming_the_field(
        name in short_text(),
        cut in any::<prop::sample::Index>(),
        kind_byte in 2u8..,
    ) {
        let bytes = v3_body(4096, &name, Some(([1; 32], [2; 32])), &[9; SESSION_ID_LEN]);
        let at = cut.index(bytes.len());
        let what = match decode(&bytes[..at]) {
            Err(DecodeError::Truncated { what, .. }) => what,
            other => return Err(TestCaseError::fail(format!("cut at {at}: {other:?}"))),
        };
        let cred_at = 4 + 2 + 4 + 1 + name.len();
        let expected = match at {
            0..=3 => "magic",
            4..=5 => "version",
            6..=9 => "max frame",
            _ if at < cred_at => "client name",
            _ if at == cred_at => "credential kind",
            _ if at < cred_at + 1 + 32 => "token nonce",
            _ if at < cred_at + 1 + 64 => "token tag",
            _ => "session id",
        };
        prop_assert_eq!(what, expected, "cut at {}", at);
        let mut bad = bytes.clone();
        bad[cred_at] = kind_byte;
        let refused = matches!(
            decode(&bad),
            Err(DecodeError::BadValue { what: "credential kind", .. })
        );
        prop_assert!(refused);
    }
}

/// A version-3 `Hello` body, written by hand from the documented layout.
fn v3_body(
    max_frame: u32,
    name: &str,
    tag: Option<([u8; 32], [u8; 32])>,
    session: &[u8; SESSION_ID_LEN],
) -> Vec<u8> {
    let mut b = body(3, max_frame, name, None);
    match tag {
        None => b.push(0),
        Some((nonce, tag)) => {
            b.push(1);
            b.extend_from_slice(&nonce);
            b.extend_from_slice(&tag);
        }
    }
    b.extend_from_slice(session);
    b
}

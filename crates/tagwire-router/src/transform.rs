//! Spatial scaling plug-ins (core's [`Transform`]) the router ships, and the
//! raw frame format of the image one.
//!
//! `downscale:N` (N = 2..=16) scales a raw image frame down by N in each
//! dimension with a box filter (`fast_image_resize`). A raw frame is a
//! 12-byte header — `u32` width, `u32` height (little-endian), `u8`
//! channels (1, 2, 3 or 4 bytes per pixel), 3 zero bytes — then
//! width × height × channels bytes of pixels, row by row. Anything else is
//! refused with a reason, for that subscriber alone. Cost: one pass over
//! the frame, which is at most the negotiated frame size.

use std::collections::HashMap;
use std::sync::Arc;

use fast_image_resize::images::Image;
use fast_image_resize::{PixelType, ResizeAlg, ResizeOptions, Resizer};
use tagwire_core::proxy::Transform;

/// Bytes before a raw frame's pixels.
pub const RAW_HEADER_LEN: usize = 12;

/// The plug-ins by name.
pub(crate) fn registry() -> HashMap<&'static str, Arc<dyn Transform>> {
    let mut m: HashMap<&'static str, Arc<dyn Transform>> = HashMap::new();
    m.insert("downscale", Arc::new(Downscale));
    m
}

/// Scales raw image frames down by an integer factor.
#[derive(Debug)]
pub struct Downscale;

fn factor(params: &str) -> Result<u32, String> {
    match params.parse::<u32>() {
        Ok(n) if (2..=16).contains(&n) => Ok(n),
        _ => Err(format!(
            "downscale:{params}: the factor must be 2..=16 (e.g. downscale:2)"
        )),
    }
}

/// A raw frame's header: (width, height, channels).
pub fn parse_raw(payload: &[u8]) -> Result<(u32, u32, u8), String> {
    if payload.len() < RAW_HEADER_LEN {
        return Err(format!(
            "not a raw frame: {} bytes, shorter than its 12-byte header",
            payload.len()
        ));
    }
    let w = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let h = u32::from_le_bytes([payload[4], payload[5], payload[6], payload[7]]);
    let c = payload[8];
    if !(1..=4).contains(&c) || payload[9..12] != [0, 0, 0] {
        return Err(format!(
            "not a raw frame: {c} channels (1..=4) or a non-zero reserved field"
        ));
    }
    let want = (w as u64) * (h as u64) * c as u64;
    if want != (payload.len() - RAW_HEADER_LEN) as u64 {
        return Err(format!(
            "raw frame {w}x{h}x{c} needs {want} pixel bytes, has {}",
            payload.len() - RAW_HEADER_LEN
        ));
    }
    if w == 0 || h == 0 {
        return Err("raw frame of zero width or height".into());
    }
    Ok((w, h, c))
}

/// Encodes a raw frame.
pub fn raw_frame(width: u32, height: u32, channels: u8, pixels: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(RAW_HEADER_LEN + pixels.len());
    v.extend_from_slice(&width.to_le_bytes());
    v.extend_from_slice(&height.to_le_bytes());
    v.extend_from_slice(&[channels, 0, 0, 0]);
    v.extend_from_slice(pixels);
    v
}

impl Transform for Downscale {
    fn name(&self) -> &'static str {
        "downscale"
    }

    fn check(&self, params: &str) -> Result<(), String> {
        factor(params).map(|_| ())
    }

    fn apply(&self, params: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        let n = factor(params)?;
        let (w, h, c) = parse_raw(payload)?;
        let pt = match c {
            1 => PixelType::U8,
            2 => PixelType::U8x2,
            3 => PixelType::U8x3,
            _ => PixelType::U8x4,
        };
        let (dw, dh) = ((w / n).max(1), (h / n).max(1));
        let src = Image::from_vec_u8(w, h, payload[RAW_HEADER_LEN..].to_vec(), pt)
            .map_err(|e| format!("raw frame: {e}"))?;
        let mut dst = Image::new(dw, dh, pt);
        Resizer::new()
            .resize(
                &src,
                &mut dst,
                &ResizeOptions::new()
                    .resize_alg(ResizeAlg::Convolution(fast_image_resize::FilterType::Box)),
            )
            .map_err(|e| format!("downscale: {e}"))?;
        Ok(raw_frame(dw, dh, c, dst.buffer()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_frame_scaled_down_by_two_averages_each_square() {
        // 4x2, one channel: two 2x2 squares of 10s and 30s.
        let f = raw_frame(4, 2, 1, &[10, 10, 30, 30, 10, 10, 30, 30]);
        let out = Downscale.apply("2", &f).expect("scaled");
        assert_eq!(parse_raw(&out), Ok((2, 1, 1)));
        assert_eq!(&out[RAW_HEADER_LEN..], &[10, 30]);
    }

    #[test]
    fn bad_frames_and_factors_are_refused_with_the_reason() {
        assert!(Downscale.check("1").unwrap_err().contains("2..=16"));
        assert!(Downscale.check("x").is_err());
        let e = Downscale.apply("2", b"short").unwrap_err();
        assert!(e.contains("12-byte header"), "{e}");
        let mut f = raw_frame(2, 2, 1, &[1, 2, 3, 4]);
        f.pop();
        assert!(Downscale
            .apply("2", &f)
            .unwrap_err()
            .contains("needs 4 pixel bytes"));
    }

    proptest! {
        #[test]
        fn any_payload_is_scaled_or_refused_never_a_panic(p in prop::collection::vec(any::<u8>(), 0..200), n in 0u32..20) {
            let _ = Downscale.apply(&n.to_string(), &p);
        }

        #[test]
        fn valid_frames_come_out_smaller_and_valid(w in 1u32..40, h in 1u32..40, c in 1u8..=4, n in 2u32..=16) {
            let f = raw_frame(w, h, c, &vec![7u8; (w * h) as usize * c as usize]);
            let out = Downscale.apply(&n.to_string(), &f).expect("a valid frame scales");
            let (ow, oh, oc) = parse_raw(&out).expect("valid output");
            prop_assert_eq!((ow, oh, oc), ((w / n).max(1), (h / n).max(1), c));
        }
    }
}

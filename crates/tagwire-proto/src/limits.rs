//! Protocol limits. Every length on the wire is checked against one of these
//! before anything is allocated or read.

/// Largest tag, in bytes.
pub const MAX_TAG_LEN: usize = 1024;
/// Largest endpoint, type, event or field name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Most filterable fields per event.
pub const MAX_FIELDS: usize = 256;
/// Largest pattern, QoS property value, error message or close reason, in
/// bytes (they carry a u16 length). Admin bodies are bounded by the frame size.
pub const MAX_TEXT_LEN: usize = 65_535;
/// Default maximum frame size (type byte + body), offered in the handshake.
pub const DEFAULT_MAX_FRAME: u32 = 16 * 1024 * 1024;
/// Largest maximum frame size either side may propose.
pub const HARD_MAX_FRAME: u32 = 256 * 1024 * 1024;
/// Smallest maximum frame size either side may propose.
pub const MIN_MAX_FRAME: u32 = 4096;

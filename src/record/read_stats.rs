//! What reading a recording met, beyond its records (the summary's `replay`).

/// What reading a recording met, beyond its records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReadStats {
    pub frames: u64,
    pub corrupt_frames: u64,
    /// Bytes skipped while looking for the next frame after a corrupt one.
    pub skipped_bytes: u64,
    /// Bytes of an incomplete last frame (file cut short or still being written).
    pub truncated_bytes: u64,
    /// Records of kinds this ebtop does not know (written by a newer minor version).
    pub unknown_records: u64,
    /// Records whose JSON did not parse.
    pub bad_records: u64,
    /// Items beyond the read budget's caps, skipped: the header's processes beyond 16,384
    /// and open sockets beyond 1,048,576 (docs/security.md, "Recordings").
    pub capped_items: u64,
}

//! The gateway's clock: every timestamp it records comes from [`now`].

use postern_core::Timestamp;

pub fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    )
}

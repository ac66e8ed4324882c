//! The baseline every durability figure is measured against: how many small appends, each
//! made durable with `fdatasync`, the disk under a directory takes per second.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Appends 512 B and `fdatasync`s, repeatedly for `duration`, in a scratch file in `dir`
/// (removed afterwards); returns appends per second.
pub fn fsync_rate(dir: &Path, duration: Duration) -> std::io::Result<f64> {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = [7u8; 512];
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < duration {
        f.write_all(&block)?;
        f.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(rate)
}

//! The witness file (`[audit.witness] file`): every checkpoint the gateway signs, appended as
//! one JSON line and fsync'd, outside the store. Whoever can write the database cannot reach
//! it (keep it on another volume, or ship it off the host); `postern audit verify --witness`
//! holds a store or an export to it, and the gateway's first signature after start-up
//! requires the store to still hold the last checkpoint it names.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use postern_audit::Checkpoint;
use postern_ledger::CheckpointSink;

/// Every checkpoint the file holds, in the order written. A line that is no checkpoint is an
/// error naming it: a witness is evidence, and evidence is not skipped over.
pub fn read(path: &Path) -> Result<Vec<Checkpoint>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading the witness {}", path.display())),
    };
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading the witness {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let c: Checkpoint = serde_json::from_str(&line).with_context(|| {
            format!(
                "the witness {} line {} is not a checkpoint",
                path.display(),
                i + 1
            )
        })?;
        out.push(c);
    }
    Ok(out)
}

/// The latest checkpoint of each chain in the file.
pub fn latest_per_chain(all: Vec<Checkpoint>) -> Vec<Checkpoint> {
    let mut latest: std::collections::BTreeMap<String, Checkpoint> = Default::default();
    for c in all {
        match latest.get(&c.chain) {
            Some(l) if l.seq >= c.seq => {}
            _ => {
                latest.insert(c.chain.clone(), c);
            }
        }
    }
    latest.into_values().collect()
}

/// The sink the ledger calls with each committed checkpoint: one line, fsync'd. A failed
/// write is an error in the log (the checkpoint is in the store all the same).
pub fn sink(path: PathBuf) -> Result<CheckpointSink> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening the witness {} to append", path.display()))?;
    let file = Arc::new(Mutex::new(file));
    Ok(CheckpointSink(Arc::new(move |c: &Checkpoint| {
        let written = serde_json::to_string(c)
            .map_err(std::io::Error::other)
            .and_then(|line| {
                let mut f = file.lock().map_err(|_| std::io::Error::other("poisoned"))?;
                f.write_all(format!("{line}\n").as_bytes())?;
                f.sync_data()
            });
        if let Err(e) = written {
            tracing::error!(
                "postern: checkpoint seq {} of chain {} could not be written to the witness {}: {e}",
                c.seq,
                c.chain,
                path.display()
            );
        }
    })))
}

//! The name of each upstream made from a server (its own when valid, else one made from it)
//! and its tools' prefix, none of which overlaps another's.

use std::collections::BTreeSet;

use anyhow::{anyhow, Result};

use crate::init::mcp_json::servers::Server;

/// The longest upstream name made here: its prefix leaves its tools' names room (a served name
/// is at most 64 characters).
const MAX_NAME: usize = 40;

/// An upstream name per server: its own when valid (1-MAX_NAME letters, digits, '_' or '-'),
/// else one made from it, unique, with a note.
pub(super) fn upstream_names(servers: &[Server], notes: &mut Vec<String>) -> Vec<String> {
    let valid = |n: &str| {
        (1..=MAX_NAME).contains(&n.len())
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    };
    let mut used: BTreeSet<String> = servers
        .iter()
        .map(|s| s.source.clone())
        .filter(|n| valid(n))
        .collect();
    let mut names = Vec::new();
    for s in servers {
        if valid(&s.source) {
            names.push(s.source.clone());
            continue;
        }
        let mut base: String = s
            .source
            .chars()
            .take(MAX_NAME)
            .map(
                |c| match c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                    true => c,
                    false => '_',
                },
            )
            .collect();
        if base.is_empty() {
            base = "server".into();
        }
        let mut name = base.clone();
        for n in 2.. {
            if !used.contains(&name) {
                break;
            }
            name = format!("{base}_{n}");
        }
        used.insert(name.clone());
        notes.push(format!("server {:?} is upstream {name:?} (an upstream's name is 1-{MAX_NAME} letters, digits, '_' or '-' here, so that its tools' names fit in 64)", s.source));
        names.push(name);
    }
    names
}

/// Each upstream's tool-name prefix: `NAME_`, unless that would begin another's prefix or
/// another's would begin it (two tools could get one name, which the gateway refuses); then
/// `NAME2_`, `NAME3_`… Longer names choose first, so a choice always exists.
pub(super) fn prefixes(names: &[String], notes: &mut Vec<String>) -> Result<Vec<String>> {
    let overlap = |a: &str, b: &str| a.starts_with(b) || b.starts_with(a);
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(names[i].len()));
    let mut chosen: Vec<Option<String>> = vec![None; names.len()];
    for i in order {
        let name = &names[i];
        let taken: Vec<String> = chosen.iter().flatten().cloned().collect();
        let prefix = std::iter::once(format!("{name}_"))
            .chain((2..1000).map(|k| format!("{name}{k}_")))
            .find(|p| !taken.iter().any(|t| overlap(p, t)))
            .ok_or_else(|| {
                anyhow!("no tool prefix for upstream {name:?} (a bug of postern init)")
            })?;
        if prefix != format!("{name}_") {
            notes.push(format!("upstream {name:?} serves its tools as {prefix}<tool>: {name}_ would overlap another upstream's prefix"));
        }
        chosen[i] = Some(prefix);
    }
    Ok(chosen.into_iter().flatten().collect())
}

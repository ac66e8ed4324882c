//! The environment variables the config reads its secrets from: their names
//! (`POSTERN_UP_<UPSTREAM>_<KEY>`, each given once), and what is printed of each value (whole,
//! or masked when it may be a secret).

use std::collections::BTreeSet;

use crate::init::mcp_json::{AGENT_TOKEN_VAR, OPERATOR_TOKEN_VAR};

/// An environment variable `postern serve` needs: its name, where its value is in the file, and
/// what is printed of the value (all of it when it does not look secret, else a hint that does
/// not give it away).
pub(super) struct Export {
    pub(super) var: String,
    pub(super) origin: String,
    pub(super) shown: Shown,
    /// The value itself, for `init`'s own start of the server (never printed or written).
    pub(super) value: String,
}

/// What is printed of a variable's value.
pub(super) enum Shown {
    Whole(String),
    Masked(String),
}

/// Names of environment variables, each given once.
#[derive(Default)]
pub(super) struct Vars(BTreeSet<String>);

impl Vars {
    /// `POSTERN_UP_<UPSTREAM>_<KEY>`, uppercase, anything but letters and digits '_' (with
    /// `_2`, `_3`… when two would be the same).
    pub(super) fn take(&mut self, upstream: &str, key: &str) -> String {
        let part = |s: &str| -> String {
            s.chars()
                .map(|c| match c.is_ascii_alphanumeric() {
                    true => c.to_ascii_uppercase(),
                    false => '_',
                })
                .collect()
        };
        let base = format!("POSTERN_UP_{}_{}", part(upstream), part(key));
        let mut var = base.clone();
        for n in 2.. {
            if var != AGENT_TOKEN_VAR && var != OPERATOR_TOKEN_VAR && self.0.insert(var.clone()) {
                break;
            }
            var = format!("{base}_{n}");
        }
        var
    }
}

/// Words in a variable's name that say its value is a secret.
const SECRET_WORDS: [&str; 9] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASS",
    "AUTH",
    "CREDENTIAL",
    "PRIVATE",
    "COOKIE",
    "SESSION",
];

/// What is printed of `key`'s value: a path or a number whole, unless the key's name sounds
/// secret (the operator needs them as they are, and they give nothing away); else its start.
pub(super) fn shown(key: &str, value: &str) -> Shown {
    let upper = key.to_ascii_uppercase();
    let secret_key = SECRET_WORDS.iter().any(|w| upper.contains(w));
    let path = ["/", "~/", "./", "../"]
        .iter()
        .any(|p| value.starts_with(p))
        && !value.contains(['?', '@', '='])
        && !value.chars().any(|c| c.is_control());
    let number = !value.is_empty() && value.len() <= 8 && value.bytes().all(|b| b.is_ascii_digit());
    match !secret_key && (path || number) {
        true => Shown::Whole(value.to_string()),
        false => Shown::Masked(masked(value)),
    }
}

/// The start of a value, enough to recognise it and not enough to use it: its first two
/// characters when it is long and they are plain, else nothing.
pub(super) fn masked(value: &str) -> String {
    let start: String = value.chars().take(2).collect();
    let plain = start
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-_.:".contains(c));
    match value.chars().count() >= 8 && plain {
        true => format!("{start}…"),
        false => "…".into(),
    }
}

//! Tokens already verified, so a client that sends the same access token on every request pays
//! for its signature (or its introspection) once, not per call: the principal is kept under a
//! SHA-256 of the token and the resource, until the token would stop being accepted (its `exp`
//! plus the issuer's leeway) and never longer than [`LONGEST_BELIEF`]: a token the issuer
//! revokes stops working within that, and a token signed by a key it withdraws within that
//! after the key set is fetched again. The token itself is never kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postern_core::config::{Principal, LONGEST_BELIEF};

/// Entries held at most; past it the expired go, and if none has, all of them (a refill costs
/// one verification per client, and only a signer could mint that many valid tokens).
const CAPACITY: usize = 16_384;

/// How long an opaque token the provider refused is refused without asking again (a client
/// that retries a dead token, or a flood of made-up ones, is not turned into requests to the
/// provider).
pub(crate) const REFUSED_FOR: Duration = Duration::from_secs(30);

pub(crate) struct Verified {
    entries: Mutex<HashMap<[u8; 32], (Principal, u64)>>,
    /// Opaque tokens the provider refused, until when.
    refused: Mutex<HashMap<[u8; 32], u64>>,
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn key(token: &str, resource: &str) -> [u8; 32] {
    postern_core::digest::sha256_of(&[resource.as_bytes(), &[0], token.as_bytes()])
}

impl Verified {
    pub(crate) fn new() -> Verified {
        Verified {
            entries: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the provider refused `token` for `resource` within [`REFUSED_FOR`].
    pub(crate) fn was_refused(&self, token: &str, resource: &str) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused
            .get(&key(token, resource))
            .is_some_and(|until| *until > now_secs())
    }

    /// Remembers that the provider refused `token` for `resource`.
    pub(crate) fn refuse(&self, token: &str, resource: &str) {
        let now = now_secs();
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if refused.len() >= CAPACITY {
            refused.retain(|_, until| *until > now);
            if refused.len() >= CAPACITY {
                refused.clear();
            }
        }
        refused.insert(key(token, resource), now + REFUSED_FOR.as_secs());
    }

    /// The principal `token` was verified as for `resource`, if that is still good.
    pub(crate) fn get(&self, token: &str, resource: &str) -> Option<Principal> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let (principal, until) = entries.get(&key(token, resource))?;
        (*until > now_secs()).then(|| principal.clone())
    }

    /// Keeps `principal` for `token` until `until` (unix seconds), at most [`LONGEST_BELIEF`] from now.
    pub(crate) fn keep(&self, token: &str, resource: &str, principal: &Principal, until: u64) {
        let now = now_secs();
        let until = until.min(now + LONGEST_BELIEF.as_secs());
        if until <= now {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            entries.retain(|_, (_, u)| *u > now);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(key(token, resource), (principal.clone(), until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal() -> Principal {
        Principal {
            issuer: "https://id".into(),
            subject: "s".into(),
            client_id: None,
            groups: vec![],
            scopes: vec![],
        }
    }

    #[test]
    fn a_token_is_kept_per_resource_and_never_past_its_end() {
        let v = Verified::new();
        let now = now_secs();
        v.keep("t1", "https://gw/mcp", &principal(), now + 60);
        assert!(v.get("t1", "https://gw/mcp").is_some());
        assert!(v.get("t1", "https://gw/ops").is_none(), "another resource");
        assert!(v.get("t2", "https://gw/mcp").is_none(), "another token");
        v.keep("old", "r", &principal(), now);
        assert!(v.get("old", "r").is_none(), "an expired token is not kept");
        v.keep("long", "r", &principal(), now + 86_400);
        let until = v.entries.lock().unwrap()[&key("long", "r")].1;
        assert!(until <= now + LONGEST_BELIEF.as_secs() + 1);
    }
}

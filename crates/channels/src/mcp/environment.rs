//! What a stdio upstream's process receives of the environment: a safe base inherited from the
//! gateway, then its own `env` table — never anything else. The gateway's environment holds
//! actors' and operators' tokens, credentials' secrets and keys; a third-party server (one with
//! a tool that prints its environment, say) must see none of them.

use std::collections::BTreeMap;

use crate::secret::Secret;

/// The variables of the gateway's environment a stdio upstream inherits when they are set: those
/// the official MCP SDKs pass to a server by default (`HOME`, `LOGNAME`, `PATH`, `SHELL`, `TERM`,
/// `USER`), and the locale (`LANG`, `LANGUAGE`, `TZ` and every `LC_*`).
pub const INHERITED_ENV: [&str; 9] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LANGUAGE", "TZ",
];

fn inherited(var: &str) -> bool {
    INHERITED_ENV.contains(&var) || var.starts_with("LC_")
}

/// The whole environment of an upstream's process: the inherited part of `gateway` (the
/// gateway's own variables) with `configured` over it.
pub fn child_environment(
    gateway: impl IntoIterator<Item = (String, String)>,
    configured: &BTreeMap<String, Secret>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        gateway.into_iter().filter(|(k, _)| inherited(k)).collect();
    for (k, v) in configured {
        env.insert(k.clone(), v.expose().to_string());
    }
    env
}

/// The names (never the values) of the variables an upstream's process receives now.
pub fn environment_names(configured: &BTreeMap<String, Secret>) -> Vec<String> {
    child_environment(std::env::vars(), configured)
        .into_keys()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_safe_base_and_the_configured_variables_pass() {
        let gateway = [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("LC_TIME", "C"),
            ("ALICE_OPERATOR_TOKEN", "op-secret"),
            ("BANK_TOKEN", "bank-secret"),
            ("POSTERN_TOKEN", "agent-secret"),
            ("BOOKS_MODE", "from-gateway"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let configured = BTreeMap::from([
            ("BOOKS_MODE".to_string(), Secret::new("production")),
            ("BOOKS_API_KEY".to_string(), Secret::new("k")),
        ]);
        let env = child_environment(gateway, &configured);
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["BOOKS_API_KEY", "BOOKS_MODE", "HOME", "LC_TIME", "PATH"]
        );
        assert_eq!(env["BOOKS_MODE"], "production");
    }
}

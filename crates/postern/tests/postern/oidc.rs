//! A certified OpenID provider for the identity tests (issue 50): panva's `oidc-provider`,
//! pinned in `tests/interop/package.json` and hosted by `tests/interop/oidc_provider.mjs` on a
//! loopback port, killed when dropped. Its options (resources, opaque tokens, the person signed
//! in, extra clients, registration) are the script's OPTIONS_JSON.

use serde_json::Value;

pub struct OidcProvider {
    child: std::process::Child,
    pub issuer: String,
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port (the provider's, chosen before the gateway that names it starts).
pub use postern_testkit::ports::free_port;

impl OidcProvider {
    /// On `port`, with the confidential client `client_id` (client credentials) issuing tokens
    /// for `resource`, and `options`.
    pub fn start_on(
        port: u16,
        resource: &str,
        client_id: &str,
        secret: &str,
        options: Value,
    ) -> OidcProvider {
        use std::io::BufRead;
        let node = crate::foreign::NodeClients::require();
        let script = crate::foreign::repo_root().join("tests/interop/oidc_provider.mjs");
        let mut command = node.node(&script);
        command
            .arg(node.package("oidc-provider"))
            .args([&port.to_string(), resource, client_id, secret])
            .arg(options.to_string())
            .stdout(std::process::Stdio::piped());
        let mut child = command.spawn().expect("node runs oidc_provider.mjs");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("listening"), "oidc-provider: {line:?}");
        OidcProvider {
            child,
            issuer: format!("http://127.0.0.1:{port}"),
        }
    }
}

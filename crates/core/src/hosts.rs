//! The hosts a browser-reachable request may name in `Host` (the rule against DNS rebinding):
//! the front hands the list to rmcp for `/mcp`, the console applies it to its pages.

/// The loopback names and the host of `[gateway] listen`.
pub fn allowed_hosts(listen: &str) -> Vec<String> {
    let mut hosts: Vec<String> = vec![
        "localhost".into(),
        "127.0.0.1".into(),
        "::1".into(),
        "[::1]".into(),
    ];
    if let Some((host, _)) = listen.rsplit_once(':') {
        hosts.push(host.to_string());
    }
    hosts
}

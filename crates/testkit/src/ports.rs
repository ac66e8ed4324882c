//! A free loopback port for a server a test starts in another process (sshd, HAProxy, an
//! OpenID provider), chosen before that server binds it.
//!
//! Taken below the kernel's ephemeral range (`ip_local_port_range`): a port from that range
//! (`bind(":0")`) is handed out again to the next `bind(":0")` or outgoing connection of any
//! test running beside, which then takes it before the server does (a CI run saw the OpenID
//! provider fail with `EADDRINUSE`). Below the range only an explicit bind can take it.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;

/// How many ports below the ephemeral range are drawn from.
const SPAN: u16 = 10_000;

/// A port free now on 127.0.0.1, outside the kernel's ephemeral range.
pub fn free_port() -> u16 {
    let low = ephemeral_low();
    let from = low.saturating_sub(SPAN).max(1024);
    for _ in 0..1000 {
        let port = from + (random() % u64::from(low - from)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {from}..{low}");
}

/// The first port of the ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|low| *low > 1024 + SPAN / 10)
        .unwrap_or(32768)
}

/// A random number (each `RandomState` is seeded afresh).
fn random() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(u64::from(std::process::id()));
    hasher.finish()
}

#[cfg(test)]
mod tests {
    /// Each port drawn is in the range and can be bound. A port is only free when it was
    /// looked at: another process on the machine may bind it in between (a CI run saw
    /// `EADDRINUSE` once on the bind right after the draw), so a draw that loses such a race
    /// is drawn again, a few times at most; a `free_port` that handed out ports in use would
    /// lose every time.
    #[test]
    fn a_port_is_free_and_below_the_ephemeral_range() {
        let low = super::ephemeral_low();
        for _ in 0..20 {
            let mut lost = Vec::new();
            loop {
                let port = super::free_port();
                assert!(port < low && port >= 1024, "{port}");
                match std::net::TcpListener::bind(("127.0.0.1", port)) {
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && lost.len() < 3 => {
                        lost.push(port);
                    }
                    Err(e) => panic!("{port} is not free: {e} (lost before: {lost:?})"),
                }
            }
        }
    }
}

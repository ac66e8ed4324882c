//! The PROXY protocol (HAProxy's, v1 and v2) from trusted load balancers (issue 49): behind a
//! load balancer every connection comes from its address, so the per-address cap would cap the
//! whole gateway and say nothing of the real clients. A connection from a `[gateway]
//! trusted_proxies` network must start with a PROXY header, and the client address it carries
//! is the connection's; a connection from anywhere else that starts with one is refused (a
//! client must not choose the address it is counted under). Parsing is the `ppp` crate's.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ppp::v1::Addresses as V1;
use ppp::v2::{Addresses as V2, Command};
use ppp::{HeaderResult, PartialResult};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The most a header may take: v2's 16 bytes and at most 65,535 of addresses and TLVs.
const MOST: usize = 16 + 65_535;
/// v2's signature (a v1 header starts with `PROXY `).
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The networks whose connections start with a PROXY header.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Arc<[postern_core::config::IpNet]>);

impl TrustedProxies {
    pub fn new(networks: &[postern_core::config::IpNet]) -> TrustedProxies {
        TrustedProxies(networks.into())
    }

    pub fn trusts(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|n| n.contains(&address))
    }
}

/// Reads the PROXY header a trusted proxy sends first (within `within`) and consumes it: the
/// client's address, or the proxy's own for a header that names none (v2 `LOCAL`, a health
/// check; v1 `UNKNOWN`).
pub async fn client_address(
    tcp: &mut TcpStream,
    proxy: IpAddr,
    within: Duration,
) -> Result<IpAddr, String> {
    let read = async {
        let mut buf = vec![0u8; 256];
        loop {
            let n = tcp.peek(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the connection closed before its PROXY header".to_string());
            }
            let parsed = HeaderResult::parse(&buf[..n]);
            if parsed.is_incomplete() {
                if n == buf.len() {
                    if n >= MOST {
                        return Err("its PROXY header is longer than the protocol allows".into());
                    }
                    buf.resize((n * 4).min(MOST), 0);
                } else {
                    // More of the header is on its way: peek again shortly.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                continue;
            }
            let (length, client) = match parsed {
                HeaderResult::V1(Ok(h)) => (h.header.len(), v1_source(h.addresses)),
                HeaderResult::V2(Ok(h)) => (h.len(), v2_source(h.command, h.addresses)),
                HeaderResult::V1(Err(e)) => return Err(format!("no PROXY header ({e})")),
                HeaderResult::V2(Err(e)) => return Err(format!("no valid PROXY header ({e})")),
            };
            let mut header = vec![0u8; length];
            tcp.read_exact(&mut header)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(client.unwrap_or(proxy).to_canonical());
        }
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or_else(|_| Err(format!("no PROXY header within {within:?}")))
}

fn v1_source(addresses: V1) -> Option<IpAddr> {
    match addresses {
        V1::Tcp4(a) => Some(a.source_address.into()),
        V1::Tcp6(a) => Some(a.source_address.into()),
        V1::Unknown => None,
    }
}

fn v2_source(command: Command, addresses: V2) -> Option<IpAddr> {
    match (command, addresses) {
        (Command::Proxy, V2::IPv4(a)) => Some(a.source_address.into()),
        (Command::Proxy, V2::IPv6(a)) => Some(a.source_address.into()),
        _ => None,
    }
}

/// Whether what a client sent first is a PROXY header (refused from an address not trusted).
pub async fn starts_with_header(tcp: &TcpStream) -> bool {
    let mut first = [0u8; 12];
    let n = tcp.peek(&mut first).await.unwrap_or(0);
    first[..n].starts_with(b"PROXY ") || first[..n] == V2_SIGNATURE[..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_or_an_address_is_trusted_and_nothing_else() {
        let trusted = TrustedProxies::new(&[
            "10.0.0.0/8".parse().unwrap(),
            "127.0.0.1/32".parse().unwrap(),
        ]);
        assert!(trusted.trusts("10.1.2.3".parse().unwrap()));
        assert!(trusted.trusts("127.0.0.1".parse().unwrap()));
        // An IPv4 address as IPv6 (a dual-stack socket) is the same address.
        assert!(trusted.trusts("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!trusted.trusts("127.0.0.2".parse().unwrap()));
        assert!(!TrustedProxies::default().trusts("127.0.0.1".parse().unwrap()));
    }
}

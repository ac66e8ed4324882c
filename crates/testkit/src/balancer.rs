//! A real load balancer in front of gateway replicas: Debian's HAProxy (`scripts/test`
//! installs it), started with a generated config on a free loopback port, round-robin or
//! sticky by the `Mcp-Session-Id` header (learnt from the response that created the session).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ports::free_port;

const HAPROXY: &str = "/usr/sbin/haproxy";

/// How requests are spread over the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// Each request to the next replica: one MCP session's requests land everywhere.
    RoundRobin,
    /// A session's requests to the replica that answered its `initialize`.
    StickyBySession,
}

/// A running HAProxy; dropping it stops it.
pub struct Haproxy {
    pub addr: SocketAddr,
    child: Child,
    dir: PathBuf,
}

/// The address [`Haproxy::start`] connects to the replicas from, each connection opened with a
/// PROXY protocol v2 header naming its client: the replicas' `[gateway] trusted_proxies`. A test
/// that reaches a replica directly (from 127.0.0.1) is not taken for the balancer.
pub const PROXY_SOURCE: &str = "127.0.0.9";

impl Haproxy {
    /// Balances over `replicas` (`127.0.0.1:PORT` each). Panics with what to install when
    /// HAProxy is missing: a balancer test never passes by not running.
    pub fn start(replicas: &[&str], balance: Balance) -> Haproxy {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("postern-haproxy-{}-{port}", std::process::id()));
        let mut backend = String::from("backend gateways\n  balance roundrobin\n");
        if balance == Balance::StickyBySession {
            backend.push_str(
                "  stick-table type string len 128 size 10k expire 30m\n  stick on req.hdr(mcp-session-id)\n  stick store-response res.hdr(mcp-session-id)\n",
            );
        }
        for (i, r) in replicas.iter().enumerate() {
            backend.push_str(&format!(
                "  server g{i} {r} send-proxy-v2 source {PROXY_SOURCE}\n"
            ));
        }
        let config = format!(
            "global\n  maxconn 4096\ndefaults\n  mode http\n  retries 2\n  option redispatch\n  timeout connect 2s\n  timeout client 120s\n  timeout server 120s\n  timeout http-request 10s\nfrontend mcp\n  bind 127.0.0.1:{port}\n  default_backend gateways\n{backend}"
        );
        Haproxy::spawn(&config, port, dir)
    }

    /// Passes TCP connections to `gateway` (`127.0.0.1:PORT`) one for one, each opened with a
    /// PROXY protocol v2 header naming the client's address (`send-proxy-v2`), as a load
    /// balancer in front of a gateway with `trusted_proxies` does.
    pub fn proxy_v2(gateway: &str) -> Haproxy {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("postern-haproxy-pp-{}-{port}", std::process::id()));
        let config = format!(
            "global\n  maxconn 4096\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 120s\n  timeout server 120s\nfrontend mcp\n  bind 127.0.0.1:{port}\n  default_backend gateways\nbackend gateways\n  server g0 {gateway} send-proxy-v2\n"
        );
        Haproxy::spawn(&config, port, dir)
    }

    fn spawn(config: &str, port: u16, dir: PathBuf) -> Haproxy {
        assert!(
            std::path::Path::new(HAPROXY).exists(),
            "{HAPROXY} is missing: install Debian's haproxy (scripts/test does)"
        );
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, config).unwrap();
        let mut child = Command::new(HAPROXY)
            .args(["-db", "-f", file.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Haproxy { addr, child, dir };
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("haproxy did not listen on {addr}");
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

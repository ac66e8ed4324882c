//! A real OpenSSH `sshd` on a loopback port with a throw-away config, host key and
//! authorized key (all in the test's directory), and a TCP proxy in front of anything that
//! can cut every connection through it on demand.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::ports::free_port;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running sshd. Killed on drop.
pub struct Sshd {
    child: Child,
    pub port: u16,
    /// The host's public key line (`ssh-ed25519 AAAA…`), for `host_key`.
    pub host_key: String,
    /// The client's private key (OpenSSH format) the server accepts.
    pub client_key: PathBuf,
    /// The user it logs in (the one running the tests).
    pub user: String,
}

/// `ssh-keygen -t TYPE` into `path` (no passphrase); returns the public key line.
pub fn keygen(path: &Path, kind: &str) -> String {
    let _ = std::fs::remove_file(path);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", kind, "-N", "", "-C", "postern-test", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen (Debian package openssh-client) is installed");
    assert!(status.success(), "ssh-keygen failed");
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

fn sshd_binary() -> &'static str {
    for candidate in ["/usr/sbin/sshd", "/usr/bin/sshd"] {
        if Path::new(candidate).exists() {
            return candidate;
        }
    }
    panic!("sshd is not installed: apt-get install -y openssh-server (.ci/run does)");
}

impl Sshd {
    /// Starts sshd in `dir` (its keys and config there) on a free loopback port.
    pub fn start(dir: &Path) -> Sshd {
        let dir = dir.join("sshd");
        std::fs::create_dir_all(&dir).unwrap();
        let host_key = keygen(&dir.join("host_ed25519"), "ed25519");
        let client_key = dir.join("client_ed25519");
        let client_public = keygen(&client_key, "ed25519");
        std::fs::write(dir.join("authorized_keys"), format!("{client_public}\n")).unwrap();
        // sshd's privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let port = free_port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {keys}\nPidFile {pid}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\nMaxSessions 64\nMaxStartups 64:30:128\nLogLevel ERROR\n",
            host = dir.join("host_ed25519").display(),
            keys = dir.join("authorized_keys").display(),
            pid = dir.join("sshd.pid").display(),
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        let mut child = Command::new(sshd_binary())
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // sshd writes its pid file once it listens.
        for _ in 0..400 {
            if dir.join("sshd.pid").exists() {
                let user = std::env::var("USER")
                    .ok()
                    .filter(|u| !u.is_empty())
                    .unwrap_or_else(whoami);
                return Sshd {
                    child,
                    port,
                    host_key,
                    client_key,
                    user,
                };
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("sshd did not start listening on 127.0.0.1:{port}");
    }
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy on loopback to `target`; [`CutProxy::cut`] drops every connection through it
/// (new ones are still accepted).
pub struct CutProxy {
    pub port: u16,
    cut: watch::Sender<u64>,
    /// How many connections it has carried.
    pub connections: Arc<Mutex<u64>>,
}

impl CutProxy {
    /// Must be called inside a tokio runtime.
    pub async fn start(target_port: u16) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, watching) = watch::channel(0u64);
        let connections = Arc::new(Mutex::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                *counted.lock().unwrap() += 1;
                let mut watching = watching.clone();
                watching.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target_port)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watching.changed() => {}
                    }
                });
            }
        });
        CutProxy {
            port,
            cut,
            connections,
        }
    }

    /// Drops every connection open through the proxy now.
    pub fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

//! A PostgreSQL cluster of a test's (or a chaos run's) own, on a free loopback port, so it can
//! be restarted without touching the machine's shared cluster or other tests.

use std::path::PathBuf;
use std::process::Command;

/// A PostgreSQL cluster of the test's own (the machine's shared one is never restarted under
/// other tests), run as the `postgres` user; stopped and removed when dropped.
pub struct PrivatePostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let version = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries (Debian's postgresql package)")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .max()
            .unwrap();
        let bin = version.join("bin");
        let dir = std::env::temp_dir().join(format!(
            "postern-pg-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap()
            .success());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = PrivatePostgres { dir, bin, port };
        pg.as_postgres(
            "initdb",
            &[
                "-D",
                &pg.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        pg.pg_ctl("start");
        pg
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn as_postgres(&self, tool: &str, args: &[&str]) {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(tool))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pg_ctl start|restart|stop` (fast shutdown: sessions are ended, as in a real restart).
    pub fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        self.as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-m",
                "fast",
                "-w",
                action,
            ],
        );
    }

    /// The admin URL (database `postgres`).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

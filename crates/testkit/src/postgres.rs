//! A PostgreSQL cluster of a test's (or a chaos run's) own, on a free loopback port, so it can
//! be restarted without touching the machine's shared cluster or other tests; and fresh
//! databases on the machine's shared cluster ([`FreshDatabase`]) that no run leaves behind.

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

/// The machine's PostgreSQL that tests use: `POSTERN_TEST_PG`, or the local cluster's
/// `postgres` database (the admin URL [`FreshDatabase::create`] takes).
pub fn test_admin_url() -> String {
    std::env::var("POSTERN_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A new, empty database on a shared PostgreSQL, named `{prefix}_{pid}_{n}_{nanos}` so it is
/// told apart from every other test's and its creator can be found again. Dropped with the
/// guard; what a process never dropped (a test that keeps its URL as a string, a run killed
/// mid-way) is dropped by the next creation with the same prefix once that process is gone, so
/// the machine's cluster does not fill up run after run.
pub struct FreshDatabase {
    /// The admin URL it was created through (database `postgres`).
    admin: String,
    name: String,
}

impl FreshDatabase {
    /// Creates it through `admin`, a URL of the cluster's `postgres` database (psql's).
    pub fn create(admin: &str, prefix: &str) -> FreshDatabase {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Once per process and prefix: what finished processes left is gone after that.
        static REAPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        {
            let mut reaped = REAPED.lock().unwrap_or_else(|e| e.into_inner());
            if !reaped.iter().any(|p| p == prefix) {
                reap(admin, prefix);
                reaped.push(prefix.to_string());
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}_{}_{n}_{nanos}", std::process::id());
        psql(admin, &format!("CREATE DATABASE {name}")).unwrap_or_else(|e| {
            panic!("creating {name} (is PostgreSQL running? see .ci/run): {e}")
        });
        FreshDatabase {
            admin: admin.to_string(),
            name,
        }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        let base = self.admin.rsplit_once('/').map_or(&*self.admin, |(b, _)| b);
        format!("{base}/{}", self.name)
    }

    /// Its URL, the database left for the next creation to drop once this process is gone
    /// (for tests whose stores outlive any one value).
    pub fn keep(self) -> String {
        let url = self.url();
        std::mem::forget(self);
        url
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        // FORCE: a gateway that used it may still be closing its connections.
        let _ = psql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// Drops the databases of `prefix` whose creating process no longer runs.
fn reap(admin: &str, prefix: &str) {
    let pattern = format!("{}\\_%", prefix.replace('_', "\\_"));
    let Ok(names) = psql(
        admin,
        &format!("SELECT datname FROM pg_database WHERE datname LIKE '{pattern}'"),
    ) else {
        return;
    };
    for name in names.lines() {
        let pid = name[prefix.len() + 1..].split('_').next().unwrap_or("");
        let gone = pid
            .parse::<u32>()
            .is_ok_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if gone {
            let _ = psql(
                admin,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            );
        }
    }
}

/// Runs one statement through psql; its unaligned output, or what went wrong.
fn psql(admin: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args([admin, "-qAtc", sql])
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::{psql, test_admin_url as admin, FreshDatabase};

    fn exists(name: &str) -> bool {
        let found = psql(
            &admin(),
            &format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'"),
        )
        .expect("PostgreSQL must be running (see .ci/run)");
        found.trim() == "1"
    }

    #[test]
    fn a_fresh_database_is_dropped_with_its_guard_and_what_dead_processes_left_by_the_next() {
        let prefix = "postern_testkit_reap";
        // One a process that no longer runs left behind (no pid is 0), and one of a live
        // process (ours, as another test thread's would be).
        let dead = format!("{prefix}_0_0_1");
        let live = format!("{prefix}_{}_999_1", std::process::id());
        for name in [&dead, &live] {
            psql(&admin(), &format!("DROP DATABASE IF EXISTS {name}")).unwrap();
            psql(&admin(), &format!("CREATE DATABASE {name}")).unwrap();
        }

        let db = FreshDatabase::create(&admin(), prefix);
        let name = db.url().rsplit('/').next().unwrap().to_string();
        assert!(exists(&name), "{name} was created");
        assert!(!exists(&dead), "a dead process's database is dropped");
        assert!(exists(&live), "a live process's database is kept");
        drop(db);
        assert!(!exists(&name), "{name} is dropped with its guard");

        let kept = FreshDatabase::create(&admin(), prefix).keep();
        let kept = kept.rsplit('/').next().unwrap().to_string();
        assert!(exists(&kept), "a kept database outlives its guard");
        psql(&admin(), &format!("DROP DATABASE {kept}")).unwrap();
        psql(&admin(), &format!("DROP DATABASE {live}")).unwrap();
    }
}

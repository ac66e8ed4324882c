use std::os::unix::fs::symlink;

use super::*;

/// A fresh directory of its own under the system's temporary directory, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("sandbox-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir.canonicalize().unwrap())
    }

    fn make(&self, paths: &[&str]) {
        for p in paths {
            let path = self.0.join(p);
            match p.strip_suffix('/') {
                Some(_) => std::fs::create_dir_all(&path).unwrap(),
                None => std::fs::write(&path, "x").unwrap(),
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn granted(protected: &Protected, path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    Splitter {
        protected,
        visited: HashSet::new(),
    }
    .grant(path, &mut out);
    out.sort();
    out
}

#[test]
fn a_tree_holding_a_protected_path_is_granted_around_it() {
    let s = Scratch::new("split");
    s.make(&[
        "etc/",
        "etc/postern/",
        "etc/postern/postern.toml",
        "etc/ssl/",
        "etc/hosts",
        "srv/",
        "srv/ledger.db",
    ]);
    symlink(s.0.join("etc/postern"), s.0.join("etc/link-to-postern")).unwrap();
    let mut protected = Protected::default();
    protected.add(&s.0.join("etc/postern"), "the gateway's config directory");
    protected.add(
        &s.0.join("srv/ledger.db-wal"),
        "the store's write-ahead log",
    );
    assert_eq!(
        granted(&protected, &s.0.join("etc")),
        [s.0.join("etc/hosts"), s.0.join("etc/ssl")]
    );
    // The -wal file does not exist yet: the directory that will hold it is split now.
    assert_eq!(
        granted(&protected, &s.0.join("srv")),
        [s.0.join("srv/ledger.db")]
    );
    assert_eq!(
        granted(&protected, &s.0.join("etc/postern")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        granted(&protected, &s.0.join("etc/link-to-postern")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        granted(&protected, &s.0.join("missing")),
        Vec::<PathBuf>::new()
    );
}

#[test]
fn an_operators_entry_that_is_or_holds_a_protected_path_is_refused() {
    let s = Scratch::new("explicit");
    s.make(&["conf/", "conf/files/", "conf/signing.key", "data/"]);
    let mut protected = Protected::default();
    protected.add(&s.0.join("conf"), "the gateway's config directory");
    protected.add(&s.0.join("conf/signing.key"), "the signing key");
    for entry in [s.0.clone(), s.0.join("conf")] {
        let err = explicit("write", &entry, &protected)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("sandbox.write: "), "{err}");
        assert!(err.contains("the gateway's config directory"), "{err}");
    }
    // A directory of its own within the config directory holds nothing protected.
    assert_eq!(
        explicit("write", &s.0.join("conf/files"), &protected).unwrap(),
        s.0.join("conf/files")
    );
    assert_eq!(
        explicit("read", &s.0.join("data"), &protected).unwrap(),
        s.0.join("data")
    );
    let err = explicit("read", &s.0.join("nope"), &protected)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("sandbox.read: ") && err.contains("nope"),
        "{err}"
    );
}

#[test]
fn the_programs_directory_is_granted_unless_it_lies_in_a_protected_path() {
    let s = Scratch::new("program");
    s.make(&["bin/", "bin/server", "conf/", "conf/server.py"]);
    let mut protected = Protected::default();
    protected.add(&s.0.join("conf"), "the gateway's config directory");
    let server = s.0.join("bin/server");
    let spec = plan(
        &Allowance::default(),
        &protected,
        Launch {
            program: server.as_os_str(),
            path: None,
            cwd: None,
        },
        None,
        false,
    )
    .unwrap();
    assert!(spec.read.contains(&s.0.join("bin")), "{spec:?}");
    assert!(spec.read.iter().any(|p| p == Path::new("/usr")), "{spec:?}");
    assert!(
        spec.write.iter().any(|p| p == Path::new("/dev/null")),
        "{spec:?}"
    );
    let inside = Launch {
        program: OsStr::new("./server.py"),
        path: None,
        cwd: Some(&s.0.join("conf")),
    };
    let err = plan(&Allowance::default(), &protected, inside, None, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the gateway's config directory"), "{err}");
    // A directory of its own within the config directory, granted by the operator, runs.
    s.make(&["conf/upstream/", "conf/upstream/server"]);
    let allowance = Allowance {
        read: vec![s.0.join("conf/upstream")],
        write: Vec::new(),
    };
    let own = s.0.join("conf/upstream/server");
    let launch = Launch {
        program: own.as_os_str(),
        path: None,
        cwd: None,
    };
    let spec = plan(&allowance, &protected, launch, None, false).unwrap();
    assert!(spec.read.contains(&s.0.join("conf/upstream")), "{spec:?}");
}

//! An unprivileged user for tests of the upstreams' sandbox: a gateway started as root runs its
//! stdio upstreams as `nobody`, and a test may start the gateway itself as `nobody`. Either
//! way that user must be able to execute the programs and write the directories a test gives
//! it, where the build's own files (under a home directory of mode 0700) are out of its reach.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// `nobody`, the sandbox's default user (uid and gid 65534 on Debian and its kin).
pub const NOBODY: u32 = 65534;

/// Whether the test runs as root (then a gateway it starts runs its upstreams as [`NOBODY`]).
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Makes `path` (and everything under it) [`NOBODY`]'s, when the test runs as root, so that a
/// sandboxed upstream (or a gateway started as `nobody`) may write there; a test that does not
/// run as root leaves it its own, which is the gateway's and the upstream's user then.
pub fn give_to_nobody(path: &Path) {
    if !running_as_root() {
        return;
    }
    std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            give_to_nobody(&entry.unwrap().path());
        }
    }
}

/// Serialises the making of [`reachable`] copies within one test process.
static REACHABLE: Mutex<()> = Mutex::new(());

/// `binary` at a path every user may traverse and execute
/// (`$TMPDIR/postern-testkit-bin/NAME-SIZE-MTIME`): a hard link when the file system allows one
/// (the build is not copied again), else a copy. Made once per build of the binary; a link of
/// an earlier build is removed.
pub fn reachable(binary: &Path) -> PathBuf {
    let _one_at_a_time = REACHABLE.lock().unwrap_or_else(|e| e.into_inner());
    let meta = std::fs::metadata(binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let name = binary.file_name().unwrap().to_string_lossy().into_owned();
    let dir = std::env::temp_dir().join("postern-testkit-bin");
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&dir, 0o755);
    let target = dir.join(format!(
        "{name}-{}-{}",
        meta.len(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000
    ));
    if target.exists() {
        return target;
    }
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{name}-"))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    // Made under a name of its own, then renamed: another test process sees it whole or not.
    let partial = dir.join(format!(".{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&partial);
    if std::fs::hard_link(binary, &partial).is_err() {
        std::fs::copy(binary, &partial).unwrap();
    }
    set_mode(&partial, 0o755);
    std::fs::rename(&partial, &target).unwrap();
    target
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

//! The vault crate's integration tests: a real file on disk.

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

use postern_vault::{VaultError, VaultFile};

fn dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "postern-vault-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn secrets_round_trip_and_never_appear_in_the_file() {
    let d = dir();
    let path = d.join("postern.vault");
    let (mut vault, unlocked) = VaultFile::create("correct horse battery").unwrap();
    vault
        .set(&unlocked, "invoices-token", "sk_live_SECRET_4242")
        .unwrap();
    vault.write(&path, true).unwrap();
    let raw = std::fs::read_to_string(&path).unwrap();
    assert!(!raw.contains("SECRET_4242"), "plaintext in the file");
    assert!(!raw.contains("correct horse"), "passphrase in the file");
    assert!(raw.contains("invoices-token"), "names are in clear");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let read = VaultFile::read(&path).unwrap();
    assert_eq!(read.names(), ["invoices-token"]);
    let open = read.unlock("correct horse battery").unwrap();
    assert_eq!(
        open.get("invoices-token").unwrap().expose(),
        "sk_live_SECRET_4242"
    );
    assert!(matches!(open.get("other"), Err(VaultError::Missing(_))));
    assert!(!format!("{open:?}").contains("SECRET"));
    assert!(matches!(
        read.unlock("wrong passphrase"),
        Err(VaultError::WrongPassphrase)
    ));
    assert!(matches!(
        vault.write(&path, true),
        Err(VaultError::Exists(_))
    ));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_changed_file_is_refused_clearly() {
    let d = dir();
    let path = d.join("postern.vault");
    let (mut vault, unlocked) = VaultFile::create("pass").unwrap();
    vault.set(&unlocked, "a", "value-a").unwrap();
    vault.set(&unlocked, "b", "value-b").unwrap();
    vault.write(&path, true).unwrap();
    // Swapping two sealed entries: each is bound to its name.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let a = v["secrets"]["a"].clone();
    v["secrets"]["a"] = v["secrets"]["b"].clone();
    v["secrets"]["b"] = a;
    std::fs::write(&path, v.to_string()).unwrap();
    let swapped = VaultFile::read(&path).unwrap();
    assert!(matches!(
        swapped.unlock("pass"),
        Err(VaultError::Tampered(_))
    ));
    std::fs::write(&path, "{not json").unwrap();
    let err = VaultFile::read(&path).unwrap_err().to_string();
    assert!(err.contains("is not a Postern vault"), "{err}");
    assert!(matches!(
        VaultFile::create(""),
        Err(VaultError::EmptyPassphrase)
    ));
    assert!(matches!(
        vault.set(&unlocked, "bad name!", "x"),
        Err(VaultError::BadName(_))
    ));
    let _ = std::fs::remove_dir_all(&d);
}

//! The stdio upstreams' sandbox, from the binary's side: which paths of this configuration no
//! upstream may reach, each upstream's launcher (this binary's `sandbox-exec`, planned by
//! `postern_sandbox`), the kernel's support checked at start-up, and `sandbox-exec` itself.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use postern_channels::http::Secret;
use postern_channels::mcp::Launcher;
use postern_core::config::{Config, Sandbox, SecretRef};
use postern_core::contract::ChannelSpec;
use postern_sandbox::{Allowance, Launch, Protected, User};

/// The hidden subcommand that is the launcher: `postern sandbox-exec SPEC -- PROGRAM ARGS…`.
pub const SUBCOMMAND: &str = "sandbox-exec";

/// The sandbox's user when the gateway runs as root and the upstream names none.
const DEFAULT_USER: &str = "nobody";

/// `sandbox-exec`, with its arguments taken raw (they are the launcher's own format, and
/// nothing else of the binary runs before the process is confined). Returns only on failure:
/// 127 when the program is not found, else 126, as a shell does.
pub fn exec(args: Vec<OsString>) -> ExitCode {
    let e = postern_sandbox::exec(args);
    let code = match &e {
        postern_sandbox::SandboxError::Exec { error, .. }
            if error.kind() == std::io::ErrorKind::NotFound =>
        {
            127
        }
        _ => 126,
    };
    crate::messages::error(&e.into());
    ExitCode::from(code)
}

/// What every stdio upstream of one configuration is planned against.
pub struct Sandboxes {
    protected: Protected,
    /// This binary: the launcher of every sandboxed upstream.
    launcher: PathBuf,
    /// Whether the gateway runs as root, so an upstream runs as the sandbox's user.
    as_root: bool,
}

impl Sandboxes {
    /// The protected paths of `config` (read from `dir`, the config file's directory).
    pub fn new(config: &Config, dir: &Path) -> Result<Sandboxes> {
        Ok(Sandboxes {
            protected: protected(config, dir),
            launcher: std::env::current_exe()
                .context("finding this binary, the upstreams' sandbox launcher")?,
            as_root: rustix::process::geteuid().is_root(),
        })
    }

    /// The launcher of stdio upstream `name`: `None` when its sandbox is off (said now, as a
    /// warning). Its entries are relative to `dir`; `env` is its configured environment (its
    /// `PATH` finds the program); `cwd` its working directory, resolved.
    pub fn launcher(
        &self,
        name: &str,
        sandbox: &Sandbox,
        program: &str,
        env: &BTreeMap<String, Secret>,
        cwd: Option<&Path>,
        dir: &Path,
    ) -> Result<Option<Launcher>> {
        let Sandbox::On { read, write, user } = sandbox else {
            tracing::warn!(upstream = %name, "postern: upstream {name} runs unsandboxed (sandbox = \"off\"): it may read and write whatever the gateway's user can, the gateway's config, keys, tokens and store among them");
            return Ok(None);
        };
        let at = |key: &str| format!("upstream.{name}.{key}");
        let user = self
            .user(user.as_deref())
            .with_context(|| at("sandbox.user"))?;
        // Sharing the gateway's uid, only Landlock's scoping keeps the upstream from
        // signalling the gateway.
        let scoped = user.is_none();
        postern_sandbox::check_support(scoped).with_context(|| at("sandbox"))?;
        let allowance = Allowance {
            read: read.iter().map(|p| dir.join(p)).collect(),
            write: write.iter().map(|p| dir.join(p)).collect(),
        };
        let path = match env.get("PATH") {
            Some(p) => Some(OsString::from(p.expose())),
            None => std::env::var_os("PATH"),
        };
        let launch = Launch {
            program: program.as_ref(),
            path: path.as_deref(),
            cwd,
        };
        let spec = postern_sandbox::plan(&allowance, &self.protected, launch, user, scoped)
            .with_context(|| format!("upstream.{name}"))?;
        let mut args = vec![OsString::from(SUBCOMMAND)];
        args.extend(spec.to_args());
        Ok(Some(Launcher {
            program: self.launcher.clone(),
            args,
        }))
    }

    /// The user an upstream runs as: `None` (the gateway's) unless the gateway runs as root.
    fn user(&self, configured: Option<&str>) -> Result<Option<User>> {
        if self.as_root {
            return Ok(Some(User::lookup(configured.unwrap_or(DEFAULT_USER))?));
        }
        let Some(name) = configured else {
            return Ok(None);
        };
        let user = User::lookup(name)?;
        if user.uid != rustix::process::geteuid().as_raw() {
            bail!("{name:?}: the gateway does not run as root, so its upstreams run as its own user; leave user out");
        }
        Ok(None)
    }
}

/// Every path of `config` no upstream may reach: the config file's directory, every secret
/// file, the listener's certificate and key, client certificates and CA files, the vault, the
/// audit witness file, and the SQLite store with its journal files and instance locks.
fn protected(config: &Config, dir: &Path) -> Protected {
    let dir = match dir.as_os_str().is_empty() {
        true => Path::new("."),
        false => dir,
    };
    let mut protected = Protected::default();
    protected.add(dir, "the gateway's config directory");
    for (what, reference) in config.secret_refs() {
        if let SecretRef::File(file) = reference {
            protected.add(&dir.join(file), what);
        }
    }
    if let Some(tls) = &config.gateway.tls {
        protected.add(&dir.join(&tls.cert), "the listener's TLS certificate");
        protected.add(&dir.join(&tls.key), "the listener's TLS key");
    }
    for (name, c) in &config.credentials {
        if let Some(cert) = &c.client_certificate {
            protected.add(
                &dir.join(&cert.certificate),
                format!("the client certificate of credential {name}"),
            );
        }
    }
    for tool in &config.tools {
        if let ChannelSpec::Http(h) = &tool.channel {
            if let Some(file) = &h.ca_file {
                protected.add(
                    &dir.join(file),
                    format!("the CA file of tool {}", tool.name),
                );
            }
        }
    }
    for (name, u) in &config.upstreams {
        if let postern_core::config::UpstreamTransport::Http {
            ca_file: Some(file),
            ..
        } = &u.transport
        {
            protected.add(&dir.join(file), format!("the CA file of upstream {name}"));
        }
    }
    if let Some(vault) = &config.gateway.vault {
        protected.add(&dir.join(vault), "the vault");
    }
    if let Some(witness) = &config.audit.witness_file {
        protected.add(&dir.join(witness), "the audit witness file");
    }
    let store = crate::resolve_store_path(&config.gateway.store, dir);
    if let Some(file) = store.strip_prefix("sqlite://") {
        let file = file.split('?').next().unwrap_or(file);
        for suffix in ["", "-wal", "-shm", "-journal", ".instances"] {
            protected.add(Path::new(&format!("{file}{suffix}")), "the store");
        }
    }
    protected
}

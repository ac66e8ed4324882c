//! Reading what a configuration refers to — credentials' secrets, client certificates, tools'
//! CA files — into the [`Resolved`] the gateway's registry is built from. Every error names the
//! credential or tool and the file (or variable), never a secret's content.

use std::path::Path;

use anyhow::{bail, Context, Result};
use postern_channels::http::{ClientIdentity, Credential, Secret, TlsProfile, TrustedRoots};
use postern_channels::mcp::{UpstreamSpec, UpstreamTransport as ChannelTransport};
use postern_core::config::{
    ClientCertificate, Config, CredentialKind, EnvValue, SecretRef, UpstreamTransport,
};
use postern_pipeline::vault::VaultCredential;
use postern_pipeline::{Resolved, ResolvedCredential};

use crate::secrets;

/// Reads every credential and every tool's `http.ca_file`. Relative paths are relative to
/// `dir`, the config file's directory.
pub fn resolve(config: &Config, dir: &Path) -> Result<Resolved> {
    let mut resolved = Resolved::default();
    for (name, c) in &config.credentials {
        // A vault secret is read at each request, from the unlocked vault (serve checks at
        // start-up that the vault holds it).
        let vault = match &c.secret {
            Some(SecretRef::Vault(entry)) => Some(VaultCredential {
                kind: c.kind.clone(),
                name: entry.clone(),
            }),
            _ => None,
        };
        // Every other secret is read now, used or not, so a missing one is said at start-up.
        let secret = match &c.secret {
            Some(SecretRef::Vault(_)) | None => None,
            Some(secret) => Some(Secret::new(
                secrets::resolve(secret, dir).with_context(|| format!("credential {name}"))?,
            )),
        };
        if let (CredentialKind::SshKey, Some(key)) = (&c.kind, &secret) {
            postern_channels::ssh::check_private_key(key)
                .map_err(|why| anyhow::anyhow!("credential {name}: {why}"))?;
        }
        // Bearer, basic and header credentials put a header on an HTTP request; an ssh_key
        // is the SSH channel's private key.
        let header = secret.and_then(|s| Credential::from_kind(&c.kind, s).ok());
        let client_identity = match &c.client_certificate {
            Some(cert) => {
                Some(client_identity(cert, dir).with_context(|| format!("credential {name}"))?)
            }
            None => None,
        };
        resolved.credentials.insert(
            name.clone(),
            ResolvedCredential {
                header,
                vault,
                client_identity,
            },
        );
    }
    for tool in &config.tools {
        // Each channel says whether it trusts a CA file (`ChannelRules::ca_file`).
        let trusted = tool.channel.rules().ca_file();
        let Some(file) = trusted else { continue };
        if resolved.ca_files.contains_key(file) {
            continue;
        }
        let roots = ca_file(file, dir).with_context(|| format!("tool {:?}", tool.name))?;
        resolved.ca_files.insert(file.to_string(), roots);
    }
    for (name, upstream) in &config.upstreams {
        let UpstreamTransport::Http {
            ca_file: Some(file),
            ..
        } = &upstream.transport
        else {
            continue;
        };
        if !resolved.ca_files.contains_key(file) {
            let roots = ca_file(file, dir).with_context(|| format!("upstream.{name}"))?;
            resolved.ca_files.insert(file.clone(), roots);
        }
    }
    Ok(resolved)
}

/// How to reach each `[upstream.NAME]`: its credential and CA file resolved, a stdio
/// upstream's `cwd` relative to the config file's directory and its sandbox planned (an
/// upstream that cannot be sandboxed as configured is a start-up error).
pub fn upstream_specs(
    config: &Config,
    resolved: &Resolved,
    dir: &Path,
) -> Result<Vec<UpstreamSpec>> {
    let mut specs = Vec::new();
    let sandboxes = crate::sandbox::Sandboxes::new(config, dir)?;
    for (name, upstream) in &config.upstreams {
        let transport = match &upstream.transport {
            UpstreamTransport::Stdio {
                command,
                env,
                cwd,
                sandbox,
            } => {
                let env = upstream_env(name, env, dir)?;
                let stdio = Stdio {
                    command,
                    cwd: cwd.as_deref(),
                    sandbox,
                };
                stdio_transport(&sandboxes, name, stdio, env, dir)?
            }
            UpstreamTransport::Http {
                url,
                credential,
                ca_file,
            } => {
                let credential = match credential {
                    None => None,
                    Some(c) => {
                        let r = resolved.credentials.get(c).with_context(|| {
                            format!("upstream.{name}: credential {c} was not read")
                        })?;
                        if r.vault.is_some() {
                            bail!("upstream.{name}: credential {c}: an upstream's credential cannot live in the vault yet; give it as {{ env = \"…\" }} or {{ file = \"…\" }}");
                        }
                        r.header.clone()
                    }
                };
                let tls = match ca_file {
                    None => None,
                    Some(file) => Some(std::sync::Arc::new(
                        TlsProfile::new(&resolved.ca_files[file], None)
                            .with_context(|| format!("upstream.{name}.ca_file"))?,
                    )),
                };
                ChannelTransport::Http {
                    url: url.clone(),
                    credential,
                    tls,
                }
            }
        };
        specs.push(UpstreamSpec {
            name: name.clone(),
            transport,
            startup_timeout: upstream.startup_timeout,
            request_timeout: upstream.timeout,
        });
    }
    Ok(specs)
}

/// A stdio upstream as the config gives it.
pub struct Stdio<'a> {
    pub command: &'a [String],
    /// Relative to the config file's directory.
    pub cwd: Option<&'a str>,
    pub sandbox: &'a postern_core::config::Sandbox,
}

/// A stdio upstream's transport with its variables' values `env`: its program started through
/// its sandbox's launcher, in its `cwd` (serve and `init`'s tool listing alike).
pub fn stdio_transport(
    sandboxes: &crate::sandbox::Sandboxes,
    name: &str,
    stdio: Stdio<'_>,
    env: std::collections::BTreeMap<String, Secret>,
    dir: &Path,
) -> Result<ChannelTransport> {
    let cwd = stdio.cwd.map(|c| dir.join(c));
    let program = &stdio.command[0];
    let launcher = sandboxes.launcher(name, stdio.sandbox, program, &env, cwd.as_deref(), dir)?;
    Ok(ChannelTransport::Stdio {
        program: program.clone(),
        args: stdio.command[1..].to_vec(),
        env,
        cwd,
        launcher,
    })
}

/// A stdio upstream's own variables, its secrets read now (a missing one is said at start-up,
/// by name).
fn upstream_env(
    name: &str,
    env: &std::collections::BTreeMap<String, EnvValue>,
    dir: &Path,
) -> Result<std::collections::BTreeMap<String, Secret>> {
    env.iter()
        .map(|(var, value)| {
            let value = match value {
                EnvValue::Plain(v) => v.clone(),
                EnvValue::Secret(r) => secrets::resolve(r, dir)
                    .with_context(|| format!("upstream.{name}.env.{var}"))?,
            };
            Ok((var.clone(), Secret::new(value)))
        })
        .collect()
}

/// The CAs of a tool's `http.ca_file`: a PEM file holding at least one certificate.
fn ca_file(file: &str, dir: &Path) -> Result<TrustedRoots> {
    let path = dir.join(file);
    let pem =
        std::fs::read(&path).with_context(|| format!("reading http.ca_file {}", path.display()))?;
    TrustedRoots::from_pem(&pem).with_context(|| format!("http.ca_file {}", path.display()))
}

/// A credential's client certificate and key. The certificate is public; the key is a secret
/// (a key file readable by others is refused, as for every secret file).
fn client_identity(cert: &ClientCertificate, dir: &Path) -> Result<ClientIdentity> {
    let cert_path = dir.join(&cert.certificate);
    let chain = std::fs::read(&cert_path)
        .with_context(|| format!("reading client_certificate {}", cert_path.display()))?;
    let key_name = match &cert.key {
        SecretRef::File(file) => dir.join(file).display().to_string(),
        other => other.to_string(),
    };
    let key = Secret::new(
        secrets::resolve(&cert.key, dir).with_context(|| format!("client_key {key_name}"))?,
    );
    ClientIdentity::from_pem(&chain, &key).with_context(|| {
        format!(
            "client_certificate {} with client_key {key_name}",
            cert_path.display()
        )
    })
}

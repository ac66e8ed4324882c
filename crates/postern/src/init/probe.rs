//! `init --from-mcp-json` asks each server for its tools before it writes the config: every
//! upstream of the config it made is started (or dialled) the way `postern serve` would, a
//! stdio one through this binary's `sandbox-exec` under its planned sandbox, all at once, each
//! given `BOUND` to answer; then all are stopped. The values the config reads from the
//! environment are the host file's own (init holds them; nothing is exported or written).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use postern_channels::http::{Credential, Secret};
use postern_channels::mcp::{Upstream, UpstreamSpec, UpstreamTransport as ChannelTransport};
use postern_core::config::{Config, EnvValue, SecretRef, UpstreamTransport};
use tokio_util::sync::CancellationToken;

use super::mcp_json::classify::Listed;
use super::mcp_json::ListedTools;

/// How long a server gets to start and list its tools. Longer would make onboarding wait on a
/// slow server; one that does not answer in time keeps the name patterns.
const BOUND: Duration = Duration::from_secs(5);

/// Each upstream's tools, or why it gave none in time. `dir` is where the config will be (the
/// sandbox keeps every upstream out of it).
pub fn list_tools(config: &Config, values: &BTreeMap<String, String>, dir: &Path) -> ListedTools {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return every(config, &format!("no runtime to start it: {e}")),
    };
    let listed = rt.block_on(async {
        let stop = CancellationToken::new();
        let mut asked = Vec::new();
        let mut listed = ListedTools::new();
        for name in config.upstreams.keys() {
            match spec(config, name, values, dir) {
                Ok(spec) => asked.push(Upstream::start(spec, stop.clone())),
                Err(e) => {
                    listed.insert(name.clone(), Err(format!("{e:#}")));
                }
            }
        }
        let mut answers = tokio::task::JoinSet::new();
        for u in asked {
            answers.spawn(async move { (u.name().to_string(), answer(&u).await) });
        }
        while let Some(Ok((name, answer))) = answers.join_next().await {
            listed.insert(name, answer);
        }
        // The children are killed when their links see the stop.
        stop.cancel();
        listed
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    listed
}

/// The same reason for every upstream.
fn every(config: &Config, why: &str) -> ListedTools {
    config
        .upstreams
        .keys()
        .map(|n| (n.clone(), Err(why.to_string())))
        .collect()
}

async fn answer(u: &Arc<Upstream>) -> Result<Vec<Listed>, String> {
    if !u.wait_up().await {
        return Err(match u.state().up {
            Err(why) if why != "connecting" => why,
            _ => format!("no answer within {}s", BOUND.as_secs()),
        });
    }
    Ok(u.state()
        .tools
        .iter()
        .map(|t| Listed {
            name: t.name.clone(),
            annotations: t.annotations.clone(),
        })
        .collect())
}

/// How to reach upstream `name`, as `resolve::upstream_specs` would make it, its variables'
/// values taken from `values`.
fn spec(
    config: &Config,
    name: &str,
    values: &BTreeMap<String, String>,
    dir: &Path,
) -> Result<UpstreamSpec> {
    let upstream = &config.upstreams[name];
    let value = |r: &SecretRef| match r {
        SecretRef::Env(var) => values.get(var).cloned().context(format!("{var} unknown")),
        other => anyhow::bail!("{other} is not init's"),
    };
    let transport = match &upstream.transport {
        UpstreamTransport::Stdio {
            command,
            env,
            cwd,
            sandbox,
        } => {
            let env = env
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        EnvValue::Plain(p) => p.clone(),
                        EnvValue::Secret(r) => value(r)?,
                    };
                    Ok((k.clone(), Secret::new(v)))
                })
                .collect::<Result<BTreeMap<_, _>>>()?;
            let sandboxes = crate::sandbox::Sandboxes::new(config, dir)?;
            let stdio = crate::resolve::Stdio {
                command,
                cwd: cwd.as_deref(),
                sandbox,
            };
            crate::resolve::stdio_transport(&sandboxes, name, stdio, env, dir)?
        }
        UpstreamTransport::Http {
            url, credential, ..
        } => {
            let credential = match credential.as_ref().map(|c| &config.credentials[c]) {
                None => None,
                Some(c) => {
                    let secret = c.secret.as_ref().context("no secret")?;
                    Credential::from_kind(&c.kind, Secret::new(value(secret)?)).ok()
                }
            };
            ChannelTransport::Http {
                url: url.clone(),
                credential,
                tls: None,
            }
        }
    };
    Ok(UpstreamSpec {
        name: name.to_string(),
        transport,
        startup_timeout: BOUND,
        request_timeout: BOUND,
    })
}

//! Building the configured tools at start-up: each contract's compiled schema, credential,
//! channel (one arm per channel) and TLS profile, and each upstream's exposure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use postern_channels::http::{HttpTool, TlsProfile, TrustedRoots};
use postern_channels::mcp::{McpTool, Upstream};
use postern_channels::ssh::SshTool;
use postern_channels::Channel;
use postern_core::contract::{ChannelSpec, HttpSpec, McpSpec, ToolContract};

use crate::error::GatewayError;
use crate::pins::Pins;

use super::exposure::{ServedAll, UpstreamExposure};
use super::{Dialers, Resolved, ResolvedCredential, ToolEntry, UpstreamBinding};

/// What building the configured tools shares between them: the TLS profiles built so far, the
/// pins every upstream tool checks, and each upstream's exposure (by name, so in name order).
pub(super) struct ToolBuilder<'a> {
    pub(super) resolved: &'a Resolved,
    pub(super) dialers: &'a Dialers,
    pub(super) profiles: TlsProfiles,
    pub(super) pins: Arc<Pins>,
    pub(super) exposures: BTreeMap<String, UpstreamExposure>,
}

impl<'a> ToolBuilder<'a> {
    /// The entry of the configured tool `c`: its compiled schema, credential and channel.
    pub(super) fn tool(&mut self, c: &ToolContract) -> Result<ToolEntry, GatewayError> {
        let validator = jsonschema::validator_for(&c.input_schema).map_err(|e| {
            GatewayError::Internal(format!(
                "tool {}: input_schema is not a valid JSON Schema: {e}",
                c.name
            ))
        })?;
        let resolved_credential = self.credential(c)?;
        let (channel, upstream) = self.channel(c, resolved_credential)?;
        Ok(ToolEntry {
            contract: Arc::new(c.clone()),
            validator,
            credential: resolved_credential.and_then(|(_, r)| r.header.clone()),
            vault_credential: resolved_credential.and_then(|(_, r)| r.vault.clone()),
            channel,
            upstream,
        })
    }

    /// The credential `c` names, with its name, as the binary read it (`None`: it names none).
    fn credential<'c>(
        &self,
        c: &'c ToolContract,
    ) -> Result<Option<(&'c str, &'a ResolvedCredential)>, GatewayError> {
        let resolved = self.resolved;
        let Some(name) = c.channel.credential_ref() else {
            return Ok(None);
        };
        let credential = resolved.credentials.get(name).ok_or_else(|| {
            GatewayError::Internal(format!(
                "tool {}: credential {name} was not resolved",
                c.name
            ))
        })?;
        Ok(Some((name, credential)))
    }

    /// Where `c`'s calls go, and for a re-exported upstream tool its binding.
    fn channel(
        &mut self,
        c: &ToolContract,
        credential: Option<(&str, &ResolvedCredential)>,
    ) -> Result<(Arc<dyn Channel>, Option<UpstreamBinding>), GatewayError> {
        Ok(match &c.channel {
            ChannelSpec::Http(h) => (self.http_channel(c, h, credential)?, None),
            ChannelSpec::Mcp(m) => {
                let (channel, binding) = self.mcp_channel(c, m)?;
                (channel, Some(binding))
            }
            ChannelSpec::Ssh(s) => (
                Arc::new(SshTool::new(
                    s,
                    &c.arguments.defaults,
                    self.dialers.ssh.clone(),
                    postern_core::config::DEFAULT_MAX_RESPONSE_BYTES,
                )),
                None,
            ),
        })
    }

    /// An HTTP tool, on the TLS profile its CA file and client certificate call for.
    fn http_channel(
        &mut self,
        c: &ToolContract,
        h: &HttpSpec,
        credential: Option<(&str, &ResolvedCredential)>,
    ) -> Result<Arc<dyn Channel>, GatewayError> {
        let tls = self
            .profiles
            .for_tool(h.ca_file.as_deref(), credential, self.resolved)
            .map_err(|e| GatewayError::Internal(format!("tool {}: {e}", c.name)))?;
        let tool = HttpTool::new(
            h,
            &c.recovery,
            c.class.is_read_only(),
            tls,
            self.dialers.http.clone(),
            postern_core::config::DEFAULT_MAX_RESPONSE_BYTES,
        )
        .map_err(|e| GatewayError::Internal(format!("tool {}: {e}", c.name)))?;
        Ok(Arc::new(tool))
    }

    /// A tool re-exported from a started upstream, recorded among that upstream's explicit
    /// ones (so `expose = "all"` never serves it a second time).
    fn mcp_channel(
        &mut self,
        c: &ToolContract,
        m: &McpSpec,
    ) -> Result<(Arc<dyn Channel>, UpstreamBinding), GatewayError> {
        let dialers = self.dialers;
        let link = dialers.upstreams.get(&m.server).ok_or_else(|| {
            GatewayError::Internal(format!(
                "tool {}: upstream {} is not started",
                c.name, m.server
            ))
        })?;
        self.exposure(&m.server, link).explicit.push(m.tool.clone());
        let binding = UpstreamBinding::new(link, m, &self.pins);
        let channel = Arc::new(McpTool::new(
            link.clone(),
            m,
            c.recovery.status_tool.clone(),
            c.class.is_read_only(),
        ));
        Ok((channel, binding))
    }

    /// Marks each `expose = "all"` upstream to serve every tool it lists, under names no
    /// configured (`order`) or built-in tool has.
    pub(super) fn expose_all(&mut self, order: &[String]) -> Result<(), GatewayError> {
        let mut reserved: HashSet<String> = order.iter().cloned().collect();
        reserved.insert(postern_core::contract::EXECUTION_STATUS.into());
        let reserved = Arc::new(reserved);
        let dialers = self.dialers;
        for (name, config) in &dialers.exposed_all {
            let link = dialers
                .upstreams
                .get(name)
                .ok_or_else(|| GatewayError::Internal(format!("upstream {name} is not started")))?;
            self.exposure(name, link).all = Some(Arc::new(ServedAll {
                expose: config.clone(),
                reserved: reserved.clone(),
            }));
        }
        Ok(())
    }

    /// The exposure of upstream `name` (made on its first tool).
    fn exposure(&mut self, name: &str, link: &Arc<Upstream>) -> &mut UpstreamExposure {
        self.exposures
            .entry(name.to_string())
            .or_insert_with(|| UpstreamExposure {
                upstream: link.clone(),
                explicit: Vec::new(),
                all: None,
            })
    }
}

/// The TLS profiles built so far, by (CA file, name of the credential whose client certificate
/// is shown).
#[derive(Default)]
pub(super) struct TlsProfiles {
    pub(super) built: HashMap<(Option<String>, Option<String>), Arc<TlsProfile>>,
}

impl TlsProfiles {
    /// The profile for a tool with this CA file and credential; `None` when it has neither
    /// (the channel's shared webpki profile).
    pub(super) fn for_tool(
        &mut self,
        ca_file: Option<&str>,
        credential: Option<(&str, &ResolvedCredential)>,
        resolved: &Resolved,
    ) -> Result<Option<Arc<TlsProfile>>, String> {
        let identity = credential.and_then(|(name, r)| Some((name, r.client_identity.as_ref()?)));
        if ca_file.is_none() && identity.is_none() {
            return Ok(None);
        }
        let key = (
            ca_file.map(str::to_string),
            identity.map(|(name, _)| name.to_string()),
        );
        if let Some(profile) = self.built.get(&key) {
            return Ok(Some(profile.clone()));
        }
        let roots = match ca_file {
            Some(file) => resolved
                .ca_files
                .get(file)
                .ok_or_else(|| format!("http.ca_file {file} was not read"))?,
            None => &TrustedRoots::WebPki,
        };
        let profile = TlsProfile::new(roots, identity.map(|(_, id)| id))
            .map(Arc::new)
            .map_err(|e| e.to_string())?;
        self.built.insert(key, profile.clone());
        Ok(Some(profile))
    }
}

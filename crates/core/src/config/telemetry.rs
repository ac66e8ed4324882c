//! `[telemetry]`: where the gateway's spans go and where Prometheus may scrape without a token.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::SecretRef;

/// The `[telemetry]` table as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub otlp_endpoint: Option<String>,
    pub otlp_headers: Option<BTreeMap<String, SecretRef>>,
    pub service_name: Option<String>,
    pub metrics_listen: Option<String>,
}

/// Operations settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Telemetry {
    /// An OTLP/HTTP collector (`http(s)://host:4318`): spans are exported to
    /// `<endpoint>/v1/traces` (protobuf). `None`: no spans leave the process.
    pub otlp_endpoint: Option<String>,
    /// Headers sent with every export (a collector's API key): name → where its value is.
    pub otlp_headers: BTreeMap<String, SecretRef>,
    /// The `service.name` of the exported spans.
    pub service_name: String,
    /// A second, plain-HTTP listener serving only `GET /metrics` without a token (for a
    /// Prometheus on a private network); `None`: `/metrics` is on the main listener only,
    /// behind an operator token.
    pub metrics_listen: Option<String>,
}

impl RawTelemetry {
    pub(super) fn build(self) -> Result<Telemetry, String> {
        let otlp_endpoint = match self.otlp_endpoint {
            None => None,
            Some(e) => {
                let e = e.trim_end_matches('/').to_string();
                let rest = e
                    .strip_prefix("http://")
                    .or_else(|| e.strip_prefix("https://"))
                    .ok_or_else(|| {
                        format!("telemetry.otlp_endpoint: {e:?} must be an http:// or https:// URL (OTLP/HTTP, e.g. http://127.0.0.1:4318)")
                    })?;
                if rest.is_empty() || rest.contains(char::is_whitespace) {
                    return Err(format!("telemetry.otlp_endpoint: {e:?} names no host"));
                }
                Some(e)
            }
        };
        let otlp_headers = self.otlp_headers.unwrap_or_default();
        if !otlp_headers.is_empty() && otlp_endpoint.is_none() {
            return Err("telemetry.otlp_headers without telemetry.otlp_endpoint: there is no export to send them with".into());
        }
        for (name, value) in &otlp_headers {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(token) {
                return Err(format!(
                    "telemetry.otlp_headers: {name:?} is not an HTTP header name"
                ));
            }
            if matches!(value, SecretRef::Vault(_)) {
                return Err(format!("telemetry.otlp_headers.{name}: a vault secret is only for credentials (the exporter starts before anyone can unlock the vault)"));
            }
        }
        let service_name = self.service_name.unwrap_or_else(|| "postern".into());
        if service_name.is_empty() {
            return Err("telemetry.service_name must not be empty".into());
        }
        if let Some(addr) = &self.metrics_listen {
            addr.parse::<std::net::SocketAddr>().map_err(|_| {
                format!("telemetry.metrics_listen: {addr:?} is not an address and port (e.g. 127.0.0.1:9464)")
            })?;
        }
        Ok(Telemetry {
            otlp_endpoint,
            otlp_headers,
            service_name,
            metrics_listen: self.metrics_listen,
        })
    }
}

//! `[telemetry]`: where the gateway's spans go and where Prometheus may scrape without a token.

use serde::Deserialize;

/// The `[telemetry]` table as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub otlp_endpoint: Option<String>,
    pub service_name: Option<String>,
    pub metrics_listen: Option<String>,
}

/// Operations settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Telemetry {
    /// An OTLP/HTTP collector (`http(s)://host:4318`): spans are exported to
    /// `<endpoint>/v1/traces` (protobuf). `None`: no spans leave the process.
    pub otlp_endpoint: Option<String>,
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
            service_name,
            metrics_listen: self.metrics_listen,
        })
    }
}

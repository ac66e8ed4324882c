//! Opening a link: a stdio upstream's process started (through its launcher, its stderr to
//! the gateway's log) or an HTTP upstream dialed, then the MCP session initialised.

use std::sync::Arc;

use rmcp::service::RunningService;
use rmcp::transport::common::client_side_sse::NeverRetry;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{UpstreamSpec, UpstreamTransport};
use crate::http::TlsProfile;
use crate::mcp::client::LinkClient;
use crate::mcp::process::Process;
use crate::mcp::progress::CountedProgress;
use crate::mcp::reason;
use crate::secret::Credential;

/// Concurrent requests one HTTP upstream link carries.
const MAX_CALLS_IN_FLIGHT: usize = 256;

pub(super) type Connected = (RunningService<RoleClient, LinkClient>, Option<Process>);

/// Connects and initialises (a new process group for stdio, killed when dropped).
pub(super) async fn connect(
    spec: &UpstreamSpec,
    client: LinkClient,
    broken: crate::mcp::line_guard::Broken,
) -> Result<Connected, String> {
    match &spec.transport {
        UpstreamTransport::Stdio {
            program,
            args,
            env,
            cwd,
            launcher,
        } => {
            let mut command = match launcher {
                Some(l) => {
                    let mut command = tokio::process::Command::new(&l.program);
                    command.args(&l.args).arg(program);
                    command
                }
                None => tokio::process::Command::new(program),
            };
            command
                .args(args)
                .env_clear()
                .envs(crate::mcp::child_environment(std::env::vars(), env));
            if let Some(dir) = cwd {
                command.current_dir(dir);
            }
            let (process, (stdin, stdout, stderr)) =
                Process::spawn(command).map_err(|e| format!("cannot start {program:?}: {e}"))?;
            let name = spec.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    // The server's own stderr, under its name (a server's words, not ours).
                    tracing::info!(upstream = %name, "[upstream {name}] {line}");
                }
            });
            let stdout = crate::mcp::line_guard::LineGuard::new(
                stdout,
                crate::mcp::line_guard::MAX_LINE,
                broken,
                spec.name.clone(),
            );
            let transport =
                rmcp::transport::IntoTransport::<RoleClient, _, _>::into_transport((stdout, stdin));
            let whom = format!("upstream {} ({program})", spec.name);
            Ok((initialize(client, transport, &whom).await?, Some(process)))
        }
        UpstreamTransport::Http {
            url,
            credential,
            tls,
        } => {
            let mut builder =
                reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
            if url.starts_with("https://") {
                let profile = tls.clone().unwrap_or_else(TlsProfile::webpki);
                builder =
                    builder.tls_backend_preconfigured(profile.rustls_config().as_ref().clone());
            }
            let mut headers = std::collections::HashMap::new();
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                // A lost session ends the link; the request it carried is left to recovery.
                .reinit_on_expired_session(false)
                // rmcp's default of 16 POSTs in flight would queue the 17th concurrent call
                // behind a slow upstream (measured: 0.60x direct at c=32 with 10 ms calls).
                .max_concurrent_requests(MAX_CALLS_IN_FLIGHT);
            match credential {
                Some(Credential::Bearer(token)) => {
                    config = config.auth_header(token.expose().to_string());
                }
                Some(Credential::Header { name, value }) => {
                    let name = http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("credential header name {name:?} is not valid"))?;
                    let mut value = http::HeaderValue::from_str(value.expose())
                        .map_err(|_| "the credential is not a valid header value".to_string())?;
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                Some(Credential::Basic { .. } | Credential::PrivateKey(_)) => {
                    return Err("only a bearer or header credential is used for upstreams".into())
                }
                None => {}
            }
            if !headers.is_empty() {
                config = config.custom_headers(headers);
            }
            config.retry_config = Arc::new(NeverRetry::default());
            let http = builder.build().map_err(|e| format!("http client: {e}"))?;
            let transport = StreamableHttpClientTransport::with_client(
                crate::mcp::session_guard::SessionGuard(http),
                config,
            );
            let whom = format!("upstream {} at {url}", spec.name);
            Ok((initialize(client, transport, &whom).await?, None))
        }
    }
}

/// Initialises the link over `transport`, counting each call's progress reports as read.
async fn initialize<T>(
    client: LinkClient,
    transport: T,
    whom: &str,
) -> Result<RunningService<RoleClient, LinkClient>, String>
where
    T: rmcp::transport::Transport<RoleClient> + 'static,
{
    let progress = client.progress.clone();
    client
        .serve(CountedProgress::by_route(transport, progress))
        .await
        .map_err(|e| {
            format!(
                "{whom} could not be initialized: {}",
                reason::initialize(&e)
            )
        })
}

//! The process's logs (text or JSON lines on stderr, `POSTERN_LOG` filters them) and, with
//! `[telemetry] otlp_endpoint`, its spans exported over OTLP/HTTP (protobuf) by the
//! OpenTelemetry SDK's batch processor, through our reqwest client.

use std::fmt;

use anyhow::{Context, Result};
use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use postern_core::config::Telemetry;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields, the span's fields).
    Json,
}

/// The variable that filters logs (`tracing` directives, e.g. `debug` or
/// `postern_ledger=debug`); default: this project's crates at `info`, others at `warn`.
pub const LOG_FILTER_VAR: &str = "POSTERN_LOG";
const DEFAULT_FILTER: &str =
    "warn,postern=info,postern_pipeline=info,postern_ledger=info,postern_channels=info";

/// Other crates are never heard below `info`, whatever `POSTERN_LOG` asks: at debug and trace
/// they print whole MCP messages, headers and frames, and with them arguments and credentials.
/// Postern's own crates log ids, kinds and reasons, never values.
fn wire_quiet<S>() -> impl tracing_subscriber::layer::Filter<S> {
    tracing_subscriber::filter::filter_fn(|meta| {
        meta.target().starts_with("postern") || *meta.level() <= tracing::Level::INFO
    })
}

/// What must outlive the run: the span exporter, flushed by [`Installed::shutdown`].
pub struct Installed {
    tracer: Option<SdkTracerProvider>,
}

impl Installed {
    /// Exports the spans still queued (at most a few seconds) and stops the exporter.
    pub async fn shutdown(self) {
        if let Some(provider) = self.tracer {
            // The batch processor's shutdown blocks on its thread, which sends through this
            // runtime: never on a runtime worker.
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

/// Installs the logs and, when configured, span export. Call inside the runtime.
pub fn install(
    format: LogFormat,
    telemetry: &Telemetry,
    config_dir: &std::path::Path,
) -> Result<Installed> {
    let filter = match std::env::var(LOG_FILTER_VAR) {
        Ok(directives) => EnvFilter::try_new(&directives)
            .with_context(|| format!("{LOG_FILTER_VAR}={directives:?} is not a log filter"))?,
        Err(_) => EnvFilter::new(DEFAULT_FILTER),
    };
    let (dispatch, tracer) = subscriber(format, filter, telemetry, config_dir)?;
    dispatch
        .try_init()
        .context("installing the log subscriber")?;
    Ok(Installed { tracer })
}

/// The subscriber: the log layer and, with an endpoint, the span exporter's layer.
///
/// Without an exporter the subscriber has the log layer alone, not an `Option` layer that is
/// `None`: tracing-subscriber gives a `None` layer every callsite's interest, so each of the
/// gateway's debug spans (a call, its target, each ledger commit) was created, entered on every
/// poll and closed, though nothing read it (~33,000 instructions a call, issue 52).
fn subscriber(
    format: LogFormat,
    filter: EnvFilter,
    telemetry: &Telemetry,
    config_dir: &std::path::Path,
) -> Result<(tracing::Dispatch, Option<SdkTracerProvider>)> {
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    }
    .with_filter(filter.and(wire_quiet()));
    let registry = tracing_subscriber::registry().with(logs);
    let Some(endpoint) = &telemetry.otlp_endpoint else {
        return Ok((tracing::Dispatch::new(registry), None));
    };
    let mut headers = std::collections::HashMap::new();
    for (name, value) in &telemetry.otlp_headers {
        let value = crate::secrets::resolve(value, config_dir)
            .with_context(|| format!("telemetry.otlp_headers.{name}"))?;
        headers.insert(name.clone(), value);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .with_headers(headers)
        .with_http_client(OtlpClient::new()?)
        .build()
        .context("the OTLP span exporter")?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(telemetry.service_name.clone())
                .build(),
        )
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("postern"))
        // The gateway's own spans (calls, targets, ledger commits), not its libraries'.
        .with_filter(EnvFilter::new(
            "off,postern_pipeline=debug,postern_ledger=debug,postern_channels=debug",
        ));
    Ok((tracing::Dispatch::new(registry.with(spans)), Some(provider)))
}

/// The exporter's HTTP client: our reqwest (rustls with ring, as every other request of the
/// gateway), driven on the gateway's runtime — the SDK's batch processor exports from a thread
/// of its own, where reqwest could not run.
struct OtlpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl fmt::Debug for OtlpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OtlpClient")
    }
}

impl OtlpClient {
    fn new() -> Result<OtlpClient> {
        Ok(OtlpClient {
            client: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(10))
                .build()
                .context("the OTLP HTTP client")?,
            runtime: tokio::runtime::Handle::try_current()
                .context("span export needs the runtime")?,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sending = async move {
            let (parts, body) = request.into_parts();
            let mut builder = client.request(parts.method, parts.uri.to_string());
            for (name, value) in &parts.headers {
                builder = builder.header(name, value);
            }
            let answer = builder.body(body).send().await?;
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                response = response.header(name, value);
            }
            let body = answer.bytes().await?;
            Ok::<_, HttpError>(response.body(body)?)
        };
        self.runtime.spawn(sending).await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no exporter, a span nothing logs is not created (it costs a registry entry, an
    /// enter and exit on every poll, and a close); with one, the gateway's debug spans are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spans_exist_only_for_a_layer_that_wants_them() {
        postern_channels::http::install_default_provider();
        let filter = || EnvFilter::new(DEFAULT_FILTER);
        let dir = std::path::Path::new(".");
        let mut telemetry = Telemetry::default();
        let (quiet, _) = subscriber(LogFormat::Text, filter(), &telemetry, dir).unwrap();
        tracing::dispatcher::with_default(&quiet, || {
            let call = tracing::debug_span!(target: "postern_pipeline::gateway", "call");
            assert!(
                call.is_disabled(),
                "a debug span with no exporter was created"
            );
            let library = tracing::info_span!(target: "rmcp::service", "serve_inner");
            assert!(library.is_disabled(), "a library's info span was created");
            let logged = tracing::info_span!(target: "postern_pipeline::gateway", "logged");
            assert!(
                !logged.is_disabled(),
                "an info span the log layer shows was not created"
            );
        });
        telemetry.otlp_endpoint = Some("http://127.0.0.1:9".into());
        let (exporting, provider) = subscriber(LogFormat::Text, filter(), &telemetry, dir).unwrap();
        tracing::dispatcher::with_default(&exporting, || {
            let call = tracing::debug_span!(target: "postern_pipeline::gateway", "call");
            assert!(
                !call.is_disabled(),
                "the exporter's debug span was not created"
            );
        });
        // As `Installed::shutdown` does: the exporter's thread sends through this runtime.
        drop(exporting);
        let provider = provider.expect("an exporter");
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

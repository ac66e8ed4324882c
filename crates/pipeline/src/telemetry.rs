//! Operations: what the gateway counts for Prometheus (`/metrics`), what it reads from the
//! store at a scrape or for `postern status`, and each call's span in the client's W3C trace.
//!
//! The crates count through the `metrics` facade; nothing is kept unless [`install_metrics`]
//! ran (the binary does, once per process). Labels are bounded: configured names (tools,
//! classes, upstreams), fixed vocabularies (attempts, outcomes, events, faults); never an id,
//! an argument or a string the agent chose — a tool name that is not configured is counted as
//! `(unknown)`.
//!
//! Spans: one `tools/call` span per call (execution id, fingerprint prefix, tool, class,
//! attempt, outcome), a `target` child around the channel's send, the ledger's commits as
//! `ledger.*` children. With no OpenTelemetry layer installed they cost a disabled-span check.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use serde::Serialize;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Calls answered: `tool`, `class`, `attempt` (new, attached, recovered, refused), `outcome`
/// (the state reported, or the refusal's kind).
pub const CALLS: &str = "postern_calls_total";
/// Reads passed through to upstreams (resources, prompts), by outcome.
pub const READS: &str = "postern_reads_total";
/// Time the target took to answer a dispatch (`tool`, `outcome`: applied, rejected, unknown,
/// not_sent).
pub const TARGET_SECONDS: &str = "postern_target_seconds";
/// Resumptions of an SSE stream (`Last-Event-ID`).
pub const STREAM_RESUMES: &str = "postern_stream_resumes_total";
/// MCP sessions given up at `max_sessions_per_actor` to make room for a newer one of the same
/// actor (the least recently used idle one).
pub const SESSION_EVICTIONS: &str = "postern_session_evictions_total";
/// Idle SSE streams (standalone `GET`) ended at `max_streams_per_actor` to make room for
/// another stream of the same actor (the oldest first).
pub const STREAM_EVICTIONS: &str = "postern_stream_evictions_total";
/// SSE streams this process carries.
pub const STREAMS_LIVE: &str = "postern_streams_live";
/// Gauges read from the store at each scrape.
pub const APPROVALS_PENDING: &str = "postern_approvals_pending";
pub const APPROVAL_OLDEST_SECONDS: &str = "postern_approval_oldest_age_seconds";
pub const REVIEWS_PENDING: &str = "postern_reviews_pending";
pub const UNKNOWN_OUTCOMES: &str = "postern_executions_outcome_unknown";
pub const DISPATCHED: &str = "postern_executions_dispatched";
pub const LEDGER_QUEUE: &str = "postern_ledger_queue_depth";
pub const RUNS_OPEN: &str = "postern_runs_open";
pub const UPSTREAM_UP: &str = "postern_upstream_up";
pub const BUDGET_USED: &str = "postern_budget_used_ratio";
pub const BUDGET_CALLS: &str = "postern_budget_calls";
pub const VAULT_LOCKED: &str = "postern_vault_locked";
/// 1 while this gateway refuses to sign its audit chain (the store's chain is not the one it
/// wrote).
pub const SIGNING_REFUSED: &str = "postern_audit_signing_refused";
pub const SCRAPE_SECONDS: &str = "postern_scrape_store_seconds";
/// Always 1, labelled with the version (joins other series to a build).
pub const BUILD_INFO: &str = "postern_build_info";

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Latency buckets, seconds: from a fast commit to a slow target.
const SECONDS_BUCKETS: [f64; 16] = [
    0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];
const BATCH_BUCKETS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// Installs the process-wide Prometheus recorder (once; later calls do nothing) and keeps its
/// histograms drained.
pub fn install_metrics() -> Result<(), String> {
    if PROMETHEUS.get().is_some() {
        return Ok(());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(postern_ledger::telemetry::BATCH_SIZE.into()),
                &BATCH_BUCKETS,
            )
        })
        .map_err(|e| format!("metrics: {e}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| format!("metrics: {e}"))?;
    describe();
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let _ = PROMETHEUS.set(handle.clone());
    // Histogram samples wait in per-thread buffers until drained; a scrape drains them too.
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            handle.run_upkeep();
        }
    });
    Ok(())
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    use postern_ledger::telemetry as ledger;
    describe_counter!(
        CALLS,
        "tools/call requests answered, by tool, class, attempt and outcome"
    );
    describe_counter!(
        READS,
        "resource and prompt reads passed through to upstreams, by outcome"
    );
    describe_counter!(
        ledger::EVENTS,
        "lifecycle events made durable, by event (states entered)"
    );
    describe_counter!(
        ledger::COMMIT_FAILURES,
        "ledger commits that failed, by storage fault"
    );
    describe_counter!(STREAM_RESUMES, "SSE streams resumed with Last-Event-ID");
    describe_counter!(
        SESSION_EVICTIONS,
        "idle MCP sessions given up at max_sessions_per_actor for a newer one"
    );
    describe_counter!(
        STREAM_EVICTIONS,
        "idle SSE streams ended at max_streams_per_actor for another stream"
    );
    describe_histogram!(
        TARGET_SECONDS,
        Unit::Seconds,
        "target answer time per dispatch, by tool and outcome"
    );
    describe_histogram!(
        ledger::COMMIT_SECONDS,
        Unit::Seconds,
        "write transaction time, begin to durable commit"
    );
    describe_histogram!(
        ledger::COMMIT_STATEMENT_SECONDS,
        Unit::Seconds,
        "COMMIT statement time (the fsync on SQLite)"
    );
    describe_histogram!(ledger::BATCH_SIZE, Unit::Count, "requests per group commit");
    describe_gauge!(STREAMS_LIVE, "SSE streams this process carries");
    describe_gauge!(BUILD_INFO, "1, labelled with the gateway's version");
    describe_gauge!(
        APPROVALS_PENDING,
        "executions awaiting an operator's approval"
    );
    describe_gauge!(
        APPROVAL_OLDEST_SECONDS,
        Unit::Seconds,
        "age of the oldest pending approval"
    );
    describe_gauge!(REVIEWS_PENDING, "executions in needs_review");
    describe_gauge!(
        BUDGET_USED,
        "a budget's use in its window, per scope: the larger of calls and sum over their limits (1: used up)"
    );
    describe_gauge!(
        BUDGET_CALLS,
        "executions a budget counts in its window, per scope"
    );
    describe_gauge!(UNKNOWN_OUTCOMES, "executions whose outcome is unknown now");
    describe_gauge!(DISPATCHED, "executions sent and not yet answered");
    describe_gauge!(
        LEDGER_QUEUE,
        "write requests waiting for the ledger's writer"
    );
    describe_gauge!(RUNS_OPEN, "runs (sessions) this process serves");
    describe_gauge!(UPSTREAM_UP, "1 when the upstream MCP server's link is up");
    describe_gauge!(VAULT_LOCKED, "1 when the vault is locked");
    describe_gauge!(
        SIGNING_REFUSED,
        "1 while the gateway refuses to sign its audit chain: the store's chain is not the one it wrote"
    );
    describe_gauge!(
        SCRAPE_SECONDS,
        Unit::Seconds,
        "time the last scrape spent reading the store"
    );
}

/// Whether `/metrics` has anything to render.
pub fn metrics_installed() -> bool {
    PROMETHEUS.get().is_some()
}

/// The Prometheus text exposition: the store's gauges as `status` read them, then every
/// metric; `None` when metrics are not enabled in this process.
pub fn render(status: &Status) -> Option<String> {
    let handle = PROMETHEUS.get()?;
    metrics::gauge!(APPROVALS_PENDING).set(status.approvals_pending as f64);
    metrics::gauge!(APPROVAL_OLDEST_SECONDS).set(status.oldest_approval_age_seconds.unwrap_or(0.0));
    metrics::gauge!(REVIEWS_PENDING).set(status.reviews_pending as f64);
    metrics::gauge!(UNKNOWN_OUTCOMES).set(status.outcome_unknown as f64);
    metrics::gauge!(DISPATCHED).set(status.dispatched as f64);
    metrics::gauge!(LEDGER_QUEUE).set(status.ledger_queue as f64);
    metrics::gauge!(RUNS_OPEN).set(status.runs_open as f64);
    metrics::gauge!(VAULT_LOCKED).set(if status.vault == "locked" { 1.0 } else { 0.0 });
    metrics::gauge!(SIGNING_REFUSED).set(if status.signing_refused.is_some() {
        1.0
    } else {
        0.0
    });
    metrics::gauge!(SCRAPE_SECONDS).set(status.store_read_seconds);
    for b in &status.budgets {
        for s in &b.scopes {
            let labels = [("budget", b.name.clone()), ("scope", s.scope.clone())];
            metrics::gauge!(BUDGET_USED, &labels).set(s.used);
            metrics::gauge!(BUDGET_CALLS, &labels).set(s.calls as f64);
        }
    }
    for u in &status.upstreams {
        metrics::gauge!(UPSTREAM_UP, "upstream" => u.name.clone()).set(if u.up {
            1.0
        } else {
            0.0
        });
    }
    Some(handle.render())
}

/// The running gateway at a glance (`GET /ops/status`, `postern status`).
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub instance: String,
    pub store: &'static str,
    /// `ok`, or why the store could not be read.
    pub store_state: String,
    pub store_read_seconds: f64,
    pub ledger_queue: usize,
    pub upstreams: Vec<UpstreamHealth>,
    /// Each `[[budget]]` and its use now, per scope.
    pub budgets: Vec<BudgetView>,
    /// `none`, `locked` or `unlocked`.
    pub vault: &'static str,
    pub approvals_pending: u64,
    pub oldest_approval_age_seconds: Option<f64>,
    pub reviews_pending: u64,
    pub outcome_unknown: u64,
    pub outcome_unknown_last_hour: u64,
    pub dispatched: u64,
    pub runs_open: usize,
    pub last_checkpoint: Option<CheckpointView>,
    /// Why this gateway no longer signs checkpoints (the store's chain is not the one it
    /// wrote), if it does not.
    pub signing_refused: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UpstreamHealth {
    pub name: String,
    pub up: bool,
    pub why: Option<String>,
    /// A stdio upstream's process while it runs.
    pub pid: Option<u32>,
    pub withheld_tools: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckpointView {
    pub chain: String,
    pub seq: u64,
    pub at: String,
    pub age_seconds: f64,
}

/// Counts a read passed through (see [`READS`]).
pub(crate) fn count_read(outcome: &'static str) {
    metrics::counter!(READS, "outcome" => outcome).increment(1);
}

/// Counts a call as answered (see [`CALLS`]).
pub(crate) fn count_call(
    tool: &str,
    class: &'static str,
    attempt: &'static str,
    outcome: &'static str,
) {
    metrics::counter!(
        CALLS,
        "tool" => tool.to_string(),
        "class" => class,
        "attempt" => attempt,
        "outcome" => outcome
    )
    .increment(1);
}

/// A remote parent from a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`); `None` when it
/// is absent or malformed (a malformed one is ignored, never an error to the agent).
pub fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let mut parts = text.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2
        || version == "ff"
        || trace.len() != 32
        || span.len() != 16
        || flags.len() != 2
    {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::NONE,
    );
    context.is_valid().then_some(context)
}

/// Makes `span` a child of the client's trace, when it sent a valid `traceparent`.
pub(crate) fn join_client_trace(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(remote) = traceparent.and_then(parse_traceparent) {
        let context = opentelemetry::Context::new().with_remote_span_context(remote);
        let _ = span.set_parent(context);
    }
}

/// The `traceparent` to send with a dispatch: `span`'s own when a tracer records it, else the
/// client's (passed through unchanged), else none.
pub(crate) fn traceparent_for(span: &tracing::Span, client: Option<&str>) -> Option<String> {
    let context = span.context();
    let own = context.span().span_context().clone();
    if own.is_valid() {
        return Some(format!(
            "00-{}-{}-{:02x}",
            own.trace_id(),
            own.span_id(),
            own.trace_flags().to_u8()
        ));
    }
    client
        .and_then(parse_traceparent)
        .map(|_| client.unwrap_or_default().trim().to_string())
}

/// Every metric name this process may export (the dashboard in `docs/` is held to it).
pub const ALL_METRICS: [&str; 23] = [
    CALLS,
    TARGET_SECONDS,
    STREAM_RESUMES,
    SESSION_EVICTIONS,
    STREAM_EVICTIONS,
    STREAMS_LIVE,
    APPROVALS_PENDING,
    APPROVAL_OLDEST_SECONDS,
    REVIEWS_PENDING,
    UNKNOWN_OUTCOMES,
    DISPATCHED,
    LEDGER_QUEUE,
    RUNS_OPEN,
    UPSTREAM_UP,
    VAULT_LOCKED,
    SIGNING_REFUSED,
    SCRAPE_SECONDS,
    postern_ledger::telemetry::EVENTS,
    postern_ledger::telemetry::COMMIT_SECONDS,
    postern_ledger::telemetry::COMMIT_STATEMENT_SECONDS,
    postern_ledger::telemetry::BATCH_SIZE,
    postern_ledger::telemetry::COMMIT_FAILURES,
    BUILD_INFO,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The Grafana dashboard queries only metrics the gateway exports.
    #[test]
    fn the_dashboard_names_only_exported_metrics() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/grafana-dashboard.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut seen = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if !word.starts_with("postern_") {
                        continue;
                    }
                    let name = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| word.strip_suffix(s).filter(|n| ALL_METRICS.contains(n)))
                        .unwrap_or(word);
                    assert!(
                        ALL_METRICS.contains(&name),
                        "the dashboard queries {word}, which nothing exports"
                    );
                    seen += 1;
                }
            }
        }
        assert!(seen >= 20, "the dashboard queries {seen} metrics");
    }

    #[test]
    fn traceparent_is_parsed_strictly() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = parse_traceparent(good).expect("valid");
        assert_eq!(c.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(c.span_id().to_string(), "00f067aa0ba902b7");
        assert!(c.is_remote() && c.is_sampled());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?} accepted");
        }
    }

    #[test]
    fn without_a_tracer_the_clients_traceparent_passes_through() {
        let span = tracing::info_span!("t");
        let client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            traceparent_for(&span, Some(client)).as_deref(),
            Some(client)
        );
        assert_eq!(traceparent_for(&span, Some("junk")), None);
        assert_eq!(traceparent_for(&span, None), None);
    }
}

/// A budget and its use now, per scope counted in its window (`postern budgets`, `/ops/budgets`,
/// the console, the gauges).
#[derive(Clone, Debug, Serialize)]
pub struct BudgetView {
    pub name: String,
    pub tools: Vec<String>,
    pub window_seconds: u64,
    pub max_calls: Option<u64>,
    /// The summed argument and its limit, as a decimal.
    pub sum: Option<(String, String)>,
    pub on_exhausted: &'static str,
    pub scopes: Vec<ScopeUse>,
}

/// One scope's use of a budget in its window.
#[derive(Clone, Debug, Serialize)]
pub struct ScopeUse {
    /// `actor=NAME, ARG=VALUE`; empty for a budget counted as one.
    pub scope: String,
    pub calls: u64,
    pub sum: String,
    /// The larger of its calls and sum as a share of their limits (1.0: used up).
    pub used: f64,
    pub frees_at: Option<String>,
}

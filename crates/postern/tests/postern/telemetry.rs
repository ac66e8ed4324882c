//! Issue 17, operations: `/metrics` read with a Prometheus text-format parser and held to the
//! ledger after a scripted run; spans exported over OTLP/HTTP to a receiver that decodes them
//! (with the execution id, in the client's trace, the context passed on to the target); JSON
//! logs at trace level that never carry a secret; `postern status`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use postern_demo::target::InvoiceApi;
use prost::Message;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{
    config, eventually, execution_id, http_client, operator, prepare, write_private, Dir, Mcp,
    Served, ALICE_TOKEN, BILLING_TOKEN,
};

fn with_operator(config_text: &str) -> String {
    format!("{config_text}\n[[operator]]\nname = \"alice\"\ntoken = {{ file = \"alice.token\" }}\n")
}

async fn scrape(served: &Served, token: Option<&str>) -> (u16, String) {
    let mut req = http_client().get(format!("http://{}/metrics", served.addr()));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Every sample of `name`, parsed by a Prometheus text-format parser.
fn samples(text: &str, name: &str) -> Vec<prometheus_parse::Sample> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text format");
    scrape
        .samples
        .into_iter()
        .filter(|s| s.metric == name)
        .collect()
}

fn value(s: &prometheus_parse::Sample) -> f64 {
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => panic!("{} is not a single value", s.metric),
    }
}

/// `label` → summed value of `name`'s samples.
fn by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in samples(text, name) {
        let key = s.labels.get(label).unwrap_or_default().to_string();
        *out.entry(key).or_default() += value(&s) as u64;
    }
    out
}

/// `SELECT <column>, COUNT(*) FROM <table> GROUP BY <column>` on the gateway's ledger.
async fn ledger_counts(dir: &Path, table: &str, column: &str) -> BTreeMap<String, u64> {
    use sqlx::{Connection, Row};
    let url = format!("sqlite://{}?mode=ro", dir.join("ledger.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let rows = sqlx::query(&format!(
        "SELECT {column} AS k, COUNT(*) AS n FROM {table} GROUP BY {column}"
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    rows.iter()
        .map(|r| (r.get::<String, _>("k"), r.get::<i64, _>("n") as u64))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_match_the_ledger_after_a_scripted_run() {
    let target = InvoiceApi::start().await.unwrap();
    let d = Dir::new("metrics");
    write_private(&d.0.join("alice.token"), ALICE_TOKEN);
    let served = Served::start(&d.0, &with_operator(&config(&target.url(""))));
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    // The script: three new invoices, one of them asked twice (answered from its record), a
    // read, an unknown tool, invalid arguments, and a 500 after commit (outcome unknown).
    let mut ids = Vec::new();
    for (customer, amount) in [("acme", 10), ("globex", 20), ("initech", 30)] {
        let r = mcp
            .call(
                "create_invoice",
                json!({"customer": customer, "amount": amount}),
                json!({}),
            )
            .await;
        ids.push(execution_id(&r));
    }
    let again = mcp
        .call(
            "create_invoice",
            json!({"customer": "acme", "amount": 10}),
            json!({}),
        )
        .await;
    assert_eq!(execution_id(&again), ids[0]);
    mcp.call("list_invoices", json!({}), json!({})).await;
    mcp.call("no_such_tool", json!({}), json!({})).await;
    mcp.call("create_invoice", json!({"customer": "acme"}), json!({}))
        .await;
    target
        .state
        .set_mode(postern_demo::target::Mode::DropAfterCreate);
    mcp.call(
        "send_wire",
        json!({"customer": "umbrella", "amount": 99}),
        json!({}),
    )
    .await;

    // Authorization: no token 401, an actor's 403, an operator's 200.
    assert_eq!(scrape(&served, None).await.0, 401);
    assert_eq!(scrape(&served, Some(BILLING_TOKEN)).await.0, 403);

    // Counters match the ledger once the calls log (committed with the next commit) is in.
    let mut text = String::new();
    let mut matched = false;
    for _ in 0..100 {
        let (status, body) = scrape(&served, Some(ALICE_TOKEN)).await;
        assert_eq!(status, 200, "{body}");
        text = body;
        let calls = by_label(&text, "postern_calls_total", "attempt");
        let events = by_label(&text, "postern_events_total", "event");
        if calls == ledger_counts(&d.0, "calls", "attempt").await
            && events == ledger_counts(&d.0, "events", "event").await
        {
            matched = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        matched,
        "metrics never matched the ledger:\n{text}\ncalls {:?}\nevents {:?}",
        ledger_counts(&d.0, "calls", "attempt").await,
        ledger_counts(&d.0, "events", "event").await
    );
    let calls = by_label(&text, "postern_calls_total", "attempt");
    assert_eq!(calls.get("new"), Some(&5), "{calls:?}");
    assert_eq!(calls.get("refused"), Some(&2), "{calls:?}");
    assert_eq!(
        calls.values().sum::<u64>(),
        8,
        "every call counted once: {calls:?}"
    );
    // Refusals are labelled by kind, and an unknown tool's name is never a label.
    let outcomes = by_label(&text, "postern_calls_total", "outcome");
    assert!(outcomes.contains_key("unknown_tool") && outcomes.contains_key("invalid_arguments"));
    assert!(
        !text.contains("no_such_tool"),
        "an agent's string became a label"
    );
    let events = by_label(&text, "postern_events_total", "event");
    assert_eq!(events.get("dispatched"), Some(&5), "{events:?}");
    assert_eq!(events.get("outcome_unknown"), Some(&1), "{events:?}");
    // The store's gauges and the latency histograms.
    let gauge = |name: &str| samples(&text, name).first().map(value);
    assert_eq!(gauge("postern_executions_outcome_unknown"), Some(1.0));
    assert_eq!(gauge("postern_reviews_pending"), Some(0.0));
    assert_eq!(gauge("postern_approvals_pending"), Some(0.0));
    let dispatches: f64 = samples(&text, "postern_target_seconds_count")
        .iter()
        .map(value)
        .sum();
    assert_eq!(dispatches, 5.0);
    assert!(!samples(&text, "postern_ledger_commit_seconds_count").is_empty());
    assert!(!samples(&text, "postern_ledger_batch_size_count").is_empty());
    for id in &ids {
        assert!(
            !text.contains(id.as_str()),
            "an execution id became a label"
        );
    }

    // `postern status`: the same store figures, and the unknown outcome in words.
    let (code, out, err) = operator(&served, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "1 execution(s) with an unknown outcome (1 of them became unknown in the last hour)"
        ),
        "{out}"
    );
    assert!(out.contains("nothing needs a person"), "{out}");
    served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_serves_metrics_alone_without_a_token() {
    let target = InvoiceApi::start().await.unwrap();
    let d = Dir::new("metrics-listen");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let text = format!(
        "{}\n[telemetry]\nmetrics_listen = \"127.0.0.1:{port}\"\n",
        config(&target.url(""))
    );
    let served = Served::start(&d.0, &text);
    let base = format!("http://127.0.0.1:{port}");
    let resp = http_client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(!samples(&body, "postern_runs_open").is_empty(), "{body}");
    // Nothing else of the gateway is reachable there.
    for path in ["/mcp", "/ops/status", "/ops/approvals"] {
        let status = http_client()
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "{path}");
    }
    served.stop();
}

#[test]
fn a_bad_telemetry_setting_is_refused_naming_it() {
    for (setting, says) in [
        (
            "otlp_endpoint = \"grpc://collector:4317\"",
            "telemetry.otlp_endpoint",
        ),
        (
            "metrics_listen = \"everywhere\"",
            "telemetry.metrics_listen",
        ),
        ("service_name = \"\"", "telemetry.service_name"),
        ("sampler = \"always\"", "sampler"),
        (
            "otlp_headers = { authorization = { env = \"COLLECTOR_KEY\" } }",
            "without telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"http://127.0.0.1:4318\"\notlp_headers = { authorization = { vault = \"k\" } }",
            "only for credentials",
        ),
    ] {
        let d = Dir::new("telemetry-refused");
        prepare(
            &d.0,
            &format!("{}\n[telemetry]\n{setting}\n", config("http://127.0.0.1:9")),
        );
        let stderr = crate::harness::serve_refuses(&d.0);
        assert!(stderr.contains(says), "{setting}: {stderr}");
    }
}

/// A minimal OTLP/HTTP receiver: every `POST /v1/traces` body decoded as protobuf.
pub(crate) struct OtlpReceiver {
    pub addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    /// Every export's body as received (to search for what must never be there).
    raw: Arc<Mutex<Vec<u8>>>,
    /// The `authorization` header of each export.
    authorizations: Arc<Mutex<Vec<String>>>,
}

impl OtlpReceiver {
    pub(crate) async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let authorizations: Arc<Mutex<Vec<String>>> = Arc::default();
        let raw: Arc<Mutex<Vec<u8>>> = Arc::default();
        let keep = spans.clone();
        let seen = authorizations.clone();
        let bodies = raw.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (keep, seen, bodies) = (keep.clone(), seen.clone(), bodies.clone());
                tokio::spawn(async move {
                    while let Some((path, authorization, body)) = read_request(&mut conn).await {
                        seen.lock().unwrap().extend(authorization);
                        bodies.lock().unwrap().extend_from_slice(&body);
                        let ok = path == "/v1/traces";
                        if ok {
                            let req = ExportTraceServiceRequest::decode(body.as_slice())
                                .expect("an OTLP protobuf export");
                            for rs in req.resource_spans {
                                for ss in rs.scope_spans {
                                    keep.lock().unwrap().extend(ss.spans);
                                }
                            }
                        }
                        let head = if ok { "200 OK" } else { "404 Not Found" };
                        let answer = format!("HTTP/1.1 {head}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        OtlpReceiver {
            addr,
            spans,
            raw,
            authorizations,
        }
    }

    pub(crate) fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Every export body received so far, concatenated.
    pub(crate) fn raw(&self) -> Vec<u8> {
        self.raw.lock().unwrap().clone()
    }
}

/// One HTTP/1.1 request with a content-length body: (path, its authorization header, body).
async fn read_request(
    conn: &mut tokio::net::TcpStream,
) -> Option<(String, Option<String>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let path = head.split_whitespace().nth(1)?.to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let authorization = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("authorization")
            .then(|| v.trim().to_string())
    });
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).await.ok()?;
    Some((path, authorization, body))
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_receiver_in_the_clients_trace_and_the_target_joins_it() {
    let receiver = OtlpReceiver::start().await;
    let target = InvoiceApi::start().await.unwrap();
    let d = Dir::new("otlp");
    let text = format!(
        "{}\n[telemetry]\notlp_endpoint = \"http://{}\"\nservice_name = \"postern-test\"\notlp_headers = {{ authorization = {{ file = \"otlp.key\" }} }}\n",
        config(&target.url("")),
        receiver.addr
    );
    write_private(&d.0.join("otlp.key"), "Bearer collector-key-0123456789");
    let served = Served::start(&d.0, &text);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let r = mcp
        .call(
            "create_invoice",
            json!({"customer": "acme", "amount": 42}),
            json!({"_meta": {"traceparent": format!("00-{trace_id}-{parent}-01")}}),
        )
        .await;
    let id = execution_id(&r);
    // The target received the gateway's span as its parent, in the same trace.
    let seen = target.state.requests();
    let traceparent = seen
        .iter()
        .find(|r| r.method == "POST")
        .and_then(|r| r.traceparent.clone())
        .expect("the target got a traceparent");
    assert!(
        traceparent.starts_with(&format!("00-{trace_id}-")),
        "{traceparent}"
    );
    assert!(
        !traceparent.contains(parent),
        "the gateway's own span is the target's parent"
    );
    // A graceful stop flushes the exporter.
    served.stop();
    eventually("the call's span exported", || {
        receiver.spans().iter().any(|s| s.name == "tools/call")
    })
    .await;
    let spans = receiver.spans();
    // The collector's key went with every export.
    let keys = receiver.authorizations.lock().unwrap().clone();
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k == "Bearer collector-key-0123456789"),
        "{keys:?}"
    );
    let call = spans.iter().find(|s| s.name == "tools/call").unwrap();
    assert_eq!(
        hex::encode(&call.trace_id),
        trace_id,
        "the call joined the client's trace"
    );
    assert_eq!(hex::encode(&call.parent_span_id), parent);
    assert_eq!(
        attribute(call, "execution_id").as_deref(),
        Some(id.as_str())
    );
    assert_eq!(attribute(call, "tool").as_deref(), Some("create_invoice"));
    assert_eq!(
        attribute(call, "class").as_deref(),
        Some("idempotent_write")
    );
    assert_eq!(attribute(call, "attempt").as_deref(), Some("new"));
    assert_eq!(
        attribute(call, "outcome").as_deref(),
        Some("completed(applied)")
    );
    assert!(attribute(call, "fingerprint").is_some_and(|f| f.starts_with("hmac-sha256:")));
    let children: Vec<&str> = spans
        .iter()
        .filter(|s| s.parent_span_id == call.span_id)
        .map(|s| s.name.as_str())
        .collect();
    for child in ["ledger.accept", "target", "ledger.append"] {
        assert!(
            children.contains(&child),
            "no {child} span under the call: {children:?}"
        );
    }
    let target_span = spans.iter().find(|s| s.name == "target").unwrap();
    assert_eq!(
        traceparent,
        format!("00-{trace_id}-{}-01", hex::encode(&target_span.span_id)),
        "the target's parent is the gateway's target span"
    );
}

#[test]
fn json_logs_at_trace_level_carry_no_secret() {
    const SECRET_ARG: &str = "card-4111111111111111-never-logged";
    const CREDENTIAL: &str = "target-credential-never-logged-0123";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let target = rt
        .block_on(InvoiceApi::start_with_token(CREDENTIAL))
        .unwrap();
    let d = Dir::new("json-logs");
    let text = format!(
        r#"{}
[credential.api]
kind = "bearer"
secret = {{ file = "api.token" }}

[[tool]]
name = "charge"
class = "irreversible"
match_window = "10m"
secret_fields = ["card"]
input_schema = {{ type = "object", required = ["customer", "card", "amount"], properties = {{ customer = {{ type = "string" }}, card = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{}/invoices", credential = "api" }}
"#,
        config(&target.url("")),
        target.url("")
    );
    prepare(&d.0, &text);
    write_private(&d.0.join("api.token"), CREDENTIAL);
    let log = d.0.join("stderr.log");
    let (mut child, url) = crate::harness::serve_logging_to(&d.0, &log);
    rt.block_on(async {
        let mcp = Mcp::connect(&url, BILLING_TOKEN).await;
        let r = mcp
            .call(
                "charge",
                json!({"customer": "acme", "card": SECRET_ARG, "amount": 5}),
                json!({}),
            )
            .await;
        execution_id(&r);
        // A refusal whose words could quote an argument: logged by kind only.
        mcp.call(
            "charge",
            json!({"customer": "acme", "card": SECRET_ARG, "amount": "five"}),
            json!({}),
        )
        .await;
        // An unknown outcome is logged at warn.
        target
            .state
            .set_mode(postern_demo::target::Mode::DropAfterCreate);
        mcp.call(
            "charge",
            json!({"customer": "acme", "card": SECRET_ARG, "amount": 6}),
            json!({}),
        )
        .await;
    });
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(
        logs.contains("\"level\":\"DEBUG\"") && logs.contains("call answered"),
        "debug lines were not written: {logs}"
    );
    for secret in [SECRET_ARG, CREDENTIAL] {
        let leaks: Vec<String> = logs
            .lines()
            .filter(|l| l.contains(secret))
            .map(|l| l.replace(secret, "<SECRET>").chars().take(400).collect())
            .take(3)
            .collect();
        assert!(leaks.is_empty(), "a secret reached the logs: {leaks:#?}");
    }
    let mut saw_unknown = false;
    let mut saw_refusal = false;
    for line in logs.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
        let message = v["fields"]["message"].as_str().unwrap_or_default();
        if v["level"] == "WARN" && message.starts_with("outcome unknown") {
            saw_unknown = v["fields"]["execution_id"].is_string();
        }
        if message == "call refused" && v["fields"]["kind"] == "invalid_arguments" {
            saw_refusal = v["fields"]["tool"] == "\"charge\"";
        }
    }
    assert!(saw_unknown, "no warn line for the unknown outcome");
    assert!(saw_refusal, "no line for the refusal in its call's span");
}

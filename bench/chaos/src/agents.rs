//! Careless agents: each makes calls through the fault proxy and the balancer, and retries the
//! way agents do — the same call after a timeout, sometimes with a new JSON-RPC id, sometimes
//! on a new connection — and now and then deliberately asks for a new action with a new key.
//! Every answer is noted: which execution ids each intent was told, and what it was last told.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::AGENT_TOKEN;
use crate::rng::Rng;

/// States an agent need not ask about again.
pub const FINAL: [&str; 6] = [
    "completed",
    "failed",
    "rejected",
    "denied",
    "cancelled",
    "resolved",
];

/// One intent (one operation key) as its agent saw it.
#[derive(Clone, Debug, Default)]
pub struct Intent {
    pub key: String,
    pub customer: String,
    pub amount: i64,
    /// Every execution id an answer named.
    pub executions: BTreeSet<String>,
    /// The last state an answer told, if any answer came.
    pub told: Option<String>,
    /// The execution that last answer named.
    pub last: Option<String>,
    /// States told along the way (`outcome_unknown` among them, when it was).
    pub seen: BTreeSet<String>,
}

impl Intent {
    pub fn settled(&self) -> bool {
        self.told.as_deref().is_some_and(|t| FINAL.contains(&t))
    }
}

/// What all agents did.
#[derive(Default)]
pub struct Tally {
    pub intents: Mutex<Vec<Intent>>,
    pub calls: AtomicU64,
    pub answered: AtomicU64,
    pub transport_errors: AtomicU64,
    pub refusals: AtomicU64,
    pub latencies: Mutex<Vec<Duration>>,
}

pub struct Agents {
    pub url: String,
    pub tally: Arc<Tally>,
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

/// The JSON-RPC message in a response body (JSON, or the SSE event that carries it).
fn message(body: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return Some(v);
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
}

/// One sessionless (2026-07-28) `tools/call`.
async fn call(http: &reqwest::Client, url: &str, rpc_id: u64, i: &Intent) -> Result<Value, String> {
    let body = json!({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {
        "name": "create_invoice",
        "arguments": {"customer": i.customer, "amount": i.amount},
        "idempotencyKey": i.key,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }});
    let r = http
        .post(url)
        .bearer_auth(AGENT_TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "create_invoice")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = r.status().as_u16();
    let text = r.text().await.map_err(|e| format!("read: {e}"))?;
    message(&text).ok_or_else(|| format!("HTTP {status}: no JSON-RPC answer"))
}

impl Agents {
    /// Asks about `intent` until it is settled or `attempts` run out; notes every answer.
    async fn pursue(&self, intent: &mut Intent, rng: &mut Rng, attempts: u32) {
        let mut http = client();
        let mut rpc_id = rng.next() >> 12;
        for _ in 0..attempts {
            self.tally.calls.fetch_add(1, Ordering::Relaxed);
            let started = Instant::now();
            match call(&http, &self.url, rpc_id, intent).await {
                Ok(m) => {
                    if let Some(ex) = m.pointer("/result/structuredContent/execution") {
                        self.tally.answered.fetch_add(1, Ordering::Relaxed);
                        self.tally.latencies.lock().unwrap().push(started.elapsed());
                        if let Some(id) = ex["execution_id"].as_str() {
                            intent.executions.insert(id.to_string());
                            intent.last = Some(id.to_string());
                        }
                        let state = ex["state"].as_str().unwrap_or("?").to_string();
                        intent.seen.insert(state.clone());
                        intent.told = Some(state);
                        if intent.settled() {
                            return;
                        }
                    } else {
                        // Refused before anything was recorded (busy, the store restarting, a
                        // replica that lost its lease): the same call again.
                        self.tally.refusals.fetch_add(1, Ordering::Relaxed);
                        if let Some(id) = m
                            .pointer("/error/data/execution_id")
                            .and_then(Value::as_str)
                        {
                            intent.executions.insert(id.to_string());
                        }
                    }
                }
                Err(_) => {
                    self.tally.transport_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            // A careless retry: sometimes a new JSON-RPC id, sometimes a new connection.
            if rng.chance(500) {
                rpc_id = rng.next() >> 12;
            }
            if rng.chance(200) {
                http = client();
            }
            tokio::time::sleep(Duration::from_millis(20 + rng.below(200))).await;
        }
    }

    /// One agent: new intents until `calls` have been made by all agents together.
    pub async fn run(self: Arc<Self>, n: u64, mut rng: Rng, calls: u64) {
        let mut k = 0u64;
        while self.tally.calls.load(Ordering::Relaxed) < calls {
            k += 1;
            let mut intent = Intent {
                key: format!("agent{n}-op{k}"),
                customer: format!("agent{n}-customer{k}"),
                amount: 1 + rng.below(1000) as i64,
                ..Intent::default()
            };
            self.pursue(&mut intent, &mut rng, 40).await;
            let again = intent.settled() && rng.chance(30);
            let (customer, amount) = (intent.customer.clone(), intent.amount);
            self.tally.intents.lock().unwrap().push(intent);
            if again {
                // A deliberate new action: the same arguments with a new key.
                let mut twin = Intent {
                    key: format!("agent{n}-op{k}-again"),
                    customer,
                    amount,
                    ..Intent::default()
                };
                self.pursue(&mut twin, &mut rng, 40).await;
                self.tally.intents.lock().unwrap().push(twin);
            }
        }
    }

    /// The recovery pass, with the faults stopped: every intent not settled is asked about
    /// again until it is (or 30 more attempts show it cannot be).
    pub async fn recover(self: Arc<Self>, rng: Rng) -> usize {
        let open: Vec<usize> = {
            let all = self.tally.intents.lock().unwrap();
            (0..all.len()).filter(|i| !all[*i].settled()).collect()
        };
        let mut tasks = Vec::new();
        for (n, chunk) in open.chunks(open.len().div_ceil(16).max(1)).enumerate() {
            let (me, chunk, mut rng) = (self.clone(), chunk.to_vec(), rng.fork(10_000 + n as u64));
            tasks.push(tokio::spawn(async move {
                for i in chunk {
                    let mut intent = me.tally.intents.lock().unwrap()[i].clone();
                    me.pursue(&mut intent, &mut rng, 30).await;
                    me.tally.intents.lock().unwrap()[i] = intent;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        open.len()
    }
}

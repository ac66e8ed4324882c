//! Approval webhooks (`[[approver.webhook]] url, secret`): each new approval request is POSTed
//! as JSON to every webhook, signed, and retried with backoff; how that went shows on the
//! Approvals page. A webhook only announces: its links lead to the console, where an operator
//! logs in and decides. Nothing is ever approved by a delivery or its failure.
//!
//! The request carries three headers:
//! - `Postern-Delivery`: this delivery's id (random; the same across its retries);
//! - `Postern-Timestamp`: Unix seconds when it was signed;
//! - `Postern-Signature`: `v1=` and the hex HMAC-SHA256, keyed with the webhook's secret, of
//!   `"{timestamp}.{delivery}."` followed by the raw body.
//!
//! A receiver checks it with [`SignatureCheck`] (or the same few lines in its own language,
//! docs/operators.md, "The operator console"): the MAC, a timestamp within the replay window, and a delivery
//! id not seen before within it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use postern_core::ExecutionId;
use postern_pipeline::{Gateway, Notice};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::ConsoleError;

/// Attempts per delivery; the waits between them double from [`FIRST_WAIT`].
const ATTEMPTS: u32 = 5;
const FIRST_WAIT: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_secs(10);
/// Executions whose delivery status is remembered (the oldest are forgotten first).
const REMEMBERED: usize = 10_000;

/// One webhook, its secret resolved.
#[derive(Clone)]
pub struct WebhookTarget {
    pub url: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WebhookTarget({})", self.url)
    }
}

/// The signature header's value for `body`.
pub fn sign(secret: &[u8], timestamp: i64, delivery: &str, body: &[u8]) -> String {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("any key length");
    m.update(format!("{timestamp}.{delivery}.").as_bytes());
    m.update(body);
    format!("v1={}", hex::encode(m.finalize().into_bytes()))
}

/// A receiver's check of Postern's webhook requests: signature, freshness, no replay.
pub struct SignatureCheck {
    secret: Vec<u8>,
    window: Duration,
    /// Delivery ids seen, with their timestamps (kept for one window).
    seen: Mutex<HashMap<String, i64>>,
}

impl SignatureCheck {
    /// `window`: how old a request may be (and how long its delivery id is remembered);
    /// five minutes is usual.
    pub fn new(secret: &[u8], window: Duration) -> SignatureCheck {
        SignatureCheck {
            secret: secret.to_vec(),
            window,
            seen: Mutex::default(),
        }
    }

    /// Accepts a request once: its headers' values and raw body, at Unix time `now`.
    pub fn verify(
        &self,
        signature: &str,
        timestamp: &str,
        delivery: &str,
        body: &[u8],
        now: i64,
    ) -> Result<(), ConsoleError> {
        let t: i64 = timestamp
            .trim()
            .parse()
            .map_err(|_| ConsoleError::Signature("the timestamp is not a number"))?;
        let expected = sign(&self.secret, t, delivery, body);
        if !bool::from(expected.as_bytes().ct_eq(signature.trim().as_bytes())) {
            return Err(ConsoleError::Signature(
                "the signature does not match (wrong secret, or the body was changed)",
            ));
        }
        let window = i64::try_from(self.window.as_secs()).unwrap_or(i64::MAX);
        if (now - t).abs() > window {
            return Err(ConsoleError::Signature(
                "the timestamp is outside the replay window",
            ));
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|_, at| (now - *at).abs() <= window);
        if seen.insert(delivery.to_string(), t).is_some() {
            return Err(ConsoleError::Signature(
                "this delivery was already accepted (a replay)",
            ));
        }
        Ok(())
    }
}

/// How the announcement of one request went, as the Approvals page shows it.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeliveryView {
    pub delivered: bool,
    pub failed: bool,
    pub detail: String,
}

/// Each request's delivery state per webhook URL, and the order requests were first seen
/// (the oldest are forgotten first).
type DeliveryTable = (
    HashMap<ExecutionId, Vec<(String, TargetState)>>,
    VecDeque<ExecutionId>,
);

/// Each request's delivery, per webhook.
#[derive(Default)]
pub(crate) struct Deliveries {
    inner: Mutex<DeliveryTable>,
}

#[derive(Clone, Debug)]
enum TargetState {
    Trying(u32, String),
    Delivered(u32),
    Failed(u32, String),
}

impl Deliveries {
    fn set(&self, id: ExecutionId, url: &str, state: TargetState) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if !map.contains_key(&id) {
            order.push_back(id);
            if order.len() > REMEMBERED {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
        let targets = map.entry(id).or_default();
        match targets.iter_mut().find(|(u, _)| u == url) {
            Some(slot) => slot.1 = state,
            None => targets.push((url.to_string(), state)),
        }
    }

    fn known(&self, id: ExecutionId) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .contains_key(&id)
    }

    pub fn view(&self, id: ExecutionId) -> Option<DeliveryView> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let targets = guard.0.get(&id)?;
        let mut v = DeliveryView {
            delivered: true,
            ..DeliveryView::default()
        };
        let mut details = Vec::new();
        for (url, state) in targets {
            match state {
                TargetState::Delivered(n) => {
                    details.push(format!("{url}: delivered (attempt {n})"))
                }
                TargetState::Trying(n, why) => {
                    v.delivered = false;
                    details.push(format!("{url}: attempt {n} failed ({why}), retrying"));
                }
                TargetState::Failed(n, why) => {
                    v.delivered = false;
                    v.failed = true;
                    details.push(format!("{url}: FAILED after {n} attempts ({why})"));
                }
            }
        }
        v.detail = details.join("; ");
        Some(v)
    }
}

pub(crate) fn start(
    gateway: Arc<Gateway>,
    targets: Vec<WebhookTarget>,
    deliveries: Arc<Deliveries>,
    stop: CancellationToken,
) -> Result<(), ConsoleError> {
    if targets.is_empty() {
        return Ok(());
    }
    // reqwest is built without a provider of its own; ring, as the channels use (once per process).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ConsoleError::Client(e.to_string()))?;
    let mut notices = gateway.notices().subscribe();
    tokio::spawn(async move {
        loop {
            let notice = tokio::select! {
                _ = stop.cancelled() => break,
                n = notices.recv() => n,
            };
            let ids = match notice {
                Ok(Notice::ApprovalRequested(id)) => vec![id],
                Ok(_) => continue,
                Err(RecvError::Closed) => break,
                // Missed notices: every waiting request not yet announced is announced now.
                Err(RecvError::Lagged(_)) => unannounced(&gateway, &deliveries).await,
            };
            for id in ids {
                for target in &targets {
                    deliveries.set(
                        id,
                        &target.url,
                        TargetState::Trying(0, "not yet sent".into()),
                    );
                    let job = Delivery {
                        gateway: gateway.clone(),
                        client: client.clone(),
                        target: target.clone(),
                        deliveries: deliveries.clone(),
                        id,
                    };
                    tokio::spawn(job.run(stop.clone()));
                }
            }
        }
    });
    Ok(())
}

async fn unannounced(gateway: &Gateway, deliveries: &Deliveries) -> Vec<ExecutionId> {
    let waiting = gateway
        .operator()
        .pending_page(postern_core::lifecycle::State::AwaitingApproval, 1000, None)
        .await
        .unwrap_or_default();
    waiting
        .iter()
        .filter_map(|p| p.execution_id.parse().ok())
        .filter(|id| !deliveries.known(*id))
        .collect()
}

struct Delivery {
    gateway: Arc<Gateway>,
    client: reqwest::Client,
    target: WebhookTarget,
    deliveries: Arc<Deliveries>,
    id: ExecutionId,
}

impl Delivery {
    async fn body(&self, delivery: &str) -> Option<Vec<u8>> {
        let p = self
            .gateway
            .operator()
            .pending_decision(self.id)
            .await
            .ok()?;
        let page = self.gateway.notices().approval_url(self.id);
        serde_json::to_vec(&serde_json::json!({
            "type": "approval_requested",
            "delivery_id": delivery,
            "approval_id": p.execution_id,
            "tool": p.tool,
            "actor": p.actor,
            "run_id": p.run_id,
            "fingerprint": p.fingerprint,
            "record": p.record,
            "request": p.request,
            "requested_at": p.since,
            "expires_at": p.expires_at,
            "page_url": page,
            "approve_url": format!("{page}#decide"),
            "deny_url": format!("{page}#decide"),
            "note": "Links lead to the Postern console: an operator logs in and decides there. This message decides nothing.",
        }))
        .ok()
    }

    async fn run(self, stop: CancellationToken) {
        let delivery = crate::session::random_hex();
        let Some(body) = self.body(&delivery).await else {
            return;
        };
        let mut wait = FIRST_WAIT;
        let mut why = String::new();
        for attempt in 1..=ATTEMPTS {
            let t = postern_pipeline::now().0 / 1000;
            let sent = self
                .client
                .post(&self.target.url)
                .header("content-type", "application/json")
                .header("postern-delivery", &delivery)
                .header("postern-timestamp", t.to_string())
                .header(
                    "postern-signature",
                    sign(&self.target.secret, t, &delivery, &body),
                )
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    self.deliveries
                        .set(self.id, &self.target.url, TargetState::Delivered(attempt));
                    return;
                }
                Ok(r) => why = format!("HTTP {}", r.status().as_u16()),
                Err(e) => {
                    why = if e.is_timeout() {
                        "timed out".into()
                    } else if e.is_connect() {
                        "connection refused or unreachable".into()
                    } else {
                        "request failed".into()
                    }
                }
            }
            self.deliveries.set(
                self.id,
                &self.target.url,
                TargetState::Trying(attempt, why.clone()),
            );
            if attempt < ATTEMPTS {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                wait *= 2;
            }
        }
        tracing::warn!(execution_id = %self.id, webhook = %self.target.url, reason = %why, "an approval request could not be announced to a webhook");
        self.deliveries.set(
            self.id,
            &self.target.url,
            TargetState::Failed(ATTEMPTS, why),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_request_is_accepted_once_and_only_while_fresh() {
        let check = SignatureCheck::new(b"s3cret", Duration::from_secs(300));
        let body = br#"{"type":"approval_requested"}"#;
        let sig = sign(b"s3cret", 1000, "d1", body);
        assert!(check.verify(&sig, "1000", "d1", body, 1010).is_ok());
        assert!(
            check.verify(&sig, "1000", "d1", body, 1011).is_err(),
            "replayed"
        );
        let sig2 = sign(b"s3cret", 1000, "d2", body);
        assert!(
            check.verify(&sig2, "1000", "d2", body, 2000).is_err(),
            "stale"
        );
        assert!(
            check.verify(&sig2, "1000", "d2", b"{}", 1001).is_err(),
            "changed body"
        );
        let other = sign(b"other", 1000, "d3", body);
        assert!(
            check.verify(&other, "1000", "d3", body, 1001).is_err(),
            "wrong secret"
        );
    }
}

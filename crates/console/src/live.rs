//! Live updates: `GET /ui/events` is a Server-Sent Events stream that says `approvals` whenever
//! what waits for people may have changed. This process's own notices arrive at once; changes
//! made by other replicas (or by `/ops`) are seen by a once-a-second look at the store's
//! waiting executions, made only while some page listens.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use futures_util::stream::{self, Stream};
use postern_core::lifecycle::State as LifecycleState;
use postern_ledger::ListFilter;
use postern_pipeline::Gateway;
use tokio::sync::{broadcast, watch};

use crate::ConsoleState;

/// How often the store is looked at for other replicas' changes.
const LOOK_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Live {
    generation: watch::Receiver<u64>,
}

/// What the waiting executions look like: a change in any part is a change to show.
async fn signature(gateway: &Gateway) -> Option<(u64, Option<i64>, Option<String>, u64)> {
    let health = gateway
        .ledger()
        .read()
        .health(postern_pipeline::now())
        .await
        .ok()?;
    let newest = gateway
        .ledger()
        .read()
        .list(&ListFilter {
            state: Some(LifecycleState::AwaitingApproval.as_str().to_string()),
            limit: 1,
            ..ListFilter::default()
        })
        .await
        .ok()?
        .first()
        .map(|s| s.id.to_string());
    Some((
        health.awaiting_approval,
        health.oldest_approval_since.map(|t| t.0),
        newest,
        health.needs_review,
    ))
}

impl Live {
    pub fn start(gateway: Arc<Gateway>) -> Live {
        let (tx, rx) = watch::channel(0u64);
        let mut notices = gateway.notices().subscribe();
        tokio::spawn(async move {
            let mut seen = None;
            let mut tick = tokio::time::interval(LOOK_EVERY);
            loop {
                let changed = tokio::select! {
                    n = notices.recv() => !matches!(n, Err(broadcast::error::RecvError::Closed)),
                    _ = tick.tick() => {
                        if tx.receiver_count() <= 1 {
                            continue;
                        }
                        let now = signature(&gateway).await;
                        let changed = now.is_some() && seen.is_some() && now != seen;
                        if now.is_some() {
                            seen = now;
                        }
                        changed
                    }
                };
                if changed {
                    tx.send_modify(|g| *g += 1);
                }
                if tx.is_closed() {
                    break;
                }
            }
        });
        Live { generation: rx }
    }
}

/// The page's event stream: one `approvals` event per change.
pub(crate) async fn events(State(st): State<Arc<ConsoleState>>) -> impl IntoResponse {
    let rx = st.live.generation.clone();
    let changes: std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>> =
        Box::pin(stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            let g = *rx.borrow_and_update();
            Some((
                Ok(Event::default().event("approvals").data(g.to_string())),
                rx,
            ))
        }));
    Sse::new(changes).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

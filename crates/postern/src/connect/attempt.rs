//! One attempt of a `tools/call` through the bridge, and an attempt that outlived its budget
//! still waiting for its answer (never cancelled of the bridge's accord).

use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResponse, ProgressToken};

use crate::connect::failure::{classify, Failure};
use crate::connect::Bridge;

/// An attempt still waiting for its answer: the gateway's answer, or why there is none (and
/// the session generation to rebuild when the link is gone).
pub(super) type Waiting<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<CallToolResponse, (Failure, Option<u64>)>>
            + Send
            + 'a,
    >,
>;

/// What one attempt came to.
pub(super) enum Attempted<'a> {
    Done(Result<CallToolResponse, Failure>),
    /// No answer within its budget; it keeps waiting.
    Waiting(Waiting<'a>, Failure),
}

/// The answer of the attempt still waiting, if one is (never, if none is).
pub(super) async fn still_running(
    running: &mut Option<Waiting<'_>>,
) -> Result<CallToolResponse, Failure> {
    match running {
        Some(answer) => {
            let out = answer.await.map_err(|(failure, _)| failure);
            *running = None;
            out
        }
        None => std::future::pending().await,
    }
}

impl Bridge {
    /// One attempt: its answer, or (no answer within `budget`) the attempt still waiting.
    pub(super) async fn attempt(
        &self,
        params: CallToolRequestParams,
        progress: Option<ProgressToken>,
        budget: Duration,
        agent_cancel: tokio_util::sync::CancellationToken,
    ) -> Attempted<'_> {
        let started = Instant::now();
        let (generation, peer) = match self.peer(budget).await {
            Ok(p) => p,
            Err(failure) => return Attempted::Done(Err(failure)),
        };
        let budget = budget
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(50));
        let bridge = self.clone();
        let mut answer: Waiting<'_> = Box::pin(async move {
            let sent = bridge
                .0
                .client
                .call_tool(peer.clone(), params, progress, agent_cancel)
                .await;
            sent.map_err(|e| {
                let failure = classify(&e);
                (
                    failure,
                    bridge.needs_rebuild(&peer, &e).then_some(generation),
                )
            })
        });
        match tokio::time::timeout(budget, &mut answer).await {
            Ok(Ok(response)) => Attempted::Done(Ok(response)),
            Ok(Err((failure, rebuild))) => {
                if let (Failure::Lost { .. }, Some(generation)) = (&failure, rebuild) {
                    self.discard(generation).await;
                }
                Attempted::Done(Err(failure))
            }
            // Not cancelled: the execution runs on at the gateway, and this attempt keeps
            // waiting for its answer while the next one attaches to it.
            Err(_) => Attempted::Waiting(
                answer,
                Failure::Lost {
                    reason: format!("no answer within {:.1}s", budget.as_secs_f64()),
                    sent: true,
                },
            ),
        }
    }
}

//! Keeps the store within its retention: a background pass prunes executions past their
//! tool's retention (`retention` on the tool, else `[gateway] retention`), with the transport
//! state and runs that age out with them. Unsettled executions are never pruned.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use postern_ledger::Retention;

use crate::gateway::Gateway;

/// What each tool keeps. A tool without a retention of its own (a read-only one has none)
/// keeps the gateway's.
pub fn retention_of(gateway: &Gateway) -> Retention {
    let default = gateway.config().gateway.retention;
    let by_tool: HashMap<String, Duration> = gateway
        .config()
        .tools
        .iter()
        .map(|t| {
            let keep = if t.retention.is_zero() {
                default
            } else {
                t.retention
            };
            (t.name.clone(), keep)
        })
        .collect();
    Retention { default, by_tool }
}

/// How often the pass runs: a quarter of the shortest retention, between 1 s and 10 min.
fn period(retention: &Retention) -> Duration {
    let shortest = retention
        .by_tool
        .values()
        .copied()
        .chain(std::iter::once(retention.default))
        .min()
        .unwrap_or(retention.default);
    (shortest / 4).clamp(Duration::from_secs(1), Duration::from_secs(600))
}

/// Starts the retention pass: now, then every period, for as long as the runtime runs.
pub fn keep_retention(gateway: &Arc<Gateway>) {
    let gateway = gateway.clone();
    tokio::spawn(async move {
        let retention = retention_of(&gateway);
        let every = period(&retention);
        loop {
            if let Err(e) = gateway.ledger().prune(&retention).await {
                tracing::warn!(error = %e, retry_in = ?every, "the retention pass failed; it runs again");
            }
            tokio::time::sleep(every).await;
        }
    });
}

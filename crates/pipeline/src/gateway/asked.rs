//! Answers that hold what a client gave. A call during which the target asked the caller's
//! client for input (an MCP upstream's elicitation, sampling or roots request) is recorded
//! with that noted; its answer may carry what the client answered — a name, an e-mail — so
//! an identical call from another run is told the execution's state and never shown that
//! answer from the record (nor by `execution_status`). The same run gets it back as any replay.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use postern_channels::ClientAsker;
use postern_core::ExecutionId;
use postern_ledger::ExecutionView;

use postern_ledger::Ledger;

use super::ToolCall;
use crate::error::GatewayError;
use crate::report::CallReport;

/// The detail key of an answer's event: the caller's client answered the target's question.
pub(super) const ASKED_CLIENT: &str = "asked_client";

/// `asker`, setting `asked` when the client answers a question.
pub(super) fn watched(asker: ClientAsker, asked: Arc<AtomicBool>) -> ClientAsker {
    let ask = asker.ask.clone();
    ClientAsker {
        client: asker.client,
        ask: Arc::new(move |method, params| {
            let ask = ask.clone();
            let asked = asked.clone();
            Box::pin(async move {
                let answer = ask(method, params).await;
                if answer.is_ok() {
                    asked.store(true, Ordering::Release);
                }
                answer
            })
        }),
    }
}

/// Whether the execution's client answered a question of the target during a call of it.
pub(super) fn asked_client(view: &ExecutionView) -> bool {
    view.events
        .iter()
        .any(|e| e.body.detail.get(ASKED_CLIENT) == Some(&serde_json::Value::Bool(true)))
}

/// What another run is told instead of such an answer.
pub(super) fn withheld_step(id: ExecutionId) -> String {
    format!("execution {id} already performed this call for another run, and its answer holds what that run's client gave when the target asked it (elicitation, sampling or roots): it is shown only to that run")
}

/// Takes the recorded answer out of `report` when the execution's client answered a
/// question of the target and this call is of another run.
pub(super) async fn withhold_from_other_runs(
    ledger: &Ledger,
    (id, run): (ExecutionId, Option<String>),
    call: &ToolCall,
    report: &mut CallReport,
) -> Result<(), GatewayError> {
    if report.response.is_none() || run == call.run_id {
        return Ok(());
    }
    let Some(view) = ledger.read().execution(id).await? else {
        return Ok(());
    };
    let asked = view
        .events
        .iter()
        .any(|e| e.body.detail.get(ASKED_CLIENT) == Some(&serde_json::Value::Bool(true)));
    if asked {
        report.response = None;
        report.next_step = Some(format!(
            "{}. The action itself is not repeated: {}",
            withheld_step(id),
            crate::report::new_action(report.window_ends)
        ));
    }
    Ok(())
}

//! MCP tasks (`io.modelcontextprotocol/tasks`) for tools declared long-running: the task id is
//! the execution id, a task is returned only once its execution is durably recorded, and
//! `tasks/get` reads the ledger — so a task's status survives a gateway restart.

use postern_core::lifecycle::State;
use postern_core::ExecutionId;
use postern_ledger::ExecutionSummary;
use rmcp::model::{DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload, TaskStatus};
use rmcp::ErrorData;

use postern_pipeline::CallReport;
use postern_pipeline::Gateway;
use postern_pipeline::GatewayError;

/// How often a client is asked to poll.
const POLL_INTERVAL_MS: u64 = 500;

fn status_of(state: State) -> TaskStatus {
    match state {
        State::Accepted | State::AwaitingApproval | State::Authorized | State::Dispatched => {
            TaskStatus::Working
        }
        State::Cancelled => TaskStatus::Cancelled,
        // Every other state is the execution's recorded answer (an honest `outcome_unknown`
        // included): the result says what happened and what to do next.
        _ => TaskStatus::Completed,
    }
}

/// The task view of an execution; `running`: its background run has not returned yet.
pub(crate) fn task_of(s: &ExecutionSummary, running: bool) -> Task {
    Task::new(
        s.id.to_string(),
        if running {
            TaskStatus::Working
        } else {
            status_of(s.lifecycle.state)
        },
        s.accepted_at.to_string(),
        s.state_since.to_string(),
    )
    .with_status_message(s.lifecycle.state.display_name())
    .with_poll_interval_ms(POLL_INTERVAL_MS)
}

pub(crate) fn unknown_task(task_id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "unknown task {:?}",
            task_id.chars().take(64).collect::<String>()
        ),
        None,
    )
}

pub(crate) fn parse_task_id(task_id: &str) -> Result<ExecutionId, ErrorData> {
    task_id.parse().map_err(|_| unknown_task(task_id))
}

/// `tasks/get`: the execution's state and, once it has one, its recorded result.
pub(crate) async fn get(
    gateway: &Gateway,
    actor: &str,
    task_id: &str,
    to_result: impl FnOnce(&CallReport) -> JsonObject,
) -> Result<GetTaskResult, ErrorData> {
    let id = parse_task_id(task_id)?;
    let (summary, report) = match gateway.records().recorded(id, actor).await {
        Ok(found) => found,
        Err(GatewayError::UnknownExecution(_)) => return Err(unknown_task(task_id)),
        Err(e) => return Err(ErrorData::internal_error(e.to_string(), None)),
    };
    let task = task_of(&summary, gateway.is_running(id));
    let payload = match task.status {
        TaskStatus::Completed => TaskPayload::Completed {
            result: to_result(&report),
        },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        _ => TaskPayload::Working,
    };
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

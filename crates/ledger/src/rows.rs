//! Decoding rows into the ledger's types. A row that does not decode is `Corrupt`, never a
//! default value.

use postern_audit::{ChainedEvent, Checkpoint, EventBody};
use postern_core::lifecycle::{Lifecycle, State};
use postern_core::{ActionClass, EventKind, ExecutionId, Fingerprint, Timestamp};

use crate::db::RowAccess;
use crate::error::LedgerError;
use crate::model::{CallRecord, ExecutionSummary, Run, RunEnd, StoredResult, ToolPin};

pub(crate) const SUMMARY_COLUMNS: &str = "id, actor, tool, class, fingerprint, intent_scope, operation_key, run_id, state, n, dispatches, cancel_requested, accepted_at, state_since, first_dispatched_at, rejection_retryable";

pub(crate) const EVENT_COLUMNS: &str =
    "chain, seq, execution_id, n, event, at, detail, prev_hash, hash";

fn corrupt(what: &str, e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Corrupt(format!("{what}: {e}"))
}

pub(crate) fn get_str(row: &impl RowAccess, col: &str) -> Result<String, LedgerError> {
    row.text(col)
}

fn get_opt_str(row: &impl RowAccess, col: &str) -> Result<Option<String>, LedgerError> {
    row.opt_text(col)
}

pub(crate) fn get_i64(row: &impl RowAccess, col: &str) -> Result<i64, LedgerError> {
    row.int(col)
}

fn get_u32(row: &impl RowAccess, col: &str) -> Result<u32, LedgerError> {
    u32::try_from(get_i64(row, col)?).map_err(|e| corrupt(col, e))
}

pub(crate) fn get_opt_i64(row: &impl RowAccess, col: &str) -> Result<Option<i64>, LedgerError> {
    row.opt_int(col)
}

pub(crate) fn parse_id(s: &str) -> Result<ExecutionId, LedgerError> {
    s.parse().map_err(|e| corrupt("execution id", e))
}

pub(crate) fn hash_from_hex(s: &str) -> Result<[u8; 32], LedgerError> {
    postern_core::hexdigits::decode32(s)
        .ok_or_else(|| corrupt("hash", format!("expected 64 hex digits, found {s:?}")))
}

pub(crate) fn summary(row: &impl RowAccess) -> Result<ExecutionSummary, LedgerError> {
    let class_name = get_str(row, "class")?;
    let class = ActionClass::ALL
        .into_iter()
        .find(|c| c.as_str() == class_name)
        .ok_or_else(|| corrupt("class", &class_name))?;
    let state: State = get_str(row, "state")?
        .parse()
        .map_err(|e| corrupt("state", e))?;
    let fingerprint: Fingerprint = get_str(row, "fingerprint")?
        .parse()
        .map_err(|e| corrupt("fingerprint", e))?;
    Ok(ExecutionSummary {
        id: parse_id(&get_str(row, "id")?)?,
        actor: get_str(row, "actor")?,
        tool: get_str(row, "tool")?,
        class,
        fingerprint,
        intent_scope: get_str(row, "intent_scope")?,
        operation_key: get_opt_str(row, "operation_key")?,
        run_id: get_opt_str(row, "run_id")?,
        lifecycle: Lifecycle {
            state,
            dispatches: get_u32(row, "dispatches")?,
            cancel_requested: get_i64(row, "cancel_requested")? != 0,
        },
        events: get_u32(row, "n")?,
        accepted_at: Timestamp(get_i64(row, "accepted_at")?),
        state_since: Timestamp(get_i64(row, "state_since")?),
        first_dispatched_at: get_opt_i64(row, "first_dispatched_at")?.map(Timestamp),
        rejection_retryable: get_i64(row, "rejection_retryable")? != 0,
    })
}

pub(crate) fn event(row: &impl RowAccess) -> Result<ChainedEvent, LedgerError> {
    let event: EventKind = get_str(row, "event")?
        .parse()
        .map_err(|e| corrupt("event", e))?;
    let detail =
        serde_json::from_str(&get_str(row, "detail")?).map_err(|e| corrupt("detail", e))?;
    Ok(ChainedEvent {
        body: EventBody {
            chain: get_str(row, "chain")?,
            seq: u64::try_from(get_i64(row, "seq")?).map_err(|e| corrupt("seq", e))?,
            execution_id: parse_id(&get_str(row, "execution_id")?)?,
            n: get_u32(row, "n")?,
            event,
            at: Timestamp(get_i64(row, "at")?),
            detail,
        },
        prev_hash: hash_from_hex(&get_str(row, "prev_hash")?)?,
        hash: hash_from_hex(&get_str(row, "hash")?)?,
    })
}

pub(crate) fn checkpoint(row: &impl RowAccess) -> Result<Checkpoint, LedgerError> {
    Ok(Checkpoint {
        chain: get_str(row, "chain")?,
        seq: u64::try_from(get_i64(row, "seq")?).map_err(|e| corrupt("seq", e))?,
        head_hash: hash_from_hex(&get_str(row, "head_hash")?)?,
        at: Timestamp(get_i64(row, "at")?),
        prev: match (row.opt_int("prev_seq")?, get_opt_str(row, "prev_hash")?) {
            (Some(seq), Some(hash)) => Some(postern_audit::CheckpointLink {
                seq: u64::try_from(seq).map_err(|e| corrupt("prev_seq", e))?,
                head_hash: hash_from_hex(&hash)?,
            }),
            _ => None,
        },
        key_id: get_str(row, "key_id")?,
        signature: get_str(row, "signature")?,
    })
}

/// The columns [`checkpoint`] reads.
pub(crate) const CHECKPOINT_COLUMNS: &str =
    "chain, seq, head_hash, at, prev_seq, prev_hash, key_id, signature";

pub(crate) fn pruned_range(
    row: &impl RowAccess,
) -> Result<postern_audit::PrunedRange, LedgerError> {
    let seq = |col: &str| u64::try_from(get_i64(row, col)?).map_err(|e| corrupt(col, e));
    Ok(postern_audit::PrunedRange {
        chain: get_str(row, "chain")?,
        from: seq("from_seq")?,
        to: seq("to_seq")?,
        before_hash: hash_from_hex(&get_str(row, "before_hash")?)?,
        to_hash: hash_from_hex(&get_str(row, "to_hash")?)?,
        at: Timestamp(get_i64(row, "at")?),
        key_id: get_str(row, "key_id")?,
        signature: get_str(row, "signature")?,
    })
}

pub(crate) fn result(row: &impl RowAccess) -> Result<StoredResult, LedgerError> {
    Ok(StoredResult {
        attempt: get_u32(row, "attempt")?,
        digest: get_str(row, "digest")?,
        size: u64::try_from(get_i64(row, "size")?).map_err(|e| corrupt("size", e))?,
        truncated: get_i64(row, "truncated")? != 0,
        body: row.blob("body")?,
    })
}

/// The columns [`run`] reads.
pub(crate) const RUN_COLUMNS: &str = "id, actor, client_name, client_version, client_address, principal_issuer, principal_subject, principal_client, protocol_version, transport, started_at, ended_at, end_reason, authorized_by, authorized_at, revoked_by, revoked_at";

pub(crate) fn run(row: &impl RowAccess) -> Result<Run, LedgerError> {
    Ok(Run {
        id: get_str(row, "id")?,
        actor: get_str(row, "actor")?,
        client_name: get_opt_str(row, "client_name")?,
        client_version: get_opt_str(row, "client_version")?,
        client_address: get_opt_str(row, "client_address")?,
        principal: match (
            get_opt_str(row, "principal_issuer")?,
            get_opt_str(row, "principal_subject")?,
        ) {
            (Some(issuer), Some(subject)) => Some(crate::model::RunPrincipal {
                issuer,
                subject,
                client_id: get_opt_str(row, "principal_client")?,
            }),
            _ => None,
        },
        protocol_version: get_opt_str(row, "protocol_version")?,
        transport: get_str(row, "transport")?,
        started_at: Timestamp(get_i64(row, "started_at")?),
        ended_at: get_opt_i64(row, "ended_at")?.map(Timestamp),
        end_reason: get_opt_str(row, "end_reason")?
            .map(|r| {
                RunEnd::ALL
                    .into_iter()
                    .find(|e| e.as_str() == r)
                    .ok_or_else(|| corrupt("end_reason", &r))
            })
            .transpose()?,
        authorized: decision(row, "authorized_by", "authorized_at")?,
        revoked: decision(row, "revoked_by", "revoked_at")?,
    })
}

pub(crate) const CALL_COLUMNS: &str =
    "at, actor, tool, run_id, request_id, execution_id, attempt, operation_key, outcome, instance";

pub(crate) fn call(row: &impl RowAccess) -> Result<CallRecord, LedgerError> {
    Ok(CallRecord {
        at: Timestamp(get_i64(row, "at")?),
        actor: get_str(row, "actor")?,
        tool: get_str(row, "tool")?,
        run_id: get_opt_str(row, "run_id")?,
        request_id: get_opt_str(row, "request_id")?,
        execution_id: get_opt_str(row, "execution_id")?
            .map(|s| parse_id(&s))
            .transpose()?,
        attempt: get_str(row, "attempt")?,
        operation_key: get_opt_str(row, "operation_key")?,
        outcome: get_str(row, "outcome")?,
        instance: get_str(row, "instance")?,
    })
}

pub(crate) fn tool_pin(row: &impl RowAccess) -> Result<ToolPin, LedgerError> {
    Ok(ToolPin {
        upstream: get_str(row, "upstream")?,
        tool: get_str(row, "tool")?,
        digest: get_str(row, "digest")?,
        definition: get_str(row, "definition")?,
        pinned_at: Timestamp(get_i64(row, "pinned_at")?),
        accepted_by: get_opt_str(row, "accepted_by")?,
    })
}

fn decision(
    row: &impl RowAccess,
    by: &str,
    at: &str,
) -> Result<Option<(String, Timestamp)>, LedgerError> {
    Ok(match (get_opt_str(row, by)?, get_opt_i64(row, at)?) {
        (Some(by), Some(at)) => Some((by, Timestamp(at))),
        _ => None,
    })
}

pub(crate) fn stream_event(
    row: &impl RowAccess,
) -> Result<crate::streams::StreamEvent, LedgerError> {
    Ok(crate::streams::StreamEvent {
        stream_id: get_str(row, "stream_id")?,
        n: u64::try_from(get_i64(row, "n")?).map_err(|e| corrupt("n", e))?,
        payload: get_str(row, "payload")?,
        execution_id: get_opt_str(row, "execution_id")?
            .map(|s| parse_id(&s))
            .transpose()?,
        last: get_i64(row, "last")? != 0,
        at: Timestamp(get_i64(row, "at")?),
    })
}

pub(crate) fn stream_owner(
    row: &impl RowAccess,
) -> Result<crate::streams::StreamOwner, LedgerError> {
    Ok(crate::streams::StreamOwner {
        stream_id: get_str(row, "stream_id")?,
        session_id: get_opt_str(row, "session_id")?,
        actor: get_str(row, "actor")?,
        at: Timestamp(get_i64(row, "at")?),
    })
}

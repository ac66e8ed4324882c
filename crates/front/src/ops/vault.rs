//! The vault from the operator API: whether it is configured and locked, unlocking it with
//! the passphrase (chained as a notice, or undone), and locking it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::{body, error, Operator, OpsState};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnlockBody {
    passphrase: String,
}

pub(super) async fn vault_state(State(st): State<Arc<OpsState>>) -> Response {
    match st.gateway.vault() {
        None => Json(json!({"configured": false, "locked": true, "names": []})).into_response(),
        Some(v) => match v.names() {
            Ok(names) => Json(json!({"configured": true, "locked": v.is_locked(), "names": names}))
                .into_response(),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        },
    }
}

pub(super) async fn vault_unlock(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
    raw: axum::body::Bytes,
) -> Response {
    let b: UnlockBody = match body(&raw) {
        Ok(b) => b,
        Err(_) => return error(StatusCode::BAD_REQUEST, "expected {\"passphrase\": \"…\"}"),
    };
    if st.gateway.vault().is_none() {
        return error(StatusCode::NOT_FOUND, "no [gateway] vault is configured");
    }
    // The key derivation takes a moment: off the async threads.
    let passphrase = zeroize::Zeroizing::new(b.passphrase);
    let gateway = st.gateway.clone();
    let unlocked =
        tokio::task::spawn_blocking(move || gateway.vault().map(|v| v.unlock(&passphrase))).await;
    match unlocked {
        Ok(Some(Ok(names))) => {
            // An operator decision that changes what the gateway will do: on the chain, or
            // undone.
            let detail = json!({"notice": "vault_unlocked", "by": operator, "names": names});
            if let Err(e) = st
                .gateway
                .ledger()
                .notice(None, detail, postern_pipeline::now())
                .await
            {
                if let Some(v) = st.gateway.vault() {
                    v.lock();
                }
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the unlock could not be recorded, so the vault stays locked: {e}"),
                );
            }
            tracing::info!(operator = %operator, "the vault was unlocked");
            Json(json!({"locked": false, "names": names, "unlocked_by": operator})).into_response()
        }
        Ok(Some(Err(postern_vault::VaultError::WrongPassphrase))) => error(
            StatusCode::FORBIDDEN,
            "wrong passphrase: the vault stays locked",
        ),
        Ok(Some(Err(e))) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        _ => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the unlock did not finish",
        ),
    }
}

pub(super) async fn vault_lock(
    State(st): State<Arc<OpsState>>,
    Extension(Operator(operator)): Extension<Operator>,
) -> Response {
    let Some(vault) = st.gateway.vault() else {
        return error(StatusCode::NOT_FOUND, "no [gateway] vault is configured");
    };
    vault.lock();
    let detail = json!({"notice": "vault_locked", "by": operator});
    if let Err(e) = st
        .gateway
        .ledger()
        .notice(None, detail, postern_pipeline::now())
        .await
    {
        // The lock took effect (it only takes power away); the record of it is what failed.
        tracing::error!(operator = %operator, "the vault was locked, but the lock could not be chained: {e}");
    }
    tracing::info!(operator = %operator, "the vault was locked");
    Json(json!({"locked": true, "locked_by": operator})).into_response()
}

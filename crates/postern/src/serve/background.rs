//! What runs beside the calls while the gateway serves: checkpoint signing, retention, the
//! takeover of a stopped instance's executions (and this instance's stop when it is taken
//! over), run expiry and approval expiry.

use std::sync::Arc;

use postern_pipeline::Gateway;

/// Starts what runs beside the calls (signing, retention, takeover, run expiry, approval
/// expiry); whether the gateway signs checkpoints.
pub(super) fn keep_background_work(gateway: &Arc<Gateway>) -> bool {
    let signs = gateway.config().gateway.signing_key.is_some();
    if signs {
        sign_periodically(gateway);
    }
    postern_pipeline::retention::keep_retention(gateway);
    // Another instance's executions, should it stop, are taken over while this one runs;
    // should this one be taken over (its lease lapsed), it stops: a restart rejoins fresh.
    gateway.ledger().keep_taking_over();
    let fenced = gateway.ledger().clone();
    tokio::spawn(async move {
        let by = fenced.taken_over().await;
        tracing::error!("postern: this gateway instance lost its lease and was taken over by {by}: it dispatches nothing more and stops now (restart it to rejoin)");
        // What it already answered is written first (deliveries, the calls log ride the
        // next commit): an answer given must not vanish from the record with the process.
        let flushed = tokio::time::timeout(std::time::Duration::from_secs(5), fenced.flush());
        if !matches!(flushed.await, Ok(Ok(()))) {
            tracing::error!("postern: the last held records (deliveries, calls log) could not be committed before stopping");
        }
        // Its chain's tail is signed before it goes (a checkpoint dispatches nothing, so the
        // fence allows it); the instance that took it over signs it too, should this fail.
        let signed = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            fenced.checkpoint(postern_pipeline::now()),
        );
        if let Ok(Err(e)) = signed.await {
            if !matches!(e, postern_ledger::LedgerError::NoSigningKey) {
                tracing::warn!(
                    "postern: could not sign this instance's chain before stopping: {e}"
                );
            }
        }
        std::process::exit(75);
    });
    gateway.runs().keep_expiry();
    if gateway.policy().waits_for_people() {
        expire_approvals_periodically(gateway);
    }
    signs
}

/// Signs the chain's head every `[gateway] checkpoint_every`, so a cut of the log's tail is
/// caught by a signature at most that long after the events were written.
fn sign_periodically(gateway: &Arc<Gateway>) {
    let gateway = gateway.clone();
    tokio::spawn(async move {
        let every = gateway.config().gateway.checkpoint_every;
        // At once first: the chain left by the last run is checked (and signed) now, not a
        // period later.
        loop {
            sign_head(&gateway).await;
            tokio::time::sleep(every).await;
        }
    });
}

/// Records `denied (expired)` for approval requests past their expiry, every second.
fn expire_approvals_periodically(gateway: &Arc<Gateway>) {
    let gateway = gateway.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if let Err(e) = gateway.expire_approvals().await {
                tracing::warn!(
                    "postern: expiring approval requests failed (tried again in 1 s): {e}"
                );
            }
        }
    });
}

/// Signs a checkpoint of the head (a no-op when the head is already signed).
pub(super) async fn sign_head(gateway: &Gateway) {
    match gateway.ledger().checkpoint(postern_pipeline::now()).await {
        Ok(_) => {}
        // Said once, as an error, by the ledger; status and the metric keep saying it.
        Err(postern_ledger::LedgerError::SigningRefused(_)) => {}
        Err(e) => tracing::warn!("postern: could not sign a checkpoint of the audit chain: {e}"),
    }
}

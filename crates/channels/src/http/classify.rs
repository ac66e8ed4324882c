//! What a failed exchange says about the target: [`HttpOutcome::NotSent`] only when nothing can
//! have reached it, [`HttpOutcome::Unknown`] otherwise.

use std::error::Error as StdError;

use crate::http::client::ConnectTimedOut;
use crate::http::tls;
use crate::http::HttpOutcome;

/// A send error. The connector's errors (TCP connect, TLS handshake) happened before any byte
/// of the request was written; so did a TLS handshake the target refused (see
/// [`tls::alert_refuses_handshake`]). Everything else happened on a connection that was up,
/// after the request may have been written.
pub(crate) fn send_error(host: &str, e: &hyper_util::client::legacy::Error) -> HttpOutcome {
    let handshake = rustls_error(e);
    if e.is_connect() {
        let reason = if let Some(timeout) = find::<ConnectTimedOut>(e) {
            format!("connect timed out: {timeout}")
        } else if let Some(tls) = handshake {
            tls::handshake_failure(host, tls)
        } else {
            format!("cannot connect: {}", error_chain(e))
        };
        return HttpOutcome::NotSent { reason };
    }
    if let Some(tls) = handshake.filter(|t| tls::alert_refuses_handshake(t)) {
        return HttpOutcome::NotSent {
            reason: format!(
                "{} (it refused the handshake, so it read nothing of the request)",
                tls::handshake_failure(host, tls)
            ),
        };
    }
    HttpOutcome::Unknown {
        reason: format!(
            "connection failed after it was established: {}",
            error_chain(e)
        ),
    }
}

/// Every error in `e`'s chain, `e` first. `io::Error` hides the error it wraps from `source()`
/// (it returns that error's own source), so each one is opened with `get_ref`.
fn causes<'a>(e: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut all = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        all.push(err);
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => err.source(),
        };
    }
    all
}

fn find<'a, T: StdError + 'static>(e: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    causes(e).into_iter().find_map(|c| c.downcast_ref::<T>())
}

/// The rustls error among `e`'s causes, if TLS is why it failed.
pub(crate) fn rustls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    find::<rustls::Error>(e)
}

/// The causes of `e` as one line. hyper's errors never quote the URL, so neither does this.
pub(crate) fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut text = String::new();
    for cause in causes(e).into_iter().skip(1) {
        let cause = cause.to_string();
        if !text.ends_with(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    if text.is_empty() {
        text = e.to_string();
    }
    text
}

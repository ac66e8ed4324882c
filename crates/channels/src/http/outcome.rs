//! What a dispatch produced, and how a status code is read.

use std::collections::BTreeMap;
use std::fmt;

pub use crate::channel::AnswerVerdict;

/// How status codes map to verdicts for one tool.
///
/// Defaults: 2xx → applied; 408 → unknown; 429 → rejected, retryable; every other 4xx →
/// rejected; 5xx → unknown; anything else (1xx, 3xx, non-standard codes) → unknown, since
/// redirects are never followed and say nothing certain about the effect. Specific status
/// codes can be overridden with [`OutcomeRules::with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutcomeRules {
    overrides: BTreeMap<u16, AnswerVerdict>,
}

impl OutcomeRules {
    pub fn new() -> Self {
        Self::default()
    }

    /// These rules with `status` read as `verdict`.
    pub fn with(mut self, status: u16, verdict: AnswerVerdict) -> Self {
        self.overrides.insert(status, verdict);
        self
    }

    /// The verdict for `status`: the override if there is one, else the default.
    pub fn verdict(&self, status: u16) -> AnswerVerdict {
        self.overrides
            .get(&status)
            .copied()
            .unwrap_or_else(|| Self::default_verdict(status))
    }

    /// The verdict for `status` without overrides.
    pub fn default_verdict(status: u16) -> AnswerVerdict {
        match status {
            200..=299 => AnswerVerdict::Applied,
            408 => AnswerVerdict::Unknown,
            429 => AnswerVerdict::Rejected { retryable: true },
            400..=499 => AnswerVerdict::Rejected { retryable: false },
            _ => AnswerVerdict::Unknown,
        }
    }
}

/// The result of one dispatch. Never an error type: every way a request can end is one of
/// these, and which one is a claim about the target that the ledger records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpOutcome {
    /// Provably nothing reached the target: connection refused, DNS failure, TLS failure,
    /// connect timeout, or a request that could not be built. Retryable.
    NotSent { reason: String },
    /// Sent, and no definitive answer: response timeout or reset after the request went out
    /// (also a reset whose timing cannot be proven to precede sending).
    Unknown { reason: String },
    /// The target answered.
    Answered(HttpAnswer),
}

/// What the target answered, with the credential redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    pub verdict: AnswerVerdict,
    /// Only headers of interest (names lower-case, in the order received): content-type,
    /// location, retry-after, etag, and any header whose name mentions idempotency.
    pub headers: Vec<(String, String)>,
    /// The body, at most `max_response_bytes` of it.
    pub body: Vec<u8>,
    /// How many body bytes the target sent (all of them, not only the stored ones).
    pub size: u64,
    /// The stored body is not the whole body: it was over `max_response_bytes`, or the body
    /// was cut short (`body_error`).
    pub truncated: bool,
    /// Why reading the body stopped early (timeout, reset), if it did. The status still stands:
    /// the target answered.
    pub body_error: Option<String>,
}

impl HttpAnswer {
    /// The first header of interest called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for HttpAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpAnswer")
            .field("status", &self.status)
            .field("verdict", &self.verdict)
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .field("size", &self.size)
            .field("truncated", &self.truncated)
            .field("body_error", &self.body_error)
            .finish()
    }
}

/// Whether a response header is kept in the answer.
pub(crate) fn header_of_interest(name: &str) -> bool {
    matches!(name, "content-type" | "location" | "retry-after" | "etag") || name.contains("idempot")
}

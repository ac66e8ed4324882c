//! [`HttpTool`]: the HTTP channel bound to one tool's contract — its action request, its
//! status query and precondition — implementing [`Channel`].

use std::sync::Arc;
use std::time::Duration;

use postern_core::contract::{HttpBody, HttpRequestSpec, HttpSpec, RecoverySpec};
use serde_json::{json, Map, Value};

use super::{
    check_template, render_url, render_url_for_record, HttpDispatch, HttpOutcome, HttpSender,
    OutcomeRules, TlsProfile,
};
use crate::channel::{Action, Answer, Channel, Outcome, Pending, Question, Reading};
use crate::ChannelError;

/// One HTTP tool: where its requests go and how they are built.
pub struct HttpTool {
    request: HttpRequestSpec,
    body: HttpBody,
    /// The header that carries the execution id on the action (not on reads).
    idempotency_header: Option<String>,
    connect_timeout: Duration,
    response_timeout: Duration,
    status_query: Option<HttpRequestSpec>,
    precondition: Option<HttpRequestSpec>,
    tls: Option<Arc<TlsProfile>>,
    sender: Arc<dyn HttpSender>,
    max_response_bytes: usize,
}

impl HttpTool {
    /// The tool of `spec`, its probes from `recovery`; every URL template is checked.
    /// `read_only` tools send no idempotency key. Requests go through `sender`.
    pub fn new(
        spec: &HttpSpec,
        recovery: &RecoverySpec,
        read_only: bool,
        tls: Option<Arc<TlsProfile>>,
        sender: Arc<dyn HttpSender>,
        max_response_bytes: usize,
    ) -> Result<HttpTool, ChannelError> {
        for request in std::iter::once(&spec.request)
            .chain(&recovery.status_query)
            .chain(&recovery.precondition)
        {
            check_template(&request.url)?;
        }
        Ok(HttpTool {
            request: spec.request.clone(),
            body: spec.body.clone(),
            idempotency_header: (!read_only).then(|| spec.idempotency_header.clone()),
            connect_timeout: spec.connect_timeout,
            response_timeout: spec.response_timeout,
            status_query: recovery.status_query.clone(),
            precondition: recovery.precondition.clone(),
            tls,
            sender,
            max_response_bytes,
        })
    }

    fn dispatch(
        &self,
        req: &HttpRequestSpec,
        action: &Action<'_>,
        keyed: bool,
    ) -> Result<HttpDispatch, String> {
        let url = render_url(&req.url, action.arguments, action.execution_id)
            .map_err(|e| e.to_string())?;
        let mut d = HttpDispatch::new(req.method.clone(), url);
        d.credential = action.credential.clone();
        // The status query and precondition go out under the same trust and client
        // certificate as the action.
        d.tls = self.tls.clone();
        d.also_redact = action.secrets.clone();
        d.max_response_bytes = self.max_response_bytes;
        d.outcome_rules = OutcomeRules::new();
        d.connect_timeout = self.connect_timeout;
        d.response_timeout = self.response_timeout;
        d.traceparent = action.traceparent.clone();
        if keyed {
            if let Some(header) = &self.idempotency_header {
                d.idempotency = Some((header.clone(), action.execution_id.to_string()));
            }
        }
        Ok(d)
    }
}

impl Channel for HttpTool {
    fn target(
        &self,
        arguments: &Map<String, Value>,
        secret: &dyn Fn(&str) -> bool,
    ) -> Result<Value, String> {
        for request in std::iter::once(&self.request)
            .chain(&self.status_query)
            .chain(&self.precondition)
        {
            // Any id will do for the check: ids are unreserved characters only.
            render_url(&request.url, arguments, "exe_check").map_err(|e| e.to_string())?;
        }
        let url = render_url_for_record(&self.request.url, arguments, secret, None)
            .map_err(|e| e.to_string())?;
        Ok(json!({"target": {"method": self.request.method, "url": url}}))
    }

    fn send<'a>(&'a self, action: Action<'a>) -> Pending<'a, Outcome> {
        Box::pin(async move {
            let mut d = match self.dispatch(&self.request, &action, true) {
                Ok(d) => d,
                // Nothing of this attempt left: the URL could not even be built.
                Err(reason) => return Outcome::NotSent { reason },
            };
            d.body = match self.body {
                HttpBody::Arguments => match serde_json::to_vec(action.arguments) {
                    Ok(body) => Some(body),
                    Err(e) => {
                        return Outcome::NotSent {
                            reason: e.to_string(),
                        }
                    }
                },
                HttpBody::None => None,
            };
            self.sender.send(d).await.into()
        })
    }

    fn ask<'a>(&'a self, question: Question, action: Action<'a>) -> Option<Pending<'a, Reading>> {
        let request = match question {
            Question::Status => self.status_query.as_ref()?,
            Question::Precondition => self.precondition.as_ref()?,
            Question::Marker => return None,
        };
        Some(Box::pin(async move {
            let Ok(d) = self.dispatch(request, &action, false) else {
                return Reading::NoAnswer;
            };
            match self.sender.read(d).await {
                HttpOutcome::Answered(a) if (200..300).contains(&a.status) => {
                    match Outcome::from(HttpOutcome::Answered(a)) {
                        Outcome::Answered(answer) => Reading::Yes(answer),
                        _ => Reading::NoAnswer,
                    }
                }
                HttpOutcome::Answered(a) if a.status == 404 => Reading::NotFound,
                HttpOutcome::Answered(a) if a.status < 500 => Reading::No,
                _ => Reading::NoAnswer,
            }
        }))
    }
}

impl From<HttpOutcome> for Outcome {
    fn from(outcome: HttpOutcome) -> Outcome {
        match outcome {
            HttpOutcome::NotSent { reason } => Outcome::NotSent { reason },
            HttpOutcome::Unknown { reason } => Outcome::Unknown { reason },
            HttpOutcome::Answered(a) => Outcome::Answered(Answer {
                status: Some(a.status),
                verdict: a.verdict,
                body: a.body,
                size: a.size,
                truncated: a.truncated,
                whole: None,
            }),
        }
    }
}

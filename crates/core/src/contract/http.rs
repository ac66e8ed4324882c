//! The HTTP channel's part of a contract: a request template, its credential, timeouts and
//! the CA file its `https://` requests trust.

use std::time::Duration;

use serde_json::Value;

use super::channel::{ChannelRules, FieldErr, Probes, StatusProbe};
use super::{validate_request, ChannelKind, ContractError};

/// How an HTTP request body is built from the arguments.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpBody {
    /// No body.
    None,
    /// The (validated) arguments object as a JSON body.
    Arguments,
}

/// An HTTP request template; `{name}` in the URL is replaced by the argument `name`
/// (percent-encoded), `{execution_id}` by the execution id.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HttpRequestSpec {
    pub method: String,
    pub url: String,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HttpSpec {
    pub request: HttpRequestSpec,
    pub credential: Option<String>,
    pub body: HttpBody,
    /// Header that carries the execution id on every non-read request.
    pub idempotency_header: String,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// A PEM file of CA certificates (relative to the config file) that the tool's `https://`
    /// requests trust instead of the webpki roots.
    pub ca_file: Option<String>,
}

impl ChannelRules for HttpSpec {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Http
    }

    fn target(&self) -> String {
        self.request.url.clone()
    }

    fn method(&self) -> String {
        self.request.method.clone()
    }

    fn credential_ref(&self) -> Option<&str> {
        self.credential.as_deref()
    }

    fn validate(&self, _input_schema: &Value, err: FieldErr<'_>) -> Result<(), ContractError> {
        validate_request(&self.request, &|r| err("http", r))?;
        if self.idempotency_header.is_empty()
            || !self
                .idempotency_header
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(err(
                "http.idempotency_header",
                format!("{:?} is not a valid header name", self.idempotency_header),
            ));
        }
        if self.response_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(err("http", "timeouts must be greater than zero".into()));
        }
        Ok(())
    }

    fn probes(&self) -> Probes {
        Probes {
            status: StatusProbe::HttpQuery,
            precondition: true,
            marker: false,
        }
    }

    fn ca_file(&self) -> Option<&str> {
        self.ca_file.as_deref()
    }
}

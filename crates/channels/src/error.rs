//! The one error type of this crate. Messages name placeholders, fields and kinds — never the
//! value of an argument or a credential.

/// Why a channel could not be set up or a request could not be rendered. A dispatch itself
/// never fails with this: its result is an [`HttpOutcome`](crate::http::HttpOutcome).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// The URL template is malformed (unbalanced or empty braces).
    #[error("url template {template:?}: {reason}")]
    Template { template: String, reason: String },
    /// A `{placeholder}` names an argument that the call does not have.
    #[error("url placeholder {{{placeholder}}}: no argument {placeholder:?} to fill it")]
    MissingArgument { placeholder: String },
    /// A `{placeholder}` names an argument whose JSON type has no URL form.
    #[error(
        "url placeholder {{{placeholder}}}: argument {placeholder:?} is {kind}; only strings, numbers and booleans can be put in a URL"
    )]
    UnrenderableArgument {
        placeholder: String,
        kind: &'static str,
    },
    /// The rendered URL would not go where the template says: an argument made a `.`, `..` or
    /// empty path segment (which the URL parser or the target resolves to another path), or a
    /// placeholder stands where it could change the scheme, host or port.
    #[error("url placeholder(s) {}: the value would change where the request goes (a `.`, `..` or empty path segment, or another origin); refused, nothing sent", .placeholders.join(", "))]
    Steered { placeholders: Vec<String> },
    /// A template whose placeholders could change the origin (scheme, host, port).
    #[error("url template {template:?}: a placeholder may stand only in the path or the query, not in the scheme, host or port")]
    PlaceholderInOrigin { template: String },
    /// TLS material (a CA file, a client certificate or key) cannot be used. The message says
    /// what is wrong with it, never its content; the caller names the file.
    #[error("{reason}")]
    Tls { reason: String },
    /// The credential cannot be used on this channel.
    #[error("credential: {reason}")]
    Credential { reason: String },
}

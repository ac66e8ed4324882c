//! The one error type of this crate. Messages name placeholders, fields and kinds — never the
//! value of an argument or a credential.

/// Why a channel could not be set up or a request could not be rendered. A dispatch itself
/// never fails with this: its result is an [`HttpOutcome`](crate::http::HttpOutcome).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {reason}")]
    Client { reason: String },
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
    /// The credential cannot be used on this channel.
    #[error("credential: {reason}")]
    Credential { reason: String },
}

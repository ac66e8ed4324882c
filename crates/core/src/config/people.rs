//! The people of a config: `[[actor]]` (agents' identities, what each may call, how its runs
//! are authorized) and `[[operator]]` (who decides approvals), each checked as it is built.
//! Errors are (byte offset of the entry's name, message), placed by the caller.

use std::collections::BTreeMap;

use super::raw::{RawActor, RawOperator};
use super::{Actor, CertificateFingerprint, Operator, SecretRef, SessionApproval, Upstream};
use crate::contract::ToolContract;

type Fault = (usize, String);

/// The actors, in order; `tls`: whether the gateway listens with TLS (client certificates).
pub(super) fn actors(
    raw: Vec<RawActor>,
    tools: &[ToolContract],
    upstreams: &BTreeMap<String, Upstream>,
    issuers: &[super::Issuer],
    tls: bool,
) -> Result<Vec<Actor>, Fault> {
    let mut actors: Vec<Actor> = Vec::new();
    for a in raw {
        let offset = a.name.span().start;
        let name = a.name.into_inner();
        if name.is_empty() || actors.iter().any(|x| x.name == name) {
            return Err((offset, format!("actor {name:?} is empty or declared twice")));
        }
        if name.contains('/') {
            // A run an agent names is kept as `ACTOR/RUN`: one actor's run ids must not be
            // able to stand for another's.
            return Err((
                offset,
                format!(
                    "actor {name:?}: an actor name may not contain '/' (runs are named ACTOR/RUN)"
                ),
            ));
        }
        // contract §6 makes `required` the default once session authorization exists; until
        // then a missing key means what the gateway does (`auto`), and an explicit
        // `required` is refused at start-up (`Gateway::new`).
        let session_approval = match a.session_approval.as_deref() {
            Some("required") => SessionApproval::Required,
            None | Some("auto") => SessionApproval::Auto,
            Some(other) => {
                return Err((
                    offset,
                    format!(
                    "actor {name:?}: session_approval {other:?} is not \"auto\" or \"required\""
                ),
                ))
            }
        };
        let allowed = match a.tools {
            None => None,
            Some(list) => {
                let exposed_all = |t: &str| {
                    t.strip_suffix('*').is_some_and(|stem| {
                        upstreams
                            .values()
                            .filter_map(|u| u.expose_all.as_ref())
                            .any(|e| e.prefix == stem)
                    })
                };
                if let Some(unknown) = list.iter().find(|t| {
                    !tools.iter().any(|c| &c.name == *t)
                        && *t != crate::contract::EXECUTION_STATUS
                        && !exposed_all(t)
                }) {
                    return Err((
                        offset,
                        format!("actor {name:?}: tool {unknown:?} is not declared (an upstream's expose = \"all\" tools are named \"PREFIX*\")"),
                    ));
                }
                Some(list.into_iter().collect())
            }
        };
        let client_cert_fingerprint = match a.client_cert_fingerprint.as_deref() {
            None => None,
            Some(_) if !tls => {
                return Err((
                    offset,
                    format!("actor {name:?}: client_cert_fingerprint needs [gateway] tls (a client certificate is only ever shown in a TLS handshake)"),
                ))
            }
            Some(text) => {
                let fingerprint = CertificateFingerprint::parse(text).map_err(|m| {
                    (offset, format!("actor {name:?}: client_cert_fingerprint: {m}"))
                })?;
                if let Some(other) = actors
                    .iter()
                    .find(|x| x.client_cert_fingerprint == Some(fingerprint))
                {
                    return Err((
                        offset,
                        format!("actors {:?} and {name:?} have the same client_cert_fingerprint: each actor needs its own certificate", other.name),
                    ));
                }
                Some(fingerprint)
            }
        };
        if matches!(a.token, Some(SecretRef::Vault(_))) {
            return Err((offset, format!("actor {name:?}: a token cannot come from the vault (calls are authenticated before it is unlocked)")));
        }
        let claims = a
            .claims
            .map(|c| super::identity::claims(c, &format!("actor {name:?}"), issuers))
            .transpose()
            .map_err(|m| (offset, m))?;
        actors.push(Actor {
            name,
            token: a.token,
            client_cert_fingerprint,
            session_approval,
            claims,
            tools: allowed,
        });
    }
    Ok(actors)
}

/// The operators, in order: each with a static token, an issuer's claims, or both.
pub(super) fn operators(
    raw: Vec<RawOperator>,
    issuers: &[super::Issuer],
) -> Result<Vec<Operator>, Fault> {
    let mut operators: Vec<Operator> = Vec::new();
    for o in raw {
        let offset = o.name.span().start;
        let name = o.name.into_inner();
        if name.is_empty() || operators.iter().any(|x| x.name == name) {
            return Err((
                offset,
                format!("operator {name:?} is empty or declared twice"),
            ));
        }
        if matches!(o.token, Some(SecretRef::Vault(_))) {
            return Err((offset, format!("operator {name:?}: a token cannot come from the vault (an operator unlocks it)")));
        }
        let claims = o
            .claims
            .map(|c| super::identity::claims(c, &format!("operator {name:?}"), issuers))
            .transpose()
            .map_err(|m| (offset, m))?;
        if o.token.is_none() && claims.is_none() {
            return Err((
                offset,
                format!(
                    "operator {name:?} needs a token or claims (an [[issuer]]'s access tokens)"
                ),
            ));
        }
        operators.push(Operator {
            name,
            token: o.token,
            claims,
        });
    }
    Ok(operators)
}

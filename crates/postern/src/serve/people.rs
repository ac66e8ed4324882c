//! Who may reach the gateway, resolved at start-up: the actors' and operators' static tokens,
//! the introspection secrets of the `[[issuer]]`s, and the console's setup (its sign-in with
//! the identity provider, its webhooks).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use postern_audit::SigningKey;
use postern_core::config::Config;

use crate::{resolve_store_path, secrets};

/// Each actor's token → the actor: long, and none shared.
pub(super) fn actor_tokens(config: &Config, dir: &Path) -> Result<HashMap<String, String>> {
    let mut tokens = HashMap::new();
    for actor in &config.actors {
        if let Some(r) = &actor.token {
            let token = secrets::resolve(r, dir)
                .with_context(|| format!("token of actor {}", actor.name))?;
            if token.len() < 16 {
                bail!(
                    "the token of actor {} is shorter than 16 characters; use a long random token",
                    actor.name
                );
            }
            if let Some(other) = tokens.insert(token, actor.name.clone()) {
                bail!(
                    "actors {other} and {} have the same token: each actor needs its own (a shared \
                     token would make every call of one count as the other's)",
                    actor.name
                );
            }
        }
    }
    Ok(tokens)
}

/// Each operator's token → the operator: long, none shared, none an actor's.
pub(super) fn operator_tokens(
    config: &Config,
    dir: &Path,
    tokens: &HashMap<String, String>,
) -> Result<HashMap<String, String>> {
    let mut operators = HashMap::new();
    for operator in &config.operators {
        // An operator known by an issuer's access tokens alone has no static token.
        let Some(token) = &operator.token else {
            continue;
        };
        let token = secrets::resolve(token, dir)
            .with_context(|| format!("token of operator {}", operator.name))?;
        if token.len() < 16 {
            bail!(
                "the token of operator {} is shorter than 16 characters; use a long random token",
                operator.name
            );
        }
        if let Some(actor) = tokens.get(&token) {
            bail!(
                "operator {} has the token of actor {actor}: an operator needs a token no actor \
                 holds (an agent must never approve its own calls)",
                operator.name
            );
        }
        if let Some(other) = operators.insert(token, operator.name.clone()) {
            bail!(
                "operators {other} and {} have the same token: each operator needs its own (every \
                 decision names who made it)",
                operator.name
            );
        }
    }
    Ok(operators)
}

/// Each introspecting issuer's client secret, by its URL.
pub(super) fn introspection_secrets(
    config: &Config,
    dir: &Path,
) -> Result<HashMap<String, String>> {
    let mut secrets = HashMap::new();
    for issuer in &config.issuers {
        if let Some(i) = &issuer.introspection {
            let secret = secrets::resolve(&i.client_secret, dir).with_context(|| {
                format!("the introspection client secret of issuer {}", issuer.url)
            })?;
            secrets.insert(issuer.url.clone(), secret);
        }
    }
    Ok(secrets)
}

/// The operator console's setup (`None` without any operator: no one could log in).
pub(super) fn console_setup(
    config: &Config,
    dir: &Path,
    (operators, tokens): (&HashMap<String, String>, &HashMap<String, String>),
    signing_key: Option<&Arc<SigningKey>>,
    issuers: Option<&postern_identity::Issuers>,
) -> Result<Option<postern_console::ConsoleSetup>> {
    let sign_in = match (&config.console.sign_in, issuers) {
        (Some(settings), Some(issuers)) => {
            let secret = secrets::resolve(&settings.client_secret, dir)
                .context("the console's sign-in client secret")?;
            if secret.trim().is_empty() {
                bail!("the console's sign-in client secret is empty");
            }
            let gateway_secret = secrets::resolve(&config.gateway.fingerprint_key, dir)
                .context("fingerprint key")?;
            Some(postern_console::SignInSetup::new(
                settings.clone(),
                secret,
                issuers.clone(),
                &gateway_secret,
            ))
        }
        _ => None,
    };
    let mut webhooks = Vec::new();
    for w in &config.console.webhooks {
        let secret = secrets::resolve(&w.secret, dir)
            .with_context(|| format!("the secret of approver.webhook {}", w.url))?;
        if secret.len() < 16 {
            bail!("the secret of approver.webhook {} is shorter than 16 characters; use a long random secret", w.url);
        }
        webhooks.push(postern_console::WebhookTarget {
            url: w.url.clone(),
            secret: secret.into_bytes(),
        });
    }
    Ok(
        (!operators.is_empty() || sign_in.is_some()).then(|| postern_console::ConsoleSetup {
            sign_in,
            operators: operators.clone(),
            actor_tokens: tokens.keys().cloned().collect(),
            store_url: resolve_store_path(&config.gateway.store, dir),
            verifying_key: signing_key.map(|k| k.verifying_key()),
            secure_cookie: config.gateway.tls.is_some()
                || config
                    .console
                    .public_url
                    .as_deref()
                    .is_some_and(|u| u.starts_with("https://")),
            webhooks,
        }),
    )
}

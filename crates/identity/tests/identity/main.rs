//! The resource-server check against a real issuer on loopback (discovery and key set over
//! HTTP): what is accepted, each refusal of issue 50, and how often the key set is fetched.

use std::time::Duration;

use postern_core::config::Issuer;
use postern_identity::{Issuers, TokenError};
use postern_testkit::issuer::TestIssuer;
use serde_json::json;

const RESOURCE: &str = "http://127.0.0.1:8750/mcp";

fn settings(url: &str, jwks_refresh: Duration) -> Issuer {
    Issuer {
        url: url.to_string(),
        audience: None,
        algorithms: vec!["ES256".into(), "RS256".into()],
        leeway: Duration::from_secs(5),
        jwks_refresh,
        groups_claim: "groups".into(),
        tool_scopes: Default::default(),
        introspection: None,
        introspection_cache: Duration::from_secs(30),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn a_valid_token_names_its_principal() {
    let idp = TestIssuer::start().await;
    let issuers = Issuers::new(
        &[settings(&idp.url, Duration::from_secs(60))],
        Default::default(),
    );
    let token = idp.token(json!({
        "sub": "user-7", "aud": RESOURCE, "azp": "claude", "groups": ["agents", "ops"],
        "scope": "mcp:tools invoices:write",
    }));
    let p = issuers.verify(&token, RESOURCE).await.unwrap();
    assert_eq!(p.issuer, idp.url);
    assert_eq!(p.subject, "user-7");
    assert_eq!(p.client_id.as_deref(), Some("claude"));
    assert_eq!(p.groups, ["agents", "ops"]);
    assert_eq!(p.scopes, ["mcp:tools", "invoices:write"]);
    // Okta names the client `cid`.
    let okta = idp.token(json!({"sub": "u", "aud": RESOURCE, "cid": "0oa1okta"}));
    let p = issuers.verify(&okta, RESOURCE).await.unwrap();
    assert_eq!(p.client_id.as_deref(), Some("0oa1okta"));
    // An audience given as a list, with ours in it, is ours.
    let listed = idp.token(json!({"sub": "u", "aud": ["other", RESOURCE]}));
    assert!(issuers.verify(&listed, RESOURCE).await.is_ok());
}

#[tokio::test]
async fn each_forged_or_misdirected_token_is_refused_with_its_reason() {
    let idp = TestIssuer::start().await;
    let other = TestIssuer::start().await;
    let issuers = Issuers::new(
        &[settings(&idp.url, Duration::from_secs(60))],
        Default::default(),
    );
    let t = now();
    let cases = [
        (
            idp.token(json!({"sub": "u", "aud": "http://elsewhere/mcp"})),
            TokenError::Audience(RESOURCE.into()),
        ),
        (
            other.token(json!({"sub": "u", "aud": RESOURCE})),
            TokenError::UnknownIssuer(other.url.clone()),
        ),
        (
            idp.token(json!({"sub": "u", "aud": RESOURCE, "exp": t - 60})),
            TokenError::Expired,
        ),
        (
            idp.token(json!({"sub": "u", "aud": RESOURCE, "nbf": t + 60})),
            TokenError::NotYetValid,
        ),
        (
            idp.token(json!({"aud": RESOURCE})),
            TokenError::MissingClaim("sub".into()),
        ),
    ];
    for (token, expected) in cases {
        assert_eq!(
            issuers.verify(&token, RESOURCE).await.unwrap_err(),
            expected
        );
    }
    // `alg: none` and HS256 keyed with the public key never reach a key.
    let none = idp.unsigned(json!({"sub": "u", "aud": RESOURCE}));
    let e = issuers.verify(&none, RESOURCE).await.unwrap_err();
    assert!(
        matches!(e, TokenError::Algorithm { ref alg, .. } if alg == "none"),
        "{e}"
    );
    let confused = idp.hs256_with_public_key(json!({"sub": "u", "aud": RESOURCE}));
    let e = issuers.verify(&confused, RESOURCE).await.unwrap_err();
    assert!(
        matches!(e, TokenError::Algorithm { ref alg, .. } if alg == "HS256"),
        "{e}"
    );
    // Another key's signature on a published kid.
    idp.hidden_key("k9");
    let mut parts: Vec<String> = idp
        .signed_by("k9", json!({"sub": "u", "aud": RESOURCE}))
        .split('.')
        .map(str::to_string)
        .collect();
    let genuine: Vec<String> = idp
        .token(json!({"sub": "u", "aud": RESOURCE}))
        .split('.')
        .map(str::to_string)
        .collect();
    parts[0] = genuine[0].clone();
    let e = issuers
        .verify(&parts.join("."), RESOURCE)
        .await
        .unwrap_err();
    assert_eq!(e, TokenError::Signature);
    // No error says anything of the token.
    for token in [none, confused] {
        let e = issuers
            .verify(&token, RESOURCE)
            .await
            .unwrap_err()
            .to_string();
        assert!(!e.contains(&token[..20]), "{e}");
    }
}

#[tokio::test]
async fn unknown_kids_fetch_the_key_set_once_per_interval() {
    let idp = TestIssuer::start().await;
    let issuers = Issuers::new(
        &[settings(&idp.url, Duration::from_millis(500))],
        Default::default(),
    );
    let good = idp.token(json!({"sub": "u", "aud": RESOURCE}));
    issuers.verify(&good, RESOURCE).await.unwrap();
    assert_eq!(idp.jwks_fetches(), 1);
    // A flood of tokens naming keys nobody publishes: one more fetch (the interval since the
    // first has passed), then refusals.
    tokio::time::sleep(Duration::from_millis(600)).await;
    idp.hidden_key("ghost");
    let ghost = idp.signed_by("ghost", json!({"sub": "u", "aud": RESOURCE}));
    for _ in 0..50 {
        let e = issuers.verify(&ghost, RESOURCE).await.unwrap_err();
        assert!(
            matches!(e, TokenError::UnknownKey { ref kid, .. } if kid == "ghost"),
            "{e}"
        );
    }
    assert_eq!(idp.jwks_fetches(), 2, "one refetch for 50 unknown kids");
    // The provider rotates: a new key is found once the interval has passed.
    idp.publish_key("k2");
    let rotated = idp.signed_by("k2", json!({"sub": "u", "aud": RESOURCE}));
    tokio::time::sleep(Duration::from_millis(600)).await;
    issuers.verify(&rotated, RESOURCE).await.unwrap();
    assert_eq!(idp.jwks_fetches(), 3);
}

#[tokio::test]
async fn keys_held_stay_in_use_while_the_provider_is_down() {
    let idp = TestIssuer::start().await;
    let issuers = Issuers::new(
        &[settings(&idp.url, Duration::from_millis(10))],
        Default::default(),
    );
    issuers.warm().await;
    idp.set_down(true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let good = idp.token(json!({"sub": "u", "aud": RESOURCE}));
    assert!(
        issuers.verify(&good, RESOURCE).await.is_ok(),
        "the cached key"
    );
    idp.publish_key("k2");
    let rotated = idp.signed_by("k2", json!({"sub": "u", "aud": RESOURCE}));
    let e = issuers.verify(&rotated, RESOURCE).await.unwrap_err();
    assert!(
        matches!(e, TokenError::KeysUnavailable { ref reason, .. } if reason.contains("503")),
        "{e}"
    );
    assert!(e.to_string().contains("cannot be fetched"), "{e}");
    // Back up: the new key is fetched.
    idp.set_down(false);
    tokio::time::sleep(Duration::from_millis(20)).await;
    issuers.verify(&rotated, RESOURCE).await.unwrap();
}

/// A provider down when the gateway starts is not held against the first token: its keys are
/// fetched when that token arrives, however soon.
#[tokio::test]
async fn a_provider_down_at_start_up_is_fetched_for_the_first_token() {
    let idp = TestIssuer::start().await;
    let issuers = Issuers::new(
        &[settings(&idp.url, Duration::from_secs(60))],
        Default::default(),
    );
    idp.set_down(true);
    issuers.warm().await;
    idp.set_down(false);
    let token = idp.token(json!({"sub": "u", "aud": RESOURCE}));
    issuers.verify(&token, RESOURCE).await.unwrap();
    assert_eq!(idp.jwks_fetches(), 1);
}

/// A token verified once is believed from memory, but only for the resource it was verified
/// for: the same token presented to another resource is checked again and refused for its
/// audience.
#[tokio::test]
async fn a_verified_token_is_remembered_for_its_resource_only() {
    let idp = TestIssuer::start().await;
    let issuers = Issuers::new(
        &[settings(&idp.url, Duration::from_secs(60))],
        Default::default(),
    );
    let token = idp.token(json!({"sub": "u", "aud": RESOURCE}));
    assert!(issuers.verify(&token, RESOURCE).await.is_ok());
    assert!(issuers.verify_cached(&token, RESOURCE).is_ok());
    let other = "http://127.0.0.1:1/ops";
    assert_eq!(
        issuers.verify(&token, other).await.unwrap_err(),
        TokenError::Audience(other.into())
    );
    // An expired token is never remembered past its end.
    let short = idp.token(json!({"sub": "u", "aud": RESOURCE, "exp": now() - 10}));
    assert_eq!(
        issuers.verify(&short, RESOURCE).await.unwrap_err(),
        TokenError::Expired
    );
}

/// A key the issuer withdraws from its key set stops being trusted once the set held is older
/// than five `jwks_refresh` (at most five minutes), even though tokens keep naming a key id the
/// gateway already holds; a key still published keeps working.
#[tokio::test]
async fn a_withdrawn_key_stops_verifying_once_the_held_set_is_old() {
    let idp = TestIssuer::start().await;
    idp.publish_key("k2");
    let issuers = Issuers::new(
        &[settings(&idp.url, Duration::from_millis(100))],
        Default::default(),
    );
    let claims = |n: u32| json!({"sub": format!("u{n}"), "aud": RESOURCE});
    assert!(issuers
        .verify(&idp.token(claims(1)), RESOURCE)
        .await
        .is_ok());
    idp.withdraw_key("k1");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let refused = issuers.verify(&idp.token(claims(2)), RESOURCE).await;
    assert!(
        matches!(refused, Err(TokenError::UnknownKey { .. })),
        "{refused:?}"
    );
    let still = idp.signed_by("k2", claims(3));
    assert!(issuers.verify(&still, RESOURCE).await.is_ok());
}

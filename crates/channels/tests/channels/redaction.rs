//! The credential never comes back out of the channel: not in the answer, not in `Debug`.

use postern_channels::http::{basic_token, Credential, HttpChannel, HttpOutcome, Secret, REDACTED};
use postern_core::config::CredentialKind;

use crate::support::{answered, dispatch, TestServer};

const TOKEN: &str = "sk_live_9f8e7d6c5b4a";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn an_echoed_bearer_token_is_redacted_in_body_and_headers() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new().unwrap();
    let mut req = dispatch("POST", server.url("/echo-auth"));
    req.credential = Some(Credential::Bearer(Secret::new(TOKEN)));
    let outcome = channel.dispatch(req).await;

    let debug = format!("{outcome:?}");
    assert!(!debug.contains(TOKEN), "{debug}");
    let answer = answered(outcome);
    assert_eq!(
        server.seen()[0].headers["authorization"],
        format!("Bearer {TOKEN}")
    );
    assert_eq!(
        String::from_utf8(answer.body.clone()).unwrap(),
        r#"{"you_sent":"Bearer [REDACTED]"}"#
    );
    assert_eq!(answer.header("etag"), Some("\"Bearer [REDACTED]\""));
    assert_eq!(
        answer.header("location"),
        Some("/things?auth=Bearer+[REDACTED]")
    );
    assert!(!format!("{answer:?}").contains(TOKEN));
}

#[tokio::test]
async fn basic_auth_is_redacted_as_password_and_as_base64_token() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new().unwrap();
    let password = Secret::new("hunter2-pw");
    let token = basic_token("alice", &password);

    let mut req = dispatch("POST", server.url("/echo-auth"));
    req.credential = Some(Credential::Basic {
        username: "alice".to_string(),
        password: password.clone(),
    });
    let answer = answered(channel.dispatch(req.clone()).await);
    assert_eq!(
        server.seen()[0].headers["authorization"],
        format!("Basic {token}")
    );
    assert!(!contains(&answer.body, token.as_bytes()));
    assert!(contains(&answer.body, b"Basic [REDACTED]"));
    assert_eq!(answer.header("etag"), Some("\"Basic [REDACTED]\""));

    // The password itself, echoed back in the body.
    req.url = server.url("/echo-body");
    req.body = Some(br#"{"note":"my password is hunter2-pw"}"#.to_vec());
    let answer = answered(channel.dispatch(req).await);
    assert_eq!(answer.body, br#"{"note":"my password is [REDACTED]"}"#);
    assert!(!format!("{answer:?}").contains("hunter2-pw"));
}

#[tokio::test]
async fn a_header_credential_is_redacted() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new().unwrap();
    let mut req = dispatch("POST", server.url("/echo-body"));
    req.credential = Some(Credential::Header {
        name: "X-Api-Key".to_string(),
        value: Secret::new(TOKEN),
    });
    req.body = Some(format!("{TOKEN}{TOKEN}").into_bytes());
    let answer = answered(channel.dispatch(req).await);
    assert_eq!(answer.body, b"[REDACTED][REDACTED]");
    assert_eq!(answer.size, 2 * TOKEN.len() as u64);
}

#[tokio::test]
async fn a_secret_straddling_the_cap_does_not_leak_in_part() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new().unwrap();
    let mut req = dispatch("POST", server.url("/echo-body"));
    req.credential = Some(Credential::Bearer(Secret::new(TOKEN)));
    // The secret starts 5 bytes before the cap.
    req.body = Some(format!("0123456789{TOKEN}tail").into_bytes());
    req.max_response_bytes = 15;
    let answer = answered(channel.dispatch(req).await);
    assert!(answer.truncated);
    assert_eq!(answer.size, (10 + TOKEN.len() + 4) as u64);
    assert_eq!(answer.body, b"0123456789[REDA");
    assert!(!contains(&answer.body, &TOKEN.as_bytes()[..5]));
    assert!(answer.body.len() <= 15);
}

#[test]
fn secrets_do_not_print() {
    let secret = Secret::new(TOKEN);
    assert_eq!(format!("{secret:?}"), "<redacted>");
    assert_eq!(secret.expose(), TOKEN);
    let credential = Credential::Basic {
        username: "alice".to_string(),
        password: Secret::new(TOKEN),
    };
    let mut req = dispatch("POST", "http://127.0.0.1:9/x".to_string());
    req.credential = Some(credential.clone());
    assert!(!format!("{credential:?}").contains(TOKEN));
    assert!(!format!("{req:?}").contains(TOKEN));
    assert_eq!(REDACTED, b"[REDACTED]");
}

#[test]
fn credentials_come_from_configured_kinds() {
    let secret = || Secret::new(TOKEN);
    assert_eq!(
        Credential::from_kind(&CredentialKind::Bearer, secret()).unwrap(),
        Credential::Bearer(secret())
    );
    assert_eq!(
        Credential::from_kind(
            &CredentialKind::Basic {
                username: "u".to_string()
            },
            secret()
        )
        .unwrap(),
        Credential::Basic {
            username: "u".to_string(),
            password: secret()
        }
    );
    assert_eq!(
        Credential::from_kind(
            &CredentialKind::Header {
                name: "X-Key".to_string()
            },
            secret()
        )
        .unwrap(),
        Credential::Header {
            name: "X-Key".to_string(),
            value: secret()
        }
    );
    let err = Credential::from_kind(&CredentialKind::SshKey, secret()).unwrap_err();
    assert!(err.to_string().contains("ssh_key"));
    assert!(!err.to_string().contains(TOKEN));
}

#[tokio::test]
async fn not_sent_and_unknown_reasons_never_carry_the_secret() {
    let channel = HttpChannel::new().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut req = dispatch("GET", format!("http://{addr}/x"));
    req.credential = Some(Credential::Bearer(Secret::new(TOKEN)));
    let outcome = channel.dispatch(req).await;
    assert!(matches!(outcome, HttpOutcome::NotSent { .. }));
    assert!(!format!("{outcome:?}").contains(TOKEN));
}

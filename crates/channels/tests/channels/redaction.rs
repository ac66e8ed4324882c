//! The credential never comes back out of the channel: not in the answer, not in `Debug`.

use postern_channels::http::{basic_token, Credential, HttpChannel, HttpOutcome, Secret, REDACTED};
use postern_core::config::CredentialKind;

use postern_testkit::leaks::{base64_of, leaked_windows};

use crate::support::{answered, dispatch, TestServer};

const TOKEN: &str = "sk_live_9f8e7d6c5b4a";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn an_echoed_bearer_token_is_redacted_in_body_and_headers() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
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
    let channel = HttpChannel::new();
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
    let channel = HttpChannel::new();
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
    let channel = HttpChannel::new();
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
    // An ssh_key is the SSH channel's private key: no HTTP request carries it.
    assert_eq!(
        Credential::from_kind(&CredentialKind::SshKey, secret()).unwrap(),
        Credential::PrivateKey(secret())
    );
    let err = Credential::from_kind(&CredentialKind::Mtls, secret()).unwrap_err();
    assert!(!err.to_string().contains(TOKEN));
}

#[tokio::test]
async fn not_sent_and_unknown_reasons_never_carry_the_secret() {
    let channel = HttpChannel::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut req = dispatch("GET", format!("http://{addr}/x"));
    req.credential = Some(Credential::Bearer(Secret::new(TOKEN)));
    let outcome = channel.dispatch(req).await;
    assert!(matches!(outcome, HttpOutcome::NotSent { .. }));
    assert!(!format!("{outcome:?}").contains(TOKEN));
}

/// Issue 12: a target that echoes a secret encoded (base64 std/URL-safe, with or without
/// padding; percent-encoded; JSON-escaped) or echoes one of the call's own secret arguments must
/// not get it stored. A real server echoes the request body; the body holds every form.
#[tokio::test]
async fn every_encoded_form_of_every_secret_is_redacted() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let token = "tok/with+odd=chars é\"q\\";
    let card = "4111-1111 1111/1111";
    for (credential, also) in [
        (Some(Credential::Bearer(Secret::new(token))), vec![]),
        (None, vec![Secret::new(card)]),
        (
            Some(Credential::Header {
                name: "X-Key".into(),
                value: Secret::new(card),
            }),
            vec![Secret::new(token)],
        ),
    ] {
        let secrets: Vec<String> = credential
            .as_ref()
            .map(|c| match c {
                Credential::Bearer(s)
                | Credential::Header { value: s, .. }
                | Credential::PrivateKey(s) => s.expose(),
                Credential::Basic { password, .. } => password.expose(),
            })
            .into_iter()
            .chain(also.iter().map(Secret::expose))
            .map(str::to_string)
            .collect();
        let mut body = Vec::new();
        for secret in &secrets {
            for form in postern_channels::http::secret_forms(secret) {
                body.extend_from_slice(b" <");
                body.extend_from_slice(&form);
                body.extend_from_slice(b"> ");
            }
        }
        let mut req = dispatch("POST", server.url("/echo-body"));
        req.credential = credential;
        req.also_redact = also;
        req.body = Some(body);
        let answer = answered(channel.dispatch(req).await);
        for secret in &secrets {
            for form in postern_channels::http::secret_forms(secret) {
                assert!(
                    !contains(&answer.body, &form),
                    "{:?} survived in {:?}",
                    String::from_utf8_lossy(&form),
                    String::from_utf8_lossy(&answer.body)
                );
            }
        }
        assert!(contains(&answer.body, REDACTED));
    }
}

#[test]
fn the_forms_are_the_encodings_a_target_would_write() {
    let forms: Vec<String> = postern_channels::http::secret_forms("a/b+é")
        .into_iter()
        .map(|f| String::from_utf8(f).unwrap())
        .collect();
    for expected in [
        "a/b+é",          // raw
        "YS9iK8Op",       // base64 (no padding needed)
        "YS9iK8Op",       // URL-safe is the same here
        "a%2Fb%2B%C3%A9", // percent, upper
        "a%2fb%2b%c3%a9", // percent, lower
        "a\\/b+é",        // JSON with `/` escaped
        "a/b+\\u00e9",    // JSON, ASCII only
        "a/b+\\u00E9",    // the same, upper-case hex
    ] {
        assert!(
            forms.iter().any(|f| f == expected),
            "{expected} not in {forms:?}"
        );
    }
    let padded = postern_channels::http::secret_forms("ab?");
    assert!(padded.contains(&b"YWI/".to_vec()) && padded.contains(&b"YWI_".to_vec()));
    // A secret ending in `"`: its JSON form ends in `\"`, not in a lone backslash.
    let quoted = postern_channels::http::secret_forms("ab\"");
    assert!(quoted.contains(&br#"ab\""#.to_vec()), "{quoted:?}");
    assert!(!quoted.contains(&br"ab\".to_vec()), "{quoted:?}");
    let padded = postern_channels::http::secret_forms("abcd");
    for f in ["YWJjZA==", "YWJjZA", "YWJjZA"] {
        assert!(padded.contains(&f.as_bytes().to_vec()), "{f}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
    /// Any secret (credential or secret argument), echoed in any of its forms with any text
    /// around it, is stored redacted.
    #[test]
    fn any_secret_echoed_in_any_form_is_redacted(
        secret in "[ -~é€/+=]{3,24}",
        around in "[a-z0-9 ]{0,6}",
        as_argument in proptest::bool::ANY,
    ) {
        static WORLD: std::sync::OnceLock<(tokio::runtime::Runtime, TestServer)> = std::sync::OnceLock::new();
        let (rt, server) = WORLD.get_or_init(|| {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let server = rt.block_on(TestServer::start());
            (rt, server)
        });
        let forms = postern_channels::http::secret_forms(&secret);
        let mut body = Vec::new();
        for form in &forms {
            body.extend_from_slice(around.as_bytes());
            body.extend_from_slice(form);
        }
        body.extend_from_slice(around.as_bytes());
        let mut req = dispatch("POST", server.url("/echo-body"));
        if as_argument {
            req.also_redact = vec![Secret::new(secret.clone())];
        } else {
            req.credential = Some(Credential::Bearer(Secret::new(secret.clone())));
        }
        req.body = Some(body);
        let channel = HttpChannel::new();
        let answer = answered(rt.block_on(channel.dispatch(req)));
        for form in &forms {
            proptest::prop_assert!(!contains(&answer.body, form), "{:?} survived", String::from_utf8_lossy(form));
        }
    }
}

/// The secret as a JSON encoder may write it inside a string: each character in `escape`'s
/// positions as `\uXXXX` (hex case from `upper`), `/` as `\/` when `slash`, `"` and `\` always
/// escaped.
fn json_escaped(secret: &str, escape: &[bool], upper: bool, slash: bool) -> String {
    let mut out = String::new();
    for (i, c) in secret.chars().enumerate() {
        if escape.get(i).copied().unwrap_or(false) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                let hex = format!("{u:04x}");
                out.push_str("\\u");
                out.push_str(&if upper { hex.to_uppercase() } else { hex });
            }
        } else {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if slash => out.push_str("\\/"),
                c => out.push(c),
            }
        }
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 96, ..Default::default() })]
    /// Issue 33: a secret written by any JSON encoder — any subset of its characters as
    /// `\uXXXX` (either hex case), `/` as `\/` — decodes, for whoever reads the answer, to the
    /// secret; the stored answer must decode to `[REDACTED]` instead, in a whole document and in
    /// one cut short. Issue 49: and with any padding before it and a cap anywhere across it
    /// (`cut`: the cap falls that many bytes into the written secret), read as a JSON reader
    /// reads it, the answer holds no 4 characters of the secret in a row.
    #[test]
    fn a_secret_behind_any_json_escapes_is_redacted_where_it_would_decode(
        secret in "[ -~é€/+=]{6,24}",
        escape in proptest::collection::vec(proptest::bool::ANY, 24),
        upper in proptest::bool::ANY,
        slash in proptest::bool::ANY,
        whole in proptest::bool::ANY,
        pad in 0usize..48,
        cut in proptest::option::of(0usize..160),
    ) {
        static WORLD: std::sync::OnceLock<(tokio::runtime::Runtime, TestServer)> = std::sync::OnceLock::new();
        let (rt, server) = WORLD.get_or_init(|| {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let server = rt.block_on(TestServer::start());
            (rt, server)
        });
        let written = json_escaped(&secret, &escape, upper, slash);
        let before = format!("{{\"received\":\"{}", ".".repeat(pad));
        let after = if whole { "\",\"n\":1}" } else { "\",\"rest\":\"cut sh" };
        let body = format!("{before}{written}{after}");
        let mut req = dispatch("POST", server.url("/echo-body"));
        req.credential = Some(Credential::Bearer(Secret::new(secret.clone())));
        req.body = Some(body.into_bytes());
        let cap = cut.map(|c| before.len() + c % (written.len() + 1));
        if let Some(cap) = cap {
            req.max_response_bytes = cap;
        }
        let answer = answered(rt.block_on(HttpChannel::new().dispatch(req)));
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        if let Some(cap) = cap {
            proptest::prop_assert!(answer.body.len() <= cap && answer.truncated);
        } else if whole {
            let decoded: serde_json::Value = serde_json::from_str(&text).unwrap();
            let expected = format!("{}[REDACTED]", ".".repeat(pad));
            proptest::prop_assert_eq!(&decoded["received"], &expected, "{}", text);
        }
        let leaked = leaked_windows(&secret, &format!("{before}\u{0}{after}"), &text);
        proptest::prop_assert!(leaked.is_empty(), "{:?} of {:?} in {}", leaked, secret, text);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
    /// Issue 49: a target that answers with the whole request base64-encoded (standard or
    /// URL-safe, `+` and `/` JSON-escaped or not), the credential at any of the three byte
    /// alignments, the cap anywhere across it: the answer holds no 4 characters in a row of
    /// those that encode the credential alone (the characters that stay the same whatever the
    /// bytes around it are).
    #[test]
    fn a_whole_request_echoed_in_base64_never_carries_the_credential(
        secret in "[ -~é€]{8,24}",
        pad in "[a-z]{0,5}",
        url_safe in proptest::bool::ANY,
        escaped in proptest::bool::ANY,
        basic in proptest::bool::ANY,
        cut in proptest::option::of(0usize..240),
    ) {
        static WORLD: std::sync::OnceLock<(tokio::runtime::Runtime, TestServer)> = std::sync::OnceLock::new();
        let (rt, server) = WORLD.get_or_init(|| {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let server = rt.block_on(TestServer::start());
            (rt, server)
        });
        let password = Secret::new(secret.clone());
        let (credential, shown) = if basic {
            let token = basic_token("alice", &password);
            (Credential::Basic { username: "alice".into(), password }, format!("Basic {token}"))
        } else {
            (Credential::Bearer(password), format!("Bearer {secret}"))
        };
        let head = format!("POST /echo?pad={pad} HTTP/1.1\r\nauthorization: ");
        let request = format!("{head}{shown}\r\ncontent-length: 2\r\n\r\n{{}}");
        // Which characters encode the credential alone: those unchanged when every other byte
        // goes from all zeros to all ones.
        let protected = head.len() + shown.find(' ').unwrap() + 1..head.len() + shown.len();
        let with_others = |b: u8| {
            let mut bytes = request.clone().into_bytes();
            for (i, byte) in bytes.iter_mut().enumerate() {
                if !protected.contains(&i) {
                    *byte = b;
                }
            }
            base64_of(&bytes, url_safe)
        };
        let (zeros, ones) = (with_others(0), with_others(0xFF));
        let encoded = base64_of(request.as_bytes(), url_safe);
        let mut core = String::new();
        let mut around = String::new();
        for ((c, z), o) in encoded.chars().zip(zeros.chars()).zip(ones.chars()) {
            if z == o && c != '=' {
                core.push(c);
            } else {
                around.push(c);
            }
        }
        let write = |s: &str| if escaped { s.replace('+', "\\u002B").replace('/', "\\/") } else { s.to_string() };
        let body = format!("{{\"request\":\"{}\"}}", write(&encoded));
        let mut req = dispatch("POST", server.url("/echo-body"));
        req.credential = Some(credential);
        req.body = Some(body.clone().into_bytes());
        if let Some(c) = cut {
            req.max_response_bytes = 12 + c % (body.len() - 11);
        }
        let answer = answered(rt.block_on(HttpChannel::new().dispatch(req)));
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        proptest::prop_assert!(core.len() >= 8, "{}", core);
        let leaked = leaked_windows(&core, &write(&around), &text);
        proptest::prop_assert!(leaked.is_empty(), "{:?} of {:?} in {}", leaked, core, text);
        if cut.is_none() {
            proptest::prop_assert!(text.contains("[REDACTED]"), "{}", text);
        }
    }
}

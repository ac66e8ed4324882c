//! `render_url`: placeholders, percent-encoding, and errors that name the placeholder.

use postern_channels::http::{percent_encode, render_url};
use postern_channels::ChannelError;
use serde_json::{json, Map, Value};

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

#[test]
fn placeholders_are_filled_and_percent_encoded() {
    let a = args(json!({
        "customer": "cus 1/2?x=y&z#f",
        "amount": 42,
        "ratio": -1.5,
        "live": true,
        "name": "Zoë~_.-",
    }));
    let url = render_url(
        "http://127.0.0.1:8080/customers/{customer}/charges?amount={amount}&r={ratio}&live={live}&n={name}&key={execution_id}",
        &a,
        "exe_01ABC",
    )
    .unwrap();
    assert_eq!(
        url,
        "http://127.0.0.1:8080/customers/cus%201%2F2%3Fx%3Dy%26z%23f/charges?amount=42&r=-1.5&live=true&n=Zo%C3%AB~_.-&key=exe_01ABC"
    );
}

#[test]
fn text_without_placeholders_is_kept_as_written() {
    let url = "http://127.0.0.1/a%20b?x=1";
    assert_eq!(render_url(url, &Map::new(), "exe_1").unwrap(), url);
}

#[test]
fn execution_id_is_the_execution_id_even_if_an_argument_has_that_name() {
    let a = args(json!({"execution_id": "spoofed"}));
    assert_eq!(
        render_url("http://h/{execution_id}", &a, "exe_real").unwrap(),
        "http://h/exe_real"
    );
}

#[test]
fn percent_encode_keeps_only_the_unreserved_set() {
    assert_eq!(percent_encode("AZaz09-._~"), "AZaz09-._~");
    assert_eq!(
        percent_encode(" !\"#$%&'()*+,/:;=?@[]"),
        "%20%21%22%23%24%25%26%27%28%29%2A%2B%2C%2F%3A%3B%3D%3F%40%5B%5D"
    );
    assert_eq!(percent_encode("€"), "%E2%82%AC");
    assert_eq!(percent_encode(""), "");
}

#[test]
fn a_missing_argument_is_an_error_naming_the_placeholder() {
    let err = render_url("http://h/{customer}/x", &Map::new(), "exe_1").unwrap_err();
    assert_eq!(
        err,
        ChannelError::MissingArgument {
            placeholder: "customer".to_string()
        }
    );
    assert!(err.to_string().contains("{customer}"), "{err}");
}

#[test]
fn arguments_without_a_url_form_are_errors_that_do_not_quote_the_value() {
    for (value, kind) in [
        (json!({"secret": "s3cr3t"}), "an object"),
        (json!(["s3cr3t"]), "an array"),
        (json!(null), "null"),
    ] {
        let a = args(json!({ "p": value }));
        let err = render_url("http://h/{p}", &a, "exe_1").unwrap_err();
        assert_eq!(
            err,
            ChannelError::UnrenderableArgument {
                placeholder: "p".to_string(),
                kind
            }
        );
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }
}

#[test]
fn malformed_templates_are_errors() {
    let a = args(json!({"a": "1"}));
    for template in [
        "http://h/{a",
        "http://h/a}",
        "http://h/{a}}",
        "http://h/{{a}",
        "http://h/{}",
        "http://h/{a{a}}",
    ] {
        match render_url(template, &a, "exe_1") {
            Err(ChannelError::Template { template: t, .. }) => assert_eq!(t, template),
            other => panic!("{template}: {other:?}"),
        }
    }
}

/// Issue 12: `url = ".../v1/users/{id}/close"` with `id = ".."` used to send
/// `POST /v1/close`. A value can never move the request to another path or origin.
#[test]
fn a_value_cannot_steer_the_path() {
    let template = "http://127.0.0.1:9/v1/users/{id}/close";
    for value in [".", "..", ""] {
        let err = render_url(template, &args(json!({ "id": value })), "exe_1").unwrap_err();
        assert_eq!(
            err,
            ChannelError::Steered {
                placeholders: vec!["id".into()]
            },
            "{value:?}"
        );
        assert!(err.to_string().contains("placeholder(s) id"), "{err}");
    }
    // Spellings that decode to dots are sent encoded, as data: `%` itself is escaped.
    for value in ["%2e%2e", "%2E", ".%2e", "...", "a..b", ". ."] {
        let url = render_url(template, &args(json!({ "id": value })), "exe_1").unwrap();
        let parsed = url::Url::parse(&url).unwrap();
        assert_eq!(
            parsed.path_segments().unwrap().count(),
            4,
            "{value:?} -> {url}"
        );
    }
    // Two placeholders side by side cannot make `..` together.
    let err = render_url(
        "http://127.0.0.1:9/v1/{a}{b}/x",
        &args(json!({"a": ".", "b": "."})),
        "exe_1",
    )
    .unwrap_err();
    assert!(matches!(err, ChannelError::Steered { .. }), "{err}");
    // In the query a dot or an empty value is just data.
    let url = render_url(
        "http://127.0.0.1:9/search?q={q}&r={r}",
        &args(json!({"q": "..", "r": ""})),
        "exe_1",
    )
    .unwrap();
    assert_eq!(url, "http://127.0.0.1:9/search?q=..&r=");
}

#[test]
fn a_placeholder_in_the_origin_is_refused_at_start_up() {
    use postern_channels::http::check_template;
    for template in [
        "http://{host}/v1/x",
        "http://api-{tenant}.example.com/v1",
        "http://127.0.0.1:{port}/v1",
        "{scheme}://127.0.0.1/v1",
    ] {
        assert!(
            matches!(
                check_template(template),
                Err(ChannelError::PlaceholderInOrigin { .. })
            ),
            "{template}"
        );
    }
    check_template("http://127.0.0.1:9/v1/{a}/x?k={b}&id={execution_id}").unwrap();
}

#[test]
fn the_recorded_url_masks_secret_fields_and_keeps_the_execution_placeholder() {
    use postern_channels::http::render_url_for_record;
    let url = render_url_for_record(
        "http://127.0.0.1:9/cards/{card}/charge?who={customer}&key={execution_id}",
        &args(json!({"card": "4111 1111", "customer": "acme co"})),
        &|name: &str| name == "card",
        None,
    )
    .unwrap();
    assert_eq!(
        url,
        "http://127.0.0.1:9/cards/***/charge?who=acme%20co&key={execution_id}"
    );
}

proptest::proptest! {
    /// Whatever the argument, the rendered URL keeps the template's origin and segment count,
    /// or is refused.
    #[test]
    fn any_value_keeps_origin_and_segment_count(a in ".{0,12}", b in "[./%2eE]{0,4}") {
        let template = "http://127.0.0.1:9/v1/{a}/mid/{b}{a}/end?q={b}";
        let arguments = args(json!({"a": a, "b": b}));
        if let Ok(url) = render_url(template, &arguments, "exe_1") {
            let parsed = url::Url::parse(&url).unwrap();
            proptest::prop_assert_eq!(parsed.host_str(), Some("127.0.0.1"));
            proptest::prop_assert_eq!(parsed.port(), Some(9));
            proptest::prop_assert_eq!(parsed.path_segments().unwrap().count(), 5, "{}", url);
            proptest::prop_assert!(parsed.path().starts_with("/v1/"));
            proptest::prop_assert!(parsed.path().ends_with("/end"));
        }
    }
}

proptest::proptest! {
    /// Fuzzing the URL template renderer by property-based generation (see the core crate's
    /// `fuzz.rs`): any argument value renders or is refused, never panics, and a rendered URL
    /// keeps the template's origin and path segments.
    #[test]
    fn fuzz_an_argument_never_moves_the_request(value in "\\PC{0,40}", template in proptest::sample::select(vec![
        "https://api.example.com/items/{id}",
        "https://api.example.com/items/{id}/sub?x={id}",
        "http://127.0.0.1:8080/a/{id}#frag",
        "https://api.example.com/{id}",
    ])) {
        let args = serde_json::json!({"id": value}).as_object().cloned().unwrap();
        if let Ok(url) = postern_channels::http::render_url(template, &args, "exe_00000000000000000000000000") {
            let origin = |u: &str| u.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
            proptest::prop_assert_eq!(origin(&url), origin(template));
            let segments = |u: &str| u.split(['?', '#']).next().unwrap_or("").matches('/').count();
            proptest::prop_assert_eq!(segments(&url), segments(template));
        }
    }
}

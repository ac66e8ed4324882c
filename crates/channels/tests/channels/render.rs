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

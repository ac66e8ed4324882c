//! The registry's schema errors name paths and rules, never an argument's value (issue 12: an
//! error at the root used to print the whole arguments object, secret fields included).

use postern_core::config::Config;
use postern_pipeline::{Registry, Resolved};
use serde_json::json;

const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }

[[tool]]
name = "charge"
class = "idempotent_write"
match_window = "10m"
secret_fields = ["card"]
input_schema = { type = "object", required = ["amount"], minProperties = 3, properties = { amount = { type = "integer" }, card = { type = "string", maxLength = 4 } } }
http = { method = "POST", url = "http://127.0.0.1:9/charges" }
"#;

#[test]
fn schema_errors_never_echo_values() {
    let config = Config::parse(CONFIG, "registry.toml").unwrap();
    let http = std::sync::Arc::new(postern_channels::http::HttpChannel::new());
    let dialers = postern_pipeline::Dialers::http_only(http);
    let registry = Registry::new(&config.tools, &Resolved::default(), &dialers).unwrap();
    let entry = registry.get("charge").unwrap();
    let secret = "4111111111111111";
    let errors = entry
        .validate(&json!({"amount": "nine-thousand", "card": secret}))
        .unwrap_err();
    let text = errors.join("\n");
    assert!(
        text.contains("(arguments):"),
        "a root error is reported: {text}"
    );
    assert!(text.contains("/amount:"), "{text}");
    assert!(text.contains("/card:"), "{text}");
    assert!(!text.contains(secret), "{text}");
    assert!(!text.contains("nine-thousand"), "{text}");
}

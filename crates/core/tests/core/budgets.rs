//! `[[budget]]` (issue 53): a budget the gateway could not count is refused at start-up, with
//! the budget and the key named; one it can is kept as written.

use std::time::Duration;

use postern_core::budget::{OnExhausted, Partition, AMOUNT_SCALE};
use postern_core::config::Config;
use serde_json::json;

const BASE: &str = r#"
[gateway]
fingerprint_key = { env = "K" }
[[actor]]
name = "billing"
token = { env = "T" }
[[tool]]
name = "pay"
class = "irreversible"
match_window = "1h"
retention = "2d"
input_schema = { type = "object", properties = { amount = { type = "number" }, service = { type = "string", enum = ["api", "web"] }, note = { type = "string" }, tier = { type = "number", enum = [1, 2] } } }
http = { method = "POST", url = "http://127.0.0.1:9/pay" }
[[tool]]
name = "list"
class = "read_only"
http = { method = "GET", url = "http://127.0.0.1:9/list" }
"#;

fn with(budget: &str) -> Result<Config, String> {
    Config::parse(&format!("{BASE}\n[[budget]]\n{budget}"), "b.toml").map_err(|e| e.to_string())
}

#[test]
fn a_budget_is_kept_as_written() {
    let c = with(
        r#"name = "pay-day"
tools = ["pay"]
actors = ["billing"]
per = ["actor", "service"]
window = "1d"
max_calls = 20
sum = "amount"
max_sum = 5000.25
on_exhausted = "refuse""#,
    )
    .unwrap();
    let b = &c.budgets[0];
    assert_eq!(b.window, Duration::from_secs(86_400));
    assert_eq!(
        b.per,
        vec![Partition::Actor, Partition::Argument("service".into())]
    );
    assert_eq!(b.sum, Some(("amount".into(), 5_000_250_000)));
    assert_eq!(b.on_exhausted, OnExhausted::Refuse);
    assert!(b.applies("pay", "billing") && !b.applies("pay", "other"));
    let args = json!({"service": "api", "amount": 12.5});
    let args = args.as_object().unwrap();
    let none = serde_json::Map::new();
    assert_eq!(
        b.scope("billing", args, &none),
        "actor=billing, service=api"
    );
    // An omitted argument is counted as its default: the effect it will have.
    let defaults = json!({"service": "api"});
    let omitted = json!({"amount": 1});
    assert_eq!(
        b.scope(
            "billing",
            omitted.as_object().unwrap(),
            defaults.as_object().unwrap()
        ),
        "actor=billing, service=api"
    );
    assert_eq!(b.amount(args), Ok(12 * AMOUNT_SCALE + AMOUNT_SCALE / 2));
    let negative = json!({"amount": -1});
    assert!(
        b.amount(negative.as_object().unwrap()).is_err(),
        "a negative amount would raise the budget"
    );
}

#[test]
fn a_budget_that_could_not_be_counted_is_refused_naming_it() {
    for (budget, expected) in [
        (
            r#"name = "b"
tools = ["nope"]
window = "1h"
max_calls = 1"#,
            "no [[tool]] is named \"nope\"",
        ),
        (
            r#"name = "b"
tools = ["list"]
window = "1h"
max_calls = 1"#,
            "read_only",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "3d"
max_calls = 1"#,
            "retention must be at least the window",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h""#,
            "a budget with no limit counts nothing",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
sum = "amount""#,
            "sum: needs max_sum",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
sum = "note"
max_sum = 10"#,
            "must be declared \"type\": \"number\"",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
per = ["region"]
max_calls = 1"#,
            "per: \"region\" is not an argument of tool \"pay\"",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
per = ["note"]
max_calls = 1"#,
            "per: argument \"note\" of tool \"pay\" may take any value",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
per = ["tier"]
max_calls = 1"#,
            "per: argument \"tier\" of tool \"pay\" lists numbers",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
actors = ["ghost"]
max_calls = 1"#,
            "no [[actor]] is named \"ghost\"",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
sum = "amount"
max_sum = 0.0000001"#,
            "at most six decimals",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
max_calls = 1
on_exhausted = "ignore""#,
            "on_exhausted",
        ),
        (
            r#"name = "b"
tools = ["pay"]
window = "1h"
max_calls = 1
limit = 3"#,
            "unknown field `limit`",
        ),
    ] {
        let e = with(budget).unwrap_err();
        assert!(e.contains(expected), "{budget}\n→ {e}");
        if !expected.starts_with("unknown field") {
            assert!(e.contains("budget \"b\""), "{e}");
        }
    }
    let twice = format!("{BASE}\n[[budget]]\nname = \"b\"\ntools = [\"pay\"]\nwindow = \"1h\"\nmax_calls = 1\n[[budget]]\nname = \"b\"\ntools = [\"pay\"]\nwindow = \"1h\"\nmax_calls = 2\n");
    assert!(Config::parse(&twice, "b.toml")
        .unwrap_err()
        .to_string()
        .contains("declared twice"));
}

//! Fingerprint properties: unchanged by presentation, changed by anything semantic, and never a
//! carrier of secrets.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use postern_core::contract::{ChannelSpec, ToolContract};
use postern_core::record::{ActionRecord, Arguments};
use postern_core::Fingerprint;

use crate::support::{contract, key};

#[derive(Clone, Debug)]
struct Call {
    customer: String,
    amount: i64,
    memo: Option<String>,
    currency: Option<String>,
    trace_id: Option<String>,
    card_token: Option<String>,
}

impl Call {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        let mut f = vec![
            ("customer", json!(self.customer)),
            ("amount", json!(self.amount)),
        ];
        for (k, v) in [
            ("memo", &self.memo),
            ("currency", &self.currency),
            ("trace_id", &self.trace_id),
            ("card_token", &self.card_token),
        ] {
            if let Some(v) = v {
                f.push((k, json!(v)));
            }
        }
        f
    }
}

/// A whole JSON-RPC `tools/call` message as a client might write it: its own key order, its own
/// whitespace, its own request id.
fn render(call: &Call, order_seed: u64, spaced: bool, rpc_id: i64) -> String {
    let mut fields = call.fields();
    // A deterministic shuffle from the seed.
    let mut s = order_seed;
    for i in (1..fields.len()).rev() {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        fields.swap(i, (s >> 33) as usize % (i + 1));
    }
    let sep = if spaced { " :\n  " } else { ":" };
    let comma = if spaced { " ,\n\t" } else { "," };
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}{sep}{}", json!(k), serde_json::to_string(v).unwrap()))
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":{rpc_id},"method":"tools/call","params":{{"name":"create_invoice","arguments":{{{}}}}}}}"#,
        body.join(comma)
    )
}

/// What the gateway does with a message: only `params.arguments` reaches the record; the MCP
/// session id travels in a header and is not an input at all.
fn fingerprint_of_message(
    message: &str,
    _mcp_session_id: &str,
    actor: &str,
    scope: Option<&str>,
    c: &ToolContract,
) -> (Fingerprint, ActionRecord) {
    let msg = postern_core::canon::parse_strict(message).unwrap();
    let args = Arguments::from_value(msg["params"]["arguments"].clone()).unwrap();
    let record = ActionRecord::build(c, actor, scope, &args, &key()).unwrap();
    (record.fingerprint(&key()).unwrap(), record)
}

fn fp(call: &Call) -> Fingerprint {
    fingerprint_of_message(
        &render(call, 0, false, 1),
        "s",
        "billing-agent",
        None,
        &contract("create_invoice"),
    )
    .0
}

fn call_strategy() -> impl Strategy<Value = Call> {
    (
        "[a-z]{1,12}",
        -1_000_000i64..1_000_000,
        proptest::option::of("[ -~]{0,20}"),
        proptest::option::of(prop_oneof!["EUR", "USD", "[A-Z]{3}"]),
        proptest::option::of("[0-9a-f]{8}"),
        proptest::option::of("sk_[A-Za-z0-9]{16,32}"),
    )
        .prop_map(
            |(customer, amount, memo, currency, trace_id, card_token)| Call {
                customer,
                amount,
                memo,
                currency,
                trace_id,
                card_token,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn presentation_does_not_change_the_fingerprint(
        call in call_strategy(),
        seeds in (any::<u64>(), any::<u64>()),
        spaced in (any::<bool>(), any::<bool>()),
        ids in (any::<i32>(), any::<i32>()),
        sessions in ("[a-f0-9]{8}", "[a-f0-9]{8}"),
    ) {
        let c = contract("create_invoice");
        let a = fingerprint_of_message(&render(&call, seeds.0, spaced.0, ids.0.into()), &sessions.0, "billing-agent", None, &c).0;
        let b = fingerprint_of_message(&render(&call, seeds.1, spaced.1, ids.1.into()), &sessions.1, "billing-agent", None, &c).0;
        prop_assert_eq!(a, b);
    }

    #[test]
    fn defaults_and_non_semantic_fields_do_not_change_it(call in call_strategy(), trace in "[0-9a-f]{8}") {
        let mut omitted = call.clone();
        omitted.currency = None;
        let mut explicit = call.clone();
        explicit.currency = Some("EUR".into());
        prop_assert_eq!(fp(&omitted), fp(&explicit));
        let mut traced = call.clone();
        traced.trace_id = Some(trace);
        let mut untraced = call.clone();
        untraced.trace_id = None;
        prop_assert_eq!(fp(&traced), fp(&untraced));
    }

    #[test]
    fn every_semantic_change_changes_it(call in call_strategy(), delta in 1i64..1000, other in "[a-z]{13,14}") {
        let base = fp(&call);
        let mut c = call.clone();
        c.amount += delta;
        prop_assert_ne!(fp(&c), base);
        let mut c = call.clone();
        c.customer = other.clone();
        prop_assert_ne!(fp(&c), base);
        let mut c = call.clone();
        c.memo = Some(format!("{}!", call.memo.clone().unwrap_or_default()));
        prop_assert_ne!(fp(&c), base);
        let mut c = call.clone();
        c.card_token = Some(format!("{}x", call.card_token.clone().unwrap_or_default()));
        prop_assert_ne!(fp(&c), base);

        let message = render(&call, 0, false, 1);
        let tool = contract("create_invoice");
        let fp_with = |actor: &str, scope: Option<&str>, t: &ToolContract| fingerprint_of_message(&message, "s", actor, scope, t).0;
        prop_assert_eq!(fp_with("billing-agent", Some("billing-agent"), &tool), base);
        prop_assert_ne!(fp_with("ops-agent", None, &tool), base);
        prop_assert_ne!(fp_with("billing-agent", Some(&other), &tool), base);

        let mut renamed = tool.clone();
        renamed.name = "create_invoice_v2".into();
        prop_assert_ne!(fp_with("billing-agent", None, &renamed), base);
        for change in 0..3 {
            let mut t = tool.clone();
            let ChannelSpec::Http(h) = &mut t.channel else { unreachable!() };
            match change {
                0 => h.request.url = "http://127.0.0.1:9001/invoices".into(),
                1 => h.credential = Some("other".into()),
                _ => h.request.method = "PUT".into(),
            }
            prop_assert_ne!(fp_with("billing-agent", None, &t), base);
        }
    }

    #[test]
    fn secrets_never_appear(call in call_strategy(), secret in "sk_[A-Za-z0-9]{16,32}") {
        let mut call = call;
        call.card_token = Some(secret.clone());
        let (fingerprint, record) = fingerprint_of_message(&render(&call, 7, true, 3), "s", "billing-agent", None, &contract("create_invoice"));
        let bytes = String::from_utf8(record.canonical_bytes().unwrap()).unwrap();
        prop_assert!(!bytes.contains(&secret));
        let shown = format!("{:?}", record);
        prop_assert!(!shown.contains(&secret));
        prop_assert!(!fingerprint.to_string().contains(&secret));
        prop_assert!(bytes.contains("\"card_token\":\"secret:hmac-sha256:"));
        let args = Arguments::from_value(serde_json::to_value(call.fields().into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>()).unwrap()).unwrap();
        let shown = format!("{:?}", args);
        prop_assert!(!shown.contains(&secret));
    }
}

#[test]
fn equal_secrets_reference_alike_without_revealing_themselves() {
    let c = contract("create_invoice");
    let build = |token: &str| {
        let args =
            Arguments::from_value(json!({"customer": "acme", "amount": 5, "card_token": token}))
                .unwrap();
        ActionRecord::build(&c, "billing-agent", None, &args, &key()).unwrap()
    };
    assert_eq!(
        build("sk_one").arguments["card_token"],
        build("sk_one").arguments["card_token"]
    );
    assert_ne!(
        build("sk_one").arguments["card_token"],
        build("sk_two").arguments["card_token"]
    );
}

#[test]
fn golden_record_bytes() {
    let c = contract("create_invoice");
    let args =
        Arguments::parse(r#"{"amount": 1250, "customer": "acme", "trace_id": "abc"}"#).unwrap();
    let record = ActionRecord::build(&c, "billing-agent", None, &args, &key()).unwrap();
    assert_eq!(
        String::from_utf8(record.canonical_bytes().unwrap()).unwrap(),
        r#"{"actor":"billing-agent","arguments":{"amount":1250,"currency":"EUR","customer":"acme"},"channel":"http","credential_ref":"invoices","intent_scope":"billing-agent","method":"POST","target":"http://127.0.0.1:9000/invoices","tool":"create_invoice"}"#
    );
}

//! Shared builders for the core tests.

use std::time::Duration;

use postern_core::class::ActionClass;
use postern_core::config::Config;
use postern_core::contract::{HttpRequestSpec, ToolContract};
use postern_core::FingerprintKey;

pub const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

pub fn key() -> FingerprintKey {
    FingerprintKey::from_hex(KEY_HEX).unwrap()
}

pub const CONFIG: &str = r#"
[gateway]
listen = "127.0.0.1:8750"
store = "sqlite://postern.db"
fingerprint_key = { env = "POSTERN_FINGERPRINT_KEY" }

[[actor]]
name = "billing-agent"
token = { env = "BILLING_AGENT_TOKEN" }
session_approval = "auto"

[[actor]]
name = "ops-agent"
token = { env = "OPS_AGENT_TOKEN" }
session_approval = "required"

[credential.invoices]
kind = "bearer"
secret = { env = "INVOICES_API_TOKEN" }
approval = "session"

[credential.deploy-key]
kind = "ssh_key"
secret = { file = "deploy.key" }

[[tool]]
name = "create_invoice"
description = "Create an invoice"
class = "idempotent_write"
match_window = "10m"
input_schema = { type = "object", required = ["customer", "amount"], properties = { customer = { type = "string" }, amount = { type = "integer" }, currency = { type = "string" }, memo = { type = "string" }, trace_id = { type = "string" }, card_token = { type = "string" } } }
defaults = { currency = "EUR" }
non_semantic = ["trace_id"]
secret_fields = ["card_token"]
http = { method = "POST", url = "http://127.0.0.1:9000/invoices", credential = "invoices", body = "arguments" }
recovery = { status_query = { method = "GET", url = "http://127.0.0.1:9000/invoices?idempotency_key={execution_id}" } }

[[tool]]
name = "list_invoices"
class = "read_only"
http = { method = "GET", url = "http://127.0.0.1:9000/invoices", credential = "invoices" }

[[tool]]
name = "set_price"
class = "conditional_write"
match_window = "5m"
retention = "1d"
http = { method = "PUT", url = "http://127.0.0.1:9000/prices/{sku}" }
recovery = { precondition = { method = "GET", url = "http://127.0.0.1:9000/prices/{sku}" } }

[[tool]]
name = "wire_money"
class = "irreversible"
match_window = "1h"
approval = "every_call"
http = { method = "POST", url = "http://127.0.0.1:9000/wires" }

[[tool]]
name = "restart_service"
class = "remote_command"
match_window = "2m"
input_schema = { type = "object", required = ["service"], properties = { service = { type = "string" } } }
ssh = { host = "127.0.0.1", port = 2222, user = "deploy", host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample", credential = "deploy-key", command = "systemctl restart {service}" }
"#;

pub fn config() -> Config {
    Config::parse(CONFIG, "postern.toml").unwrap()
}

pub fn contract(name: &str) -> ToolContract {
    config().tool(name).unwrap().clone()
}

/// A contract of the given class with a status query, for the recovery matrix.
pub fn contract_of(class: ActionClass, status_query: bool) -> ToolContract {
    let mut c = match class {
        ActionClass::ReadOnly => contract("list_invoices"),
        ActionClass::IdempotentWrite => contract("create_invoice"),
        ActionClass::ConditionalWrite => contract("set_price"),
        ActionClass::Irreversible => contract("wire_money"),
        ActionClass::RemoteCommand => contract("restart_service"),
    };
    c.recovery.status_query = status_query.then(|| HttpRequestSpec {
        method: "GET".into(),
        url: "http://127.0.0.1:9000/status/{execution_id}".into(),
    });
    if !class.is_read_only() {
        c.match_window = Duration::from_secs(600);
        c.retention = Duration::from_secs(86_400);
    }
    c
}

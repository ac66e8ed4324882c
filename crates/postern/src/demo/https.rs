//! The demo's https scene: the invoice API behind TLS with a certificate from a CA the demo
//! makes on the spot. One tool names that CA in `http.ca_file` and its call goes through; one
//! trusts only the built-in roots, and its handshake fails before a byte of the request left,
//! so it is recorded `failed` (safe to call again), never `outcome_unknown`.

use std::path::Path;

use anyhow::{Context, Result};
use postern_demo::ca::{TestCa, Validity};
use postern_demo::target::{InvoiceApi, InvoiceApiHandle};
use serde_json::json;

use super::{heading, line, Demo};

/// The CA's certificate, beside the demo's config (`ca_file` is relative to it).
pub(super) const CA_FILE: &str = "demo-ca.pem";

/// Makes the CA, writes its certificate to `dir`, and starts the API over TLS on 127.0.0.1
/// with a certificate for that address.
pub(super) async fn start_api(dir: &Path) -> Result<InvoiceApiHandle> {
    let ca = TestCa::new("Postern demo CA");
    ca.write_pem(dir, CA_FILE);
    let issued = ca.server_cert(&["127.0.0.1"], Validity::Current);
    InvoiceApi::start_tls(issued.server_config())
        .await
        .context("starting the demo invoice API over TLS")
}

/// The two tools of the scene, for the demo's config.
pub(super) fn tools(tls_target: &str) -> String {
    format!(
        r#"
[[tool]]
name = "create_invoice_tls"
description = "Create an invoice (https, private CA)"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{tls_target}/invoices", response_timeout = "1s", ca_file = "{CA_FILE}" }}
recovery = {{ status_query = {{ method = "GET", url = "{tls_target}/invoices?idempotency_key={{execution_id}}" }} }}

[[tool]]
name = "create_invoice_public_roots"
description = "Create an invoice (https, trusting only the public roots)"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{tls_target}/invoices", response_timeout = "1s" }}
"#
    )
}

/// The scene, numbered `n`.
pub(super) async fn scene(n: u32, d: &Demo, tls_target: &str) -> Result<()> {
    heading(
        n,
        "An https target with a private CA: trusted where the tool names the CA, refused before anything is sent where not.",
    );
    line(format!(
        "target   {tls_target}: the invoice API over TLS, its certificate from a CA this demo just made ({CA_FILE})"
    ));
    d.call(
        "create_invoice_tls",
        json!({"customer": "stark", "amount": 700}),
        json!({}),
        "",
    )
    .await?;
    line(format!("why      the tool's http.ca_file = \"{CA_FILE}\" is trusted instead of the built-in roots; the host name was verified"));
    d.call(
        "create_invoice_public_roots",
        json!({"customer": "stark", "amount": 700}),
        json!({}),
        "   ← the same API, a tool that trusts only the public roots",
    )
    .await?;
    line("why      the handshake failed before a byte of the request left: `failed` (safe to call again), never `outcome_unknown`");
    d.invoices_for("stark");
    Ok(())
}

//! `--identity [--rounds N]` (issue 50): what an `[[issuer]]`'s JWT access token costs beside a
//! static token, on the same build in the same run.
//!
//! A: the actor authenticates with its static token. B: the same actor, matched by its claims,
//! authenticates with an ES256 JWT signed by an issuer in this process (`testkit::issuer`:
//! discovery and key set over HTTP on loopback), verified by the gateway against the key set
//! it fetched. Issue 50's goal: B costs at most 10 % more at c=64.

use postern_demo::target::InvoiceApi;
use postern_testkit::issuer::TestIssuer;
use serde_json::json;

use super::ab::{Measure, Side};
use super::{config, Served, TOKEN};

pub async fn compare(m: &Measure<'_>) {
    let api = InvoiceApi::start().await.unwrap();
    let target = format!("http://{}", api.addr);
    let issuer = TestIssuer::start().await;
    let text = format!(
        "{}\n[[issuer]]\nurl = \"{}\"\n\n[[actor]]\nname = \"agent\"\nclaims = {{ issuer = \"{}\", subject = \"bench-agent\" }}\n",
        config(&target, "10m", None),
        issuer.url,
        issuer.url
    );
    println!("identity: A a static token, B an [[issuer]]'s ES256 JWT (verified against its key set); A B per round");
    let jwt = |served: &Served| {
        issuer.token(json!({"sub": "bench-agent", "aud": served.url, "exp": now() + 3600}))
    };
    let a = Side {
        config: text.clone(),
        bearer: &|_| TOKEN.to_string(),
    };
    let b = Side {
        config: text,
        bearer: &jwt,
    };
    super::ab::compare(&api, m, "id", [&a, &b]).await;
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

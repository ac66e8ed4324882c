//! `--budget [--rounds N]` (issue 53): what checking a `[[budget]]` costs, on the same build in
//! the same run. A: `create_invoice` with no budget. B: the same tool counted by two budgets —
//! executions per actor and the sum of `amount` — with limits no run reaches, so every call is
//! checked and counted in the accept's transaction and none waits. Issue 53's goal: checking a
//! budget costs at most 10 % of calls/s at c=64.

use postern_demo::target::InvoiceApi;

use super::ab::{Measure, Side};
use super::{config, TOKEN};

pub const BUDGETS: &str = r#"
[[budget]]
name = "invoices"
tools = ["create_invoice"]
per = ["actor"]
window = "10m"
max_calls = 100000000
on_exhausted = "refuse"

[[budget]]
name = "invoiced"
tools = ["create_invoice"]
window = "10m"
sum = "amount"
max_sum = 1000000000000
on_exhausted = "refuse"
"#;

pub async fn compare(m: &Measure<'_>) {
    let api = InvoiceApi::start().await.unwrap();
    let target = format!("http://{}", api.addr);
    let plain = config(&target, "10m", None);
    println!("budget: A no budget, B two budgets (count per actor, sum of amount) never reached; A B per round");
    let token = |_: &super::Served| TOKEN.to_string();
    let a = Side {
        config: plain.clone(),
        bearer: &token,
    };
    let b = Side {
        config: format!("{plain}{BUDGETS}"),
        bearer: &token,
    };
    super::ab::compare(&api, m, "budget", [&a, &b]).await;
}

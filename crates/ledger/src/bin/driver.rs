//! `postern-ledger-driver`: drives a real ledger from a separate OS process, for the ledger's
//! multi-process and crash tests (which kill it with `kill -9`).
//!
//! Usage:
//!   postern-ledger-driver accept URL COUNT        # COUNT identical accepts; prints each execution id
//!   postern-ledger-driver churn URL SIGNING_KEY   # accept→dispatched→completed→delivered forever

use std::io::Write;
use std::sync::Arc;

use postern_audit::SigningKey;
use postern_core::config::Config;
use postern_core::lifecycle::Verdict;
use postern_core::{ActionRecord, Arguments, EventKind, FingerprintKey, Timestamp};
use postern_ledger::{AcceptRequest, Ledger, LedgerOptions, NewEvent, ResultBody};

const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }
[[tool]]
name = "create_invoice"
class = "idempotent_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }
"#;

fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    )
}

fn request(arguments: &str) -> AcceptRequest {
    let config = Config::parse(CONFIG, "driver.toml").expect("driver config");
    let contract = Arc::new(config.tool("create_invoice").expect("tool").clone());
    let key = FingerprintKey::new(&[42u8; 32]).expect("key");
    let args = Arguments::parse(arguments).expect("arguments");
    let record = ActionRecord::build(&contract, "driver", None, &args, &key).expect("record");
    AcceptRequest::new(record, &key, contract, now()).expect("fingerprint")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut out = std::io::stdout().lock();
    match args.get(1).map(String::as_str) {
        Some("accept") => {
            let (ledger, _) = Ledger::open(&args[2], LedgerOptions::default())
                .await
                .expect("open");
            let count: usize = args[3].parse().expect("count");
            for _ in 0..count {
                let outcome = ledger
                    .accept(request(r#"{"customer":"acme","amount":100}"#))
                    .await
                    .expect("accept");
                writeln!(out, "{}", outcome.execution().id).expect("stdout");
            }
        }
        Some("churn") => {
            let key = Arc::new(SigningKey::from_hex(&args[3]).expect("signing key"));
            let options = LedgerOptions {
                signing_key: Some(key),
                checkpoint_every: 7,
                ..LedgerOptions::default()
            };
            let (ledger, _) = Ledger::open(&args[2], options).await.expect("open");
            for i in 0u64.. {
                let mut req = request(&format!(
                    r#"{{"customer":"c{}-{i}","amount":{i}}}"#,
                    std::process::id()
                ));
                req.then = vec![
                    NewEvent::new(EventKind::Authorized),
                    NewEvent::new(EventKind::Dispatched),
                ];
                let id = ledger.accept(req).await.expect("accept").execution().id;
                writeln!(out, "dispatched {id}").expect("stdout");
                out.flush().expect("flush");
                let result = ResultBody {
                    body: format!("{{\"invoice\":{i}}}").into_bytes(),
                    size: 13,
                    truncated: false,
                };
                let done =
                    NewEvent::new(EventKind::Completed(Verdict::Applied)).with_result(result);
                ledger.append(id, done, now()).await.expect("complete");
                writeln!(out, "completed {id}").expect("stdout");
                out.flush().expect("flush");
                ledger
                    .append(id, NewEvent::new(EventKind::Delivered), now())
                    .await
                    .expect("deliver");
            }
        }
        _ => {
            eprintln!("usage: postern-ledger-driver accept URL COUNT | churn URL SIGNING_KEY_HEX");
            std::process::exit(2);
        }
    }
}

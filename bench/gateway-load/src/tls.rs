//! `--https`: the same tool through Postern to the same invoice API, served over plain http and
//! over https (rustls, a certificate from a CA made for the run), each with the gateway's
//! connection reuse and without it (`POSTERN_MEASURE_WITHOUT_CONNECTION_REUSE=1`). The four
//! gateways run side by side; each level runs in rounds that measure every one of them in turn
//! (forward, then backward), so the disk's drift falls on all of them alike.

use std::path::Path;

use postern_demo::target::{InvoiceApi, InvoiceApiHandle};
use postern_testkit::{TestCa, TlsListener, Validity};

use crate::{config, run, Budget, Run, Served};

const NO_REUSE: (&str, &str) = ("POSTERN_MEASURE_WITHOUT_CONNECTION_REUSE", "1");

/// One gateway of the comparison.
struct Variant {
    label: &'static str,
    served: Served,
    https: bool,
}

/// Figures of one variant: added p50 at c=1 over the direct call, calls/s at c=64.
struct Figures {
    added_c1: f64,
    rate_c64: f64,
}

/// Runs the comparison and prints it. `http_api` is the plain-http invoice API the rest of
/// the benchmark uses; `direct` its URL for the direct baseline.
pub fn compare(
    rt: &tokio::runtime::Runtime,
    postern: &Path,
    dir: &Path,
    protocol: &'static str,
    http_api: &InvoiceApiHandle,
    calls1: usize,
    seconds: f64,
) {
    let ca = TestCa::new("postern-gateway-load CA");
    let cert = ca.server_cert(&["127.0.0.1"], Validity::Current);
    let https_api = rt
        .block_on(async {
            let listener = TlsListener::bind(cert.server_config()).await?;
            InvoiceApi::serve_on(listener, None)
        })
        .expect("start the https invoice API");
    let http_target = http_api.url("");
    let https_target = format!("https://127.0.0.1:{}", https_api.addr.port());
    let start = |label: &'static str, https: bool, fresh: bool| {
        let sub = dir.join(label.replace([' ', ','], "-"));
        std::fs::create_dir_all(&sub).unwrap();
        ca.write_pem(&sub, "ca.pem");
        let (target, ca_file) = match https {
            true => (https_target.as_str(), Some("ca.pem")),
            false => (http_target.as_str(), None),
        };
        let env: &[(&str, &str)] = if fresh { &[NO_REUSE] } else { &[] };
        let served = Served::start_with(postern, &sub, config(target, "10m", ca_file), env);
        Variant {
            label,
            served,
            https,
        }
    };
    let variants = [
        start("http, reused", false, false),
        start("http, fresh", false, true),
        start("https, reused", true, false),
        start("https, fresh", true, true),
    ];
    let direct = http_api.url("/invoices");
    let api = |v: &Variant| {
        if v.https {
            &https_api.state
        } else {
            &http_api.state
        }
    };
    // Each level runs in rounds; every round measures every variant (and, at c=1, the direct
    // call before it), in forward then backward order, so drift over the run falls on all.
    let mut c1: Vec<(Vec<Run>, Vec<Run>)> =
        variants.iter().map(|_| (Vec::new(), Vec::new())).collect();
    let mut c64: Vec<Vec<Run>> = variants.iter().map(|_| Vec::new()).collect();
    for round in 0..ROUNDS {
        for i in order(round, variants.len()) {
            let (v, calls) = (&variants[i], Budget::Calls(calls1.div_ceil(ROUNDS)));
            // Every call's arguments are unique across rounds and variants: a new execution each.
            let (dtag, ptag) = (format!("td{round}v{i}"), format!("t1r{round}"));
            let d = rt.block_on(run(&http_api.state, None, &direct, 1, calls, &dtag));
            let p = rt.block_on(run(api(v), Some(protocol), &v.served.url, 1, calls, &ptag));
            c1[i].0.push(d);
            c1[i].1.push(p);
        }
    }
    for round in 0..ROUNDS {
        for i in order(round, variants.len()) {
            let (v, budget) = (&variants[i], Budget::Seconds(seconds / ROUNDS as f64));
            let tag = format!("t64r{round}");
            let url = &v.served.url;
            c64[i].push(rt.block_on(run(api(v), Some(protocol), url, 64, budget, &tag)));
        }
    }
    let figures: Vec<Figures> = c1
        .into_iter()
        .zip(c64)
        .map(|((d, p), r)| Figures {
            added_c1: merged(p).pct(0.5) - merged(d).pct(0.5),
            rate_c64: merged(r).rate,
        })
        .collect();
    print(&variants, &figures);
}

/// Rounds per level.
const ROUNDS: usize = 4;

/// The variants' order in `round`: forward in even rounds, backward in odd ones.
fn order(round: usize, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// The rounds of one variant as one run: all latencies, and calls over the summed time.
fn merged(runs: Vec<Run>) -> Run {
    let calls: usize = runs.iter().map(|r| r.latencies.len()).sum();
    let seconds: f64 = runs.iter().map(|r| r.latencies.len() as f64 / r.rate).sum();
    let mut latencies: Vec<_> = runs.into_iter().flat_map(|r| r.latencies).collect();
    latencies.sort_unstable();
    Run {
        latencies,
        rate: calls as f64 / seconds,
    }
}

fn print(variants: &[Variant], figures: &[Figures]) {
    println!();
    println!("target transport (gateway → invoice API) │ added p50 at c=1 │ calls/s at c=64");
    for (v, f) in variants.iter().zip(figures) {
        println!(
            "{:<40} │ {:>+13.3} ms │ {:>15.0}",
            v.label, f.added_c1, f.rate_c64
        );
    }
    let (http, https) = (&figures[0], &figures[2]);
    let cost = 1.0 - https.rate_c64 / http.rate_c64;
    println!(
        "https costs {:.1}% of the c=64 throughput of plain http, both reused (goal: at most 15%) — {}",
        cost * 100.0,
        if cost <= 0.15 { "met" } else { "NOT met" }
    );
    println!(
        "https added p50 at c=1 over plain http: {:+.3} ms reused, {:+.3} ms with a handshake per call",
        https.added_c1 - http.added_c1,
        figures[3].added_c1 - figures[1].added_c1
    );
    println!(
        "connection reuse: https {:.0} → {:.0} calls/s at c=64, http {:.0} → {:.0} (fresh → reused)",
        figures[3].rate_c64, https.rate_c64, figures[1].rate_c64, http.rate_c64
    );
}

//! Budgets on effects (issue 53) as the ledger counts them, on SQLite and on the real
//! PostgreSQL: a limit lets exactly its number of executions be dispatched however many arrive
//! at once (two replicas included), a sum never overshoots, a matched retry is not counted
//! again, a `failed` execution is uncounted and one that waited is counted once it is sent.

use std::sync::Arc;

use postern_core::budget::{amount_text, AMOUNT_SCALE};
use postern_core::lifecycle::State;
use postern_core::EventKind;
use postern_ledger::{AcceptOutcome, AcceptRequest, BudgetCharge, Ledger, NewEvent};
use serde_json::json;

use crate::support::{fresh_store, now, open, request, verify, Backend, BACKENDS};

const HOUR_MS: i64 = 3_600_000;

fn charge(max_calls: Option<u64>, max_sum: Option<i64>, amount: i64) -> BudgetCharge {
    BudgetCharge {
        budget: "invoices".into(),
        scope: "actor=billing".into(),
        amount,
        window_ms: HOUR_MS,
        max_calls,
        max_sum,
        refuse: false,
    }
}

/// A new invoice (`n` makes each distinct) that dispatches at once, or waits for a person
/// once `budget` is used up.
fn budgeted(n: usize, budget: BudgetCharge, amount: &str) -> AcceptRequest {
    let args = format!(r#"{{"customer":"c{n}","amount":{amount}}}"#);
    let mut req = request("create_invoice", "billing", &args).then(vec![
        NewEvent::new(EventKind::Authorized),
        NewEvent::new(EventKind::Dispatched).with_detail(json!({"url": "http://127.0.0.1:9"})),
    ]);
    req.budgets = vec![budget];
    req.over_budget = vec![NewEvent::new(EventKind::ApprovalRequested)
        .with_detail(json!({"expires_at_ms": now().0 + HOUR_MS}))];
    req
}

/// How many of `outcomes` were dispatched, and how many wait for a person.
fn tally(outcomes: &[AcceptOutcome]) -> (usize, usize) {
    let state = |o: &AcceptOutcome| o.execution().lifecycle.state;
    let dispatched = outcomes
        .iter()
        .filter(|o| state(o) == State::Dispatched)
        .count();
    let waiting = outcomes
        .iter()
        .filter(|o| state(o) == State::AwaitingApproval)
        .count();
    (dispatched, waiting)
}

async fn accept_all(ledgers: &[Arc<Ledger>], requests: Vec<AcceptRequest>) -> Vec<AcceptOutcome> {
    let tasks: Vec<_> = requests
        .into_iter()
        .enumerate()
        .map(|(i, req)| {
            let l = ledgers[i % ledgers.len()].clone();
            tokio::spawn(async move { l.accept(req).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_limit_lets_exactly_its_number_through_however_many_arrive_at_once() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = Arc::new(open(&url).await);
        let requests = (0..64)
            .map(|n| budgeted(n, charge(Some(20), None, 0), "1"))
            .collect();
        let outcomes = accept_all(std::slice::from_ref(&ledger), requests).await;
        assert_eq!(tally(&outcomes), (20, 44), "{backend:?}");
        // The waiting ones say which budget they wait for, and its use.
        let waiting = outcomes
            .iter()
            .find(|o| o.execution().lifecycle.state == State::AwaitingApproval)
            .unwrap();
        let view = ledger
            .read()
            .execution(waiting.execution().id)
            .await
            .unwrap()
            .unwrap();
        let asked = view
            .events
            .iter()
            .find(|e| e.body.event == EventKind::ApprovalRequested)
            .unwrap();
        assert_eq!(asked.body.detail["budget"]["name"], "invoices");
        assert_eq!(asked.body.detail["budget"]["calls"], 20);
        assert_eq!(asked.body.detail["budget"]["max_calls"], 20);
        let used = ledger
            .read()
            .budget_use("invoices", HOUR_MS, now())
            .await
            .unwrap();
        assert_eq!(used.len(), 1, "{backend:?}");
        assert_eq!(used[0].calls, 20, "{backend:?}");
        assert!(verify(&ledger).await.is_valid());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_count_one_budget_exactly() {
    let (url, _guard) = fresh_store(Backend::Postgres).await;
    let replicas = [Arc::new(open(&url).await), Arc::new(open(&url).await)];
    let requests = (0..64)
        .map(|n| budgeted(n, charge(Some(20), None, 0), "1"))
        .collect();
    let outcomes = accept_all(&replicas, requests).await;
    assert_eq!(tally(&outcomes), (20, 44));
    let used = replicas[1]
        .read()
        .budget_use("invoices", HOUR_MS, now())
        .await
        .unwrap();
    assert_eq!(used[0].calls, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sum_limit_never_overshoots_when_amounts_arrive_together() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledgers: Vec<Arc<Ledger>> = match backend {
            Backend::Sqlite => vec![Arc::new(open(&url).await)],
            Backend::Postgres => vec![Arc::new(open(&url).await), Arc::new(open(&url).await)],
        };
        // 40 invoices of 3 to 12.5 against at most 100: some pass, the sum stays ≤ 100.
        let amounts: Vec<i64> = (0..40)
            .map(|n| 3 * AMOUNT_SCALE + (n % 20) * AMOUNT_SCALE / 2)
            .collect();
        let requests = amounts
            .iter()
            .enumerate()
            .map(|(n, a)| {
                let text = amount_text(*a);
                budgeted(n, charge(None, Some(100 * AMOUNT_SCALE), *a), &text)
            })
            .collect();
        let outcomes = accept_all(&ledgers, requests).await;
        let sent: i64 = outcomes
            .iter()
            .zip(&amounts)
            .filter(|(o, _)| o.execution().lifecycle.state == State::Dispatched)
            .map(|(_, a)| *a)
            .sum();
        let used = ledgers[0]
            .read()
            .budget_use("invoices", HOUR_MS, now())
            .await
            .unwrap();
        assert_eq!(used[0].sum, sent, "{backend:?}: the count is what was sent");
        assert!(sent <= 100 * AMOUNT_SCALE, "{backend:?}: {sent} overshoots");
        assert!(
            sent > 85 * AMOUNT_SCALE,
            "{backend:?}: {sent} stopped early"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_failures_and_approvals_are_counted_as_effects() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let used = || async {
            ledger
                .read()
                .budget_use("invoices", HOUR_MS, now())
                .await
                .unwrap()
        };
        let limit = || charge(Some(2), None, 0);
        let first = ledger.accept(budgeted(1, limit(), "1")).await.unwrap();
        // The identical call again: matched, not counted again.
        let again = ledger.accept(budgeted(1, limit(), "1")).await.unwrap();
        assert!(
            matches!(again, AcceptOutcome::Existing { .. }),
            "{backend:?}"
        );
        assert_eq!(used().await[0].calls, 1, "{backend:?}: a retry counts once");
        // A second execution fails before anything left: it is no longer counted.
        let second = ledger.accept(budgeted(2, limit(), "1")).await.unwrap();
        assert_eq!(used().await[0].calls, 2);
        ledger
            .append(
                second.execution().id,
                NewEvent::new(EventKind::Failed),
                now(),
            )
            .await
            .unwrap();
        assert_eq!(
            used().await[0].calls,
            1,
            "{backend:?}: failed means nothing was sent"
        );
        // A re-dispatch of the first (same execution) is not a new effect.
        let first_id = first.execution().id;
        ledger
            .append(first_id, NewEvent::new(EventKind::OutcomeUnknown), now())
            .await
            .unwrap();
        ledger
            .append(first_id, NewEvent::new(EventKind::Dispatched), now())
            .await
            .unwrap();
        assert_eq!(
            used().await[0].calls,
            1,
            "{backend:?}: one execution, one count"
        );
        // Fill the budget, then one waits; approved and sent, it is counted.
        ledger.accept(budgeted(3, limit(), "1")).await.unwrap();
        let waiting = ledger.accept(budgeted(4, limit(), "1")).await.unwrap();
        let id = waiting.execution().id;
        assert_eq!(waiting.execution().lifecycle.state, State::AwaitingApproval);
        assert_eq!(
            used().await[0].calls,
            2,
            "{backend:?}: waiting is not counted"
        );
        ledger
            .append(id, NewEvent::new(EventKind::Authorized), now())
            .await
            .unwrap();
        ledger
            .append(id, NewEvent::new(EventKind::Dispatched), now())
            .await
            .unwrap();
        assert_eq!(
            used().await[0].calls,
            3,
            "{backend:?}: sent after approval, counted"
        );
        assert!(verify(&ledger).await.is_valid());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_leave_the_window_and_free_the_budget_exactly() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let short = || BudgetCharge {
            window_ms: 400,
            ..charge(Some(2), Some(30 * AMOUNT_SCALE), 10 * AMOUNT_SCALE)
        };
        let state = |o: &AcceptOutcome| o.execution().lifecycle.state;
        for n in 0..2 {
            let o = ledger.accept(budgeted(n, short(), "10")).await.unwrap();
            assert_eq!(state(&o), State::Dispatched, "{backend:?}");
        }
        let o = ledger.accept(budgeted(2, short(), "10")).await.unwrap();
        assert_eq!(
            state(&o),
            State::AwaitingApproval,
            "{backend:?}: the window is full"
        );
        tokio::time::sleep(std::time::Duration::from_millis(450)).await;
        // Both left the window: two more fit, and the third waits again.
        for n in 3..5 {
            let o = ledger.accept(budgeted(n, short(), "10")).await.unwrap();
            assert_eq!(
                state(&o),
                State::Dispatched,
                "{backend:?}: freed after the window"
            );
        }
        let o = ledger.accept(budgeted(5, short(), "10")).await.unwrap();
        assert_eq!(state(&o), State::AwaitingApproval, "{backend:?}");
        let used = ledger
            .read()
            .budget_use("invoices", 400, now())
            .await
            .unwrap();
        assert_eq!(
            (used[0].calls, used[0].sum),
            (2, 20 * AMOUNT_SCALE),
            "{backend:?}"
        );
    }
}

/// The ledger's decisions against a sliding window kept in the test, over random gaps, amounts
/// and a window lengthened and shortened again on the way (a config change keeps the counts):
/// every call is let through exactly when the window's use leaves room for it, and an answer is
/// told how much is left exactly when little is. Far from the limits a check counts against
/// running totals that may still hold charges that left the window; this shows it never
/// decides otherwise than an exact count would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_equals_an_exact_sliding_window() {
    let random = std::env::var("POSTERN_BUDGET_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now().0 as u64);
    println!("POSTERN_BUDGET_SEED={random}");
    for backend in BACKENDS {
        for seed in [1, 2, random] {
            sliding_window_case(backend, seed).await;
        }
    }
}

/// One case of [`every_decision_equals_an_exact_sliding_window`]: bursts and lulls, the window
/// switched between 0.5, 1 and 3 seconds every 37 calls.
async fn sliding_window_case(backend: Backend, seed: u64) {
    let (url, _guard) = fresh_store(backend).await;
    let ledger = open(&url).await;
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below
    };
    let (max_calls, max_sum) = (12u64, 400 * AMOUNT_SCALE);
    let mut counted: Vec<(i64, i64)> = Vec::new();
    let mut t = now().0;
    let mut window_ms = 1_000;
    for n in 0..400 {
        // Mostly a burst; now and then a lull long enough for the window to empty.
        t += match next(10) {
            0 => 300 + next(900),
            _ => next(120),
        } as i64;
        if n % 37 == 36 {
            window_ms = [500, 1_000, 3_000][next(3) as usize];
        }
        let amount = next(60) as i64 * AMOUNT_SCALE;
        let charge = BudgetCharge {
            window_ms,
            ..charge(Some(max_calls), Some(max_sum), amount)
        };
        let mut req = budgeted(n, charge, &amount_text(amount));
        req.now = postern_core::Timestamp(t);
        let outcome = ledger.accept(req).await.unwrap();
        let inside: Vec<_> = counted
            .iter()
            .filter(|(at, _)| *at > t - window_ms)
            .collect();
        let (calls, sum) = (
            inside.len() as u64,
            inside.iter().map(|(_, a)| a).sum::<i64>(),
        );
        let fits = calls < max_calls && sum + amount <= max_sum;
        let state = outcome.execution().lifecycle.state;
        let context = format!("{backend:?} seed {seed} call {n} at {t}: {calls} calls, {sum} summed in {window_ms} ms, amount {amount}");
        assert_eq!(state == State::Dispatched, fits, "{context}: {state:?}");
        let AcceptOutcome::Created { budget_left, .. } = outcome else {
            panic!("{context}: not a new execution");
        };
        if !fits {
            assert_eq!(budget_left, None, "{context}");
            continue;
        }
        counted.push((t, amount));
        let (calls, sum) = (calls + 1, sum + amount);
        let left_calls = max_calls - calls;
        let little =
            left_calls <= 1 || left_calls * 5 <= max_calls || (max_sum - sum) * 5 <= max_sum;
        match budget_left {
            Some(u) => {
                assert!(little, "{context}: told little is left of {u:?}");
                assert_eq!((u.calls, u.sum), (calls, sum), "{context}");
            }
            None => assert!(!little, "{context}: not told little is left"),
        }
    }
    assert!(verify(&ledger).await.is_valid(), "{backend:?}");
}

/// An agent chooses the amount: one near the largest number the ledger stores must be checked
/// like any other (past the limit it waits), never end in an arithmetic error in the database
/// (on PostgreSQL, an overflowing sum in the check's statement would fail the whole batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amount_near_the_largest_number_is_checked_not_an_error() {
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let huge = i64::MAX / 2 + 1;
        let budget = || charge(None, Some(i64::MAX - 10), huge);
        let first = ledger.accept(budgeted(0, budget(), "1")).await.unwrap();
        assert_eq!(
            first.execution().lifecycle.state,
            State::Dispatched,
            "{backend:?}"
        );
        let second = ledger.accept(budgeted(1, budget(), "1")).await.unwrap();
        assert_eq!(
            second.execution().lifecycle.state,
            State::AwaitingApproval,
            "{backend:?}: past the limit it waits"
        );
    }
}

/// Pruning takes an execution's charges with it: counted ones leave their scope's totals (so
/// the budget has room again, decided by the totals: the quick check never applies at a limit
/// of 2) and the window, and one that waited for a person and was denied leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_executions_take_their_charges_with_them() {
    use postern_core::lifecycle::Verdict;
    use postern_ledger::Retention;
    for backend in BACKENDS {
        let (url, _guard) = fresh_store(backend).await;
        let ledger = open(&url).await;
        let limit = || charge(Some(2), None, 0);
        let mut ids = Vec::new();
        for n in 1..=3 {
            ids.push(ledger.accept(budgeted(n, limit(), "1")).await.unwrap());
        }
        let (sent, waiting) = (&ids[..2], &ids[2]);
        assert_eq!(waiting.execution().lifecycle.state, State::AwaitingApproval);
        for o in sent {
            let done = NewEvent::new(EventKind::Completed(Verdict::Applied));
            ledger.append(o.execution().id, done, now()).await.unwrap();
        }
        let denied = NewEvent::new(EventKind::Denied);
        ledger
            .append(waiting.execution().id, denied, now())
            .await
            .unwrap();
        // Unbudgeted and last: the execution holding the chain's head is never pruned.
        let last = ledger
            .accept(request("create_invoice", "billing", r#"{"customer":"z"}"#))
            .await
            .unwrap();
        ledger
            .append(
                last.execution().id,
                NewEvent::new(EventKind::Cancelled),
                now(),
            )
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let retention = Retention {
            default: std::time::Duration::ZERO,
            by_tool: Default::default(),
        };
        let report = ledger.prune(&retention).await.unwrap();
        assert_eq!(report.executions, 3, "{backend:?}: {report:?}");
        let used = ledger
            .read()
            .budget_use("invoices", HOUR_MS, now())
            .await
            .unwrap();
        assert!(used.is_empty(), "{backend:?}: {used:?}");
        let again: Vec<_> = [4, 5]
            .into_iter()
            .map(|n| budgeted(n, limit(), "1"))
            .collect();
        for req in again {
            let o = ledger.accept(req).await.unwrap();
            assert_eq!(
                o.execution().lifecycle.state,
                State::Dispatched,
                "{backend:?}: the pruned charges left the totals"
            );
        }
        assert!(verify(&ledger).await.is_valid());
    }
}

//! Versioned migrations, one script per dialect. Applied in order inside a transaction; the
//! applied versions are recorded in `schema_migrations`.

use crate::dialect::Dialect;

pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
}

impl Migration {
    pub fn sql(&self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        }
    }
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial ledger",
        sqlite: include_str!("../migrations/sqlite/0001_initial.sql"),
        postgres: include_str!("../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "resumable streams",
        sqlite: include_str!("../migrations/sqlite/0002_resumable_streams.sql"),
        postgres: include_str!("../migrations/postgres/0002_resumable_streams.sql"),
    },
    Migration {
        version: 3,
        name: "fewer index pages per commit",
        sqlite: include_str!("../migrations/sqlite/0003_dispatched_index.sql"),
        postgres: include_str!("../migrations/postgres/0003_dispatched_index.sql"),
    },
    Migration {
        version: 4,
        name: "re-issue keys",
        sqlite: include_str!("../migrations/sqlite/0004_reissue_keys.sql"),
        postgres: include_str!("../migrations/postgres/0004_reissue_keys.sql"),
    },
    Migration {
        version: 5,
        name: "sessions bound to their actor",
        sqlite: include_str!("../migrations/sqlite/0005_session_actors.sql"),
        postgres: include_str!("../migrations/postgres/0005_session_actors.sql"),
    },
    Migration {
        version: 6,
        name: "pruned ranges",
        sqlite: include_str!("../migrations/sqlite/0006_pruned_ranges.sql"),
        postgres: include_str!("../migrations/postgres/0006_pruned_ranges.sql"),
    },
    Migration {
        version: 7,
        name: "run authorization",
        sqlite: include_str!("../migrations/sqlite/0007_run_authorization.sql"),
        postgres: include_str!("../migrations/postgres/0007_run_authorization.sql"),
    },
    Migration {
        version: 8,
        name: "upstream tool pins",
        sqlite: include_str!("../migrations/sqlite/0008_upstream_tool_pins.sql"),
        postgres: include_str!("../migrations/postgres/0008_upstream_tool_pins.sql"),
    },
    Migration {
        version: 9,
        name: "calls and run ends",
        sqlite: include_str!("../migrations/sqlite/0009_calls_and_run_ends.sql"),
        postgres: include_str!("../migrations/postgres/0009_calls_and_run_ends.sql"),
    },
    Migration {
        version: 10,
        name: "run activity",
        sqlite: include_str!("../migrations/sqlite/0010_run_activity.sql"),
        postgres: include_str!("../migrations/postgres/0010_run_activity.sql"),
    },
    Migration {
        version: 11,
        name: "instance takeover",
        sqlite: include_str!("../migrations/sqlite/0011_instance_takeover.sql"),
        postgres: include_str!("../migrations/postgres/0011_instance_takeover.sql"),
    },
    Migration {
        version: 12,
        name: "checkpoint chain",
        sqlite: include_str!("../migrations/sqlite/0012_checkpoint_chain.sql"),
        postgres: include_str!("../migrations/postgres/0012_checkpoint_chain.sql"),
    },
    Migration {
        version: 13,
        name: "run client address",
        sqlite: include_str!("../migrations/sqlite/0013_run_client_address.sql"),
        postgres: include_str!("../migrations/postgres/0013_run_client_address.sql"),
    },
    Migration {
        version: 14,
        name: "run principal",
        sqlite: include_str!("../migrations/sqlite/0014_run_principal.sql"),
        postgres: include_str!("../migrations/postgres/0014_run_principal.sql"),
    },
    Migration {
        version: 15,
        name: "budgets",
        sqlite: include_str!("../migrations/sqlite/0015_budgets.sql"),
        postgres: include_str!("../migrations/postgres/0015_budgets.sql"),
    },
    Migration {
        version: 16,
        name: "leaner budgets",
        sqlite: include_str!("../migrations/sqlite/0016_leaner_budgets.sql"),
        postgres: include_str!("../migrations/postgres/0016_leaner_budgets.sql"),
    },
    Migration {
        version: 17,
        name: "charges in one tree",
        sqlite: include_str!("../migrations/sqlite/0017_charges_in_one_tree.sql"),
        postgres: include_str!("../migrations/postgres/0017_charges_in_one_tree.sql"),
    },
    Migration {
        version: 18,
        name: "calls keyed by id",
        sqlite: include_str!("../migrations/sqlite/0018_calls_keyed_by_id.sql"),
        postgres: include_str!("../migrations/postgres/0018_calls_keyed_by_id.sql"),
    },
];

/// The schema version this build writes (and the only one the read-only store reader reads).
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::{AnyConnection, Connection, Executor, Row};

    /// A connection to `url` with every migration before `version` applied.
    async fn before(version: i64, url: &str, dialect: Dialect) -> AnyConnection {
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(url).await.unwrap();
        for m in MIGRATIONS.iter().filter(|m| m.version < version) {
            conn.execute(m.sql(dialect)).await.unwrap();
        }
        conn
    }

    /// A throw-away SQLite file named for `test` (removed first) and its URL.
    fn sqlite_file(test: &str) -> (std::path::PathBuf, String) {
        let file = std::env::temp_dir().join(format!("postern-{test}-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let url = format!("sqlite://{}?mode=rwc", file.display());
        (file, url)
    }

    /// 0017 moves a store's charges as 0016 left them: counted ones into the window-ordered
    /// table, waiting ones into `budget_pending`, and each charged execution learns where its
    /// charges are; an execution no budget counts is left as it was.
    async fn charges_survive_0017(url: &str, dialect: Dialect) {
        let mut conn = before(17, url, dialect).await;
        for (id, at) in [("exe_a", Some(1000)), ("exe_b", None), ("exe_c", None)] {
            let sql = format!("INSERT INTO executions (id, actor, tool, class, fingerprint, intent_scope, record, state, n, dispatches, cancel_requested, accepted_at, state_since, first_dispatched_at, rejection_retryable) VALUES ('{id}', 'agent', 't', 'write', 'f-{id}', '', '{{}}', 'succeeded', 2, 1, 0, 1000, 1000, {}, 0)", at.map_or("NULL".into(), |a: i64| a.to_string()));
            conn.execute(sql.as_str()).await.unwrap();
        }
        conn.execute("INSERT INTO budget_charges (execution_id, budget, scope_key, amount, at) VALUES ('exe_a', 'invoices', 'actor=agent', 0, 1000), ('exe_a', 'invoiced', '', 5000000, 1000), ('exe_b', 'invoices', 'actor=agent', 0, NULL)").await.unwrap();
        conn.execute(MIGRATIONS[16].sql(dialect)).await.unwrap();

        let counted: Vec<(String, String, i64, String, i64)> = conn
            .fetch_all("SELECT budget, scope_key, at, execution_id, amount FROM budget_charges ORDER BY budget DESC")
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect();
        let row = |b: &str, s: &str, at, id: &str, amount| {
            (b.to_string(), s.to_string(), at, id.to_string(), amount)
        };
        assert_eq!(
            counted,
            vec![
                row("invoices", "actor=agent", 1000, "exe_a", 0),
                row("invoiced", "", 1000, "exe_a", 5_000_000)
            ]
        );
        let pending: Vec<(String, String, String, i64)> = conn
            .fetch_all("SELECT execution_id, budget, scope_key, amount FROM budget_pending")
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        let waiting = ("exe_b".into(), "invoices".into(), "actor=agent".into(), 0);
        assert_eq!(pending, vec![waiting]);
        let executions = conn
            .fetch_all("SELECT id, budget_keys, budget_at FROM executions ORDER BY id")
            .await
            .unwrap();
        let keys = |i: usize| -> Option<Vec<(String, String)>> {
            let text: Option<String> = executions[i].get(1);
            text.map(|t| {
                let mut keys: Vec<(String, String)> = serde_json::from_str(&t).unwrap();
                keys.sort();
                keys
            })
        };
        let pair = |b: &str, s: &str| (b.to_string(), s.to_string());
        let both = vec![pair("invoiced", ""), pair("invoices", "actor=agent")];
        assert_eq!(keys(0), Some(both));
        assert_eq!(executions[0].get::<Option<i64>, _>(2), Some(1000));
        assert_eq!(keys(1), Some(vec![pair("invoices", "actor=agent")]));
        assert_eq!(executions[1].get::<Option<i64>, _>(2), None);
        assert_eq!(keys(2), None);
        assert_eq!(executions[2].get::<Option<i64>, _>(2), None);
    }

    /// 0018 moves every call as it was into the table keyed by id, and its indexes come back.
    #[tokio::test]
    async fn calls_survive_0018_on_sqlite() {
        let (file, url) = sqlite_file("0018");
        let mut conn = before(18, &url, Dialect::Sqlite).await;
        conn.execute("INSERT INTO calls (id, at, actor, tool, run_id, request_id, execution_id, attempt, operation_key, outcome, instance) VALUES ('call_b', 2, 'agent', 't', 'run_1', '7', 'exe_1', 'new', 'k', 'succeeded', 'i'), ('call_a', 1, 'agent', 't', NULL, NULL, NULL, 'refused', NULL, 'refused', 'i')").await.unwrap();
        conn.execute(MIGRATIONS[17].sql(Dialect::Sqlite))
            .await
            .unwrap();
        type Call = (String, i64, Option<String>, Option<String>, String);
        let calls: Vec<Call> = conn
            .fetch_all("SELECT id, at, run_id, execution_id, outcome FROM calls ORDER BY id")
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect();
        assert_eq!(
            calls,
            vec![
                ("call_a".into(), 1, None, None, "refused".into()),
                (
                    "call_b".into(),
                    2,
                    Some("run_1".into()),
                    Some("exe_1".into()),
                    "succeeded".into()
                )
            ]
        );
        let shape: Vec<(String, String)> = conn
            .fetch_all("SELECT name, sql FROM sqlite_master WHERE tbl_name = 'calls' AND sql IS NOT NULL ORDER BY name")
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let names: Vec<&str> = shape.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["calls", "calls_execution", "calls_run"]);
        assert!(shape[0].1.ends_with("WITHOUT ROWID"), "{}", shape[0].1);
        drop(conn);
        let _ = std::fs::remove_file(&file);
    }

    #[tokio::test]
    async fn charges_survive_0017_on_sqlite() {
        let (file, url) = sqlite_file("0017");
        charges_survive_0017(&url, Dialect::Sqlite).await;
        let _ = std::fs::remove_file(&file);
    }

    #[tokio::test]
    async fn charges_survive_0017_on_postgres() {
        let admin = postern_testkit::postgres::test_admin_url();
        let db = postern_testkit::postgres::FreshDatabase::create(&admin, "schema0017");
        charges_survive_0017(&db.url(), Dialect::Postgres).await;
    }
}

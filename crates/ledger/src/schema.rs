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
];

/// The schema version this build writes (and the only one the read-only store reader reads).
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

//! Where SQLite and PostgreSQL differ. Everything else in the ledger is one code path over
//! sqlx's `Any` driver, so both stores enforce the same invariants with the same statements.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    pub fn from_url(url: &str) -> Option<Dialect> {
        if url.starts_with("sqlite:") {
            Some(Dialect::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Dialect::Postgres)
        } else {
            None
        }
    }

    /// SQLite: take the write lock up front, so two processes on one file serialise instead of
    /// failing on lock upgrade. PostgreSQL: row locks do the serialising.
    pub fn begin(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        }
    }

    /// Row lock for read-then-write (SQLite's write lock already covers the whole database).
    pub fn for_update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE",
        }
    }

    /// Whether a chain's head is kept in its own row. PostgreSQL: yes, and the row lock is what
    /// serialises the chain's writers. SQLite: the write lock already serialises them and the
    /// head is the chain's last event, read back in the same transaction; not rewriting the
    /// row saves a page in every commit.
    pub fn keeps_head_row(self) -> bool {
        self == Dialect::Postgres
    }
}

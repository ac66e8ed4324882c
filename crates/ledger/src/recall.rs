//! What the SQLite writer remembers between its commits: the chain head and the summaries of
//! the executions it wrote, valid only while no other connection has written to the file since
//! (SQLite's `PRAGMA data_version` changes exactly then). Reading them back from the database
//! cost two statements per commit, a measurable share of a commit at concurrency 1.

use std::collections::HashMap;

use postern_core::ExecutionId;

use crate::model::ExecutionSummary;

/// Summaries kept at most; past this the map starts over (a lookup then reads the row).
const MAX_SUMMARIES: usize = 4096;

pub(crate) struct Recall {
    /// `data_version` when this was last known true.
    pub version: i64,
    pub head: (u64, [u8; 32]),
    summaries: HashMap<ExecutionId, ExecutionSummary>,
}

impl Recall {
    pub fn new(version: i64, head: (u64, [u8; 32])) -> Recall {
        Recall {
            version,
            head,
            summaries: HashMap::new(),
        }
    }

    pub fn summary(&self, id: ExecutionId) -> Option<&ExecutionSummary> {
        self.summaries.get(&id)
    }

    pub fn remember(&mut self, s: &ExecutionSummary) {
        if self.summaries.len() >= MAX_SUMMARIES && !self.summaries.contains_key(&s.id) {
            self.summaries.clear();
        }
        self.summaries.insert(s.id, s.clone());
    }

    pub fn forget(&mut self, id: ExecutionId) {
        self.summaries.remove(&id);
    }
}

//! Contract §6's decision order for a new execution, as one pure function beside
//! [`crate::recovery::decide`]: what its first events are, from facts the gateway gathered.
//!
//! 1. A locked vault that holds the tool's credential refuses it (nothing sent).
//! 2. (A tool the actor may call, with valid arguments, is checked before anything is recorded.)
//! 3. A run not yet authorized, and
//! 4. a per-use approval make it wait — unless the actor already has as many calls waiting as it
//!    may, which refuses it (no approval asked, nothing sent);
//! 5. otherwise it is authorized and dispatched in the same commit.

use std::time::Duration;

/// What the gateway knows of a new execution when it is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizationFacts {
    /// The tool's credential lives in the vault, and the vault is locked.
    pub vault_locked: bool,
    /// The run the call was made in, when its actor needs runs authorized and this one is not
    /// yet.
    pub unauthorized_run: Option<String>,
    /// The tool (or its credential) asks for a per-use approval, which expires after this.
    pub per_use_ttl: Option<Duration>,
    /// How long a run's authorization is waited for when no per-use approval says.
    pub default_ttl: Duration,
    /// Calls of this actor already waiting for a person (read only when this one would wait).
    pub waiting: u64,
    /// How many may wait at once (`max_pending_approvals_per_actor`).
    pub max_waiting: u32,
    /// The actor (named in a refusal).
    pub actor: String,
}

/// The first step of a new execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirstStep {
    /// Recorded `rejected`: nothing is sent. `reason` and what the agent can do next.
    Refuse { reason: String, next_step: String },
    /// Waits (`approval_requested`) for the run's authorization and/or a per-use approval,
    /// until `ttl` has passed.
    Wait {
        run: Option<String>,
        call: bool,
        ttl: Duration,
    },
    /// `authorized` and `dispatched` in the accept's commit.
    Send,
}

/// Contract §6's order (steps 1, 3, 4, 5) over `facts`.
pub fn first_step(facts: &AuthorizationFacts) -> FirstStep {
    if facts.vault_locked {
        let reason = "the vault is locked".to_string();
        return FirstStep::Refuse {
            next_step: format!("{reason}: nothing was sent. Repeat the identical call once an operator has unlocked it (postern vault unlock)"),
            reason,
        };
    }
    let call = facts.per_use_ttl.is_some();
    if facts.unauthorized_run.is_none() && !call {
        return FirstStep::Send;
    }
    if facts.waiting >= u64::from(facts.max_waiting) {
        let reason = format!(
            "actor {} already has {} calls awaiting an operator's approval (max_pending_approvals_per_actor = {})",
            facts.actor, facts.waiting, facts.max_waiting
        );
        return FirstStep::Refuse {
            next_step: format!("{reason}: nothing was sent and no approval was requested. Repeat the identical call once an operator has decided some of them"),
            reason,
        };
    }
    FirstStep::Wait {
        run: facts.unauthorized_run.clone(),
        call,
        ttl: facts.per_use_ttl.unwrap_or(facts.default_ttl),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts() -> impl Strategy<Value = AuthorizationFacts> {
        (
            any::<bool>(),
            proptest::option::of("[a-z]{1,4}"),
            proptest::option::of(1u64..1000),
            0u64..6,
            0u32..5,
        )
            .prop_map(|(vault_locked, run, per_use, waiting, max_waiting)| {
                AuthorizationFacts {
                    vault_locked,
                    unauthorized_run: run,
                    per_use_ttl: per_use.map(Duration::from_secs),
                    default_ttl: Duration::from_secs(900),
                    waiting,
                    max_waiting,
                    actor: "a".into(),
                }
            })
    }

    proptest! {
        /// Nothing is ever sent past a locked vault, an unauthorized run or a per-use approval;
        /// a call that needs nobody is always sent; a wait is only ever asked within the cap,
        /// and for exactly what is missing.
        #[test]
        fn the_order_holds_for_every_combination(f in facts()) {
            let step = first_step(&f);
            let needs_person = f.unauthorized_run.is_some() || f.per_use_ttl.is_some();
            match &step {
                FirstStep::Send => prop_assert!(!f.vault_locked && !needs_person),
                FirstStep::Wait { run, call, ttl } => {
                    prop_assert!(!f.vault_locked && needs_person);
                    prop_assert!(f.waiting < u64::from(f.max_waiting));
                    prop_assert_eq!(run, &f.unauthorized_run);
                    prop_assert_eq!(*call, f.per_use_ttl.is_some());
                    prop_assert_eq!(*ttl, f.per_use_ttl.unwrap_or(f.default_ttl));
                }
                FirstStep::Refuse { reason, .. } => prop_assert!(
                    f.vault_locked
                        || (needs_person && f.waiting >= u64::from(f.max_waiting)),
                    "refused for {reason}"
                ),
            }
            if f.vault_locked {
                let refused = matches!(step, FirstStep::Refuse { .. });
                prop_assert!(refused, "a locked vault must refuse");
            }
        }
    }
}

//! What a configuration promises that this build cannot keep: refused at start-up.

use postern_core::config::Config;

/// What the configuration promises that this build does not do. A promise the gateway would
/// silently ignore (an approval nobody is asked for, a channel never dialled) is a start-up
/// error until it is built.
pub fn unkept_promises(config: &Config) -> Vec<String> {
    use postern_core::config::SessionApproval;
    use postern_core::contract::Approval;
    let mut unkept = Vec::new();
    if config.operators.is_empty() {
        for a in &config.actors {
            if a.session_approval == SessionApproval::Required {
                unkept.push(format!("actor {:?}: session_approval = \"required\", but no [[operator]] is declared to authorize its runs", a.name));
            }
        }
    }
    // An approval nobody can give would hold every call until it expires.
    if config.operators.is_empty() {
        for (name, c) in &config.credentials {
            if c.approval == Approval::EveryCall {
                unkept.push(format!("credential {name:?}: approval = \"every_call\", but no [[operator]] is declared to approve its calls"));
            }
        }
    }
    for b in &config.budgets {
        if b.on_exhausted == postern_core::budget::OnExhausted::Approval
            && config.operators.is_empty()
        {
            unkept.push(format!("budget {:?}: on_exhausted = \"approval\" (the default), but no [[operator]] is declared to approve a call past it; declare one, or set on_exhausted = \"refuse\"", b.name));
        }
    }
    for t in &config.tools {
        if t.approval == Approval::EveryCall && config.operators.is_empty() {
            unkept.push(format!("tool {:?}: approval = \"every_call\", but no [[operator]] is declared to approve its calls", t.name));
        }
    }
    if config.operators.is_empty() {
        for (name, u) in &config.upstreams {
            if u.expose_all
                .as_ref()
                .is_some_and(|e| e.template().approval == Approval::EveryCall)
            {
                unkept.push(format!("upstream {name:?}: approval = \"every_call\", but no [[operator]] is declared to approve its calls"));
            }
        }
    }
    unkept
}

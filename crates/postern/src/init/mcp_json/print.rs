//! What `init --from-mcp-json` prints: what was made, the variables to set (in one command to
//! copy), how to start and check the gateway, and the one change to the host's config.

use std::path::{Path, PathBuf};

use postern_core::config::{DEFAULT_MAX_DURATION, DEFAULT_UPSTREAM_TIMEOUT};
use postern_core::duration::format_duration;
use serde_json::Value;

use super::variables::Shown;
use super::{Onboarding, AGENT_TOKEN_VAR, OPERATOR_TOKEN_VAR};

/// How the two tokens the config names are made (a shell command substitution).
const RANDOM_TOKEN: &str = "$(openssl rand -hex 24)";

impl Onboarding {
    /// What was made, the variables to set and the change to the host's config.
    pub fn print(&self, config: &Path) {
        println!(
            "made from {}: {} upstream(s), one per server of \"{}\":",
            self.file,
            self.made.len(),
            self.key
        );
        let width = self.made.iter().map(|m| m.name.len()).max().unwrap_or(0);
        for m in &self.made {
            let renamed = match m.source == m.name {
                true => String::new(),
                false => format!("  (server {:?})", m.source),
            };
            println!(
                "  {:<width$}  {:<5}  tools served as {}<tool>{renamed}  {}",
                m.name, m.transport, m.prefix, m.reads
            );
        }
        println!("a tool is served as a read (performed on every call, nothing stored) when postern.toml names it in its upstream's read_only (each with why: review them); every other one as irreversible (a call whose answer was lost is never sent again on its own)");
        println!(
            "a call waits up to {} for its answer or its next progress report, {} in all (timeout and max_duration in each [upstream.*]: raise them for tools that work longer in silence)",
            format_duration(DEFAULT_UPSTREAM_TIMEOUT),
            format_duration(DEFAULT_MAX_DURATION)
        );
        for note in &self.notes {
            println!("note: {note}");
        }
        self.print_variables(config);
        println!("then: postern serve -c {}", config.display());
        println!(
            "check it (the operator's view, with {OPERATOR_TOKEN_VAR} set): postern status -c {}",
            config.display()
        );
        self.print_routing(config);
    }

    /// Each variable and what it holds, then all of them in one command.
    fn print_variables(&self, config: &Path) {
        println!(
            "next: set these variables where postern serve runs (their values are not in {}):",
            config.display()
        );
        let width = self
            .exports
            .iter()
            .map(|e| e.var.len())
            .chain([AGENT_TOKEN_VAR.len(), OPERATOR_TOKEN_VAR.len()])
            .max()
            .unwrap_or(0);
        println!("  {AGENT_TOKEN_VAR:<width$}  the agent's bearer token (16+ characters)");
        println!("  {OPERATOR_TOKEN_VAR:<width$}  the operator's token, for postern status, review, upstream list and the console (16+ characters, not the agent's)");
        let mut assignments = vec![
            format!("{AGENT_TOKEN_VAR}={RANDOM_TOKEN}"),
            format!("{OPERATOR_TOKEN_VAR}={RANDOM_TOKEN}"),
        ];
        let mut masked = false;
        for e in &self.exports {
            let (value, note) = match &e.shown {
                Shown::Whole(v) => (v.as_str(), ""),
                Shown::Masked(hint) => {
                    masked = true;
                    (
                        hint.as_str(),
                        " (looks secret, masked here: copy it from there)",
                    )
                }
            };
            println!("  {:<width$}  {} in {}{note}", e.var, e.origin, self.file);
            assignments.push(format!("{}={}", e.var, shell_quote(value)));
        }
        match masked {
            true => println!(
                "in one command (put each masked value, shown as its start and '…', in from {}):",
                self.file
            ),
            false => println!("in one command:"),
        }
        println!("  export {}", assignments.join(" "));
    }

    /// The one change to the host's config: its servers replaced by Postern.
    fn print_routing(&self, config: &Path) {
        let port = self.listen.rsplit(':').next().unwrap_or("8750");
        let url = format!("http://127.0.0.1:{port}/mcp");
        let token = format!("<the value of {AGENT_TOKEN_VAR}>");
        println!("route the host through Postern: in its config, replace the servers of \"{}\" with this one (it serves all their tools):", self.key);
        let connect = ["connect".to_string(), url];
        let env = [("POSTERN_TOKEN".to_string(), token)];
        println!("{}", snippet(self.key, &connect, &env));
        let path: PathBuf = std::fs::canonicalize(config).unwrap_or_else(|_| config.into());
        let serve = ["serve", "--stdio", "-c", &path.display().to_string()].map(String::from);
        let mut env = vec![(
            AGENT_TOKEN_VAR.to_string(),
            "<16+ random characters>".into(),
        )];
        env.extend(
            self.exports
                .iter()
                .map(|e| (e.var.clone(), "…".to_string())),
        );
        println!("or let the host start the gateway itself on stdio (no postern serve to run; the variables above in its \"env\", the operator's token aside: stdio serves no operator API):");
        println!("{}", snippet(self.key, &serve, &env));
    }
}

/// `value` as one shell word: single-quoted unless it is plain.
fn shell_quote(value: &str) -> String {
    match !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.:,@%+".contains(c))
    {
        true => value.to_string(),
        false => format!("'{}'", value.replace('\'', r"'\''")),
    }
}

/// The host's entry for Postern, `postern ARGS…` with `env`, in the host's own JSON.
fn snippet(key: &str, args: &[String], env: &[(String, String)]) -> String {
    let s = |v: &str| Value::String(v.to_string()).to_string();
    let args: Vec<String> = args.iter().map(|a| s(a)).collect();
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("        {}: {}", s(k), s(v)))
        .collect();
    format!(
        "{{\n  {}: {{\n    \"postern\": {{\n      \"command\": \"postern\",\n      \"args\": [{}],\n      \"env\": {{\n{}\n      }}\n    }}\n  }}\n}}",
        s(key),
        args.join(", "),
        env.join(",\n")
    )
}

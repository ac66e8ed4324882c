//! The durable marker protocol: the POSIX `sh` scripts the gateway sends to the host, and what
//! their reports mean.
//!
//! A dispatch sends [`dispatch_script`] to `sh -s` on the host. With
//! `M = <marker dir>/<execution id>`:
//! 1. `mkdir "$M"` is the claim (atomic): if it exists the script runs nothing and reports
//!    `claimed-before`; if it cannot be made (no space, not writable) it reports `refused`.
//! 2. The fingerprint is written to `$M/intent` (then synced), the rendered command to
//!    `$M/command` and the runner to `$M/run`; a failure here removes the claim and reports
//!    `refused` — nothing ran.
//! 3. The runner is started detached (`setsid`, stdin from /dev/null, its own session: a dropped
//!    SSH connection does not stop it). It takes the start gate `mkdir "$M/go"`, opens
//!    `$M/command` and removes it (the rendered command may hold secret arguments: it is not
//!    left on the host's disk once the runner has started, even if it dies), writes
//!    `$M/started` (time, pid), and only then runs the command with `/bin/sh` from that open
//!    file (`/dev/fd/4`), its stdout and
//!    stderr captured through two FIFOs to `$M/stdout` and `$M/stderr` (each capped at
//!    [`CAPTURE_BYTES`]). When the command itself exits the runner waits at most 2 s for the
//!    capture to drain (a daemon the command left behind may hold the output open for ever;
//!    its later output is still drained, never blocked) and writes `$M/finished` (exit code,
//!    time) atomically (temp file, then `mv`). A query that takes the gate of a runner that
//!    never started removes `$M/command` too.
//! 4. The script waits for the runner and reports `finished` with the exit code and the
//!    output sizes, followed by the output itself (or `lost`). Nothing is reported before
//!    that (each report line is one more small write, and sshd delays small writes on exec
//!    sessions): a connection cut after the claim leaves no report, which is unknown.
//!
//! Before any call of a tool is recorded, [`locate_script`] learns the marker directory's
//! absolute path (after `$HOME` and symlinks); the `dispatched` event records it, and the
//! dispatch and every query of that execution use that path ([`MarkerDir::Recorded`]).
//!
//! Recovery sends [`query_script`]: `unreadable` (the marker directory is gone or cannot be
//! read: nothing can be said), `none` (no marker: the command provably never started),
//! `finished` (the result), `running` (the runner's pid is alive), `dead` (started, no
//! `finished`, pid gone: it may have half-run), `foreign` (the marker holds another intent), or
//! `starting`, or `abandoned`: a claim whose runner never took the start gate is abandoned by
//! the query taking the gate itself, so it can never start later. An abandoned marker is never
//! removed (removing it would reopen the gate to a dispatch still on its way): the command
//! never ran, and a person settles it. The start gate and `started` are synced before the
//! command runs, so a host that crashes cannot forget that it started.
//!
//! Every report line begins with a nonce chosen per script, so nothing the command (or a
//! shell's start-up file) prints can be taken for one; the command's output never reaches
//! the connection before the `finished` line that gives its exact size.

use crate::ssh::command::quote;

/// The cap on each of the command's stdout and stderr as kept on the host.
pub const CAPTURE_BYTES: u64 = 1 << 20;

/// Where an execution's markers live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerDir<'a> {
    /// The absolute directory the execution's record names, learned from the host with
    /// [`locate_script`] before the call was recorded: a changed `$HOME`, user or
    /// `marker_dir` does not move it.
    Recorded(&'a str),
    /// The tool's `marker_dir`, or the host's `${POSTERN_MARKER_DIR:-$HOME/.postern/exec}`,
    /// as the host resolves it now: for executions recorded before records named the
    /// directory, and for learning it.
    Resolved(Option<&'a str>),
}

impl MarkerDir<'_> {
    fn assignment(self) -> String {
        match self {
            MarkerDir::Recorded(dir) | MarkerDir::Resolved(Some(dir)) => {
                format!("D={}", quote(dir))
            }
            MarkerDir::Resolved(None) => {
                "D=\"${POSTERN_MARKER_DIR:-$HOME/.postern/exec}\"".to_string()
            }
        }
    }
}

/// The runner, kept in `$M/run` and started detached as `sh "$M/run" M CWD CAP`.
const RUNNER: &str = r#"M=$1; C=$2; CAP=$3
if [ -n "$C" ]; then cd "$C" || exit 0; fi
rm -f "$M/o" "$M/e"
mkfifo "$M/o" "$M/e" 2>/dev/null || exit 0
mkdir "$M/go" 2>/dev/null || exit 0
exec 4< "$M/command" || exit 0
rm -f "$M/command"
printf '%s %s\n' "$(date +%s)" "$$" > "$M/started.tmp" && mv "$M/started.tmp" "$M/started" || exit 0
sync "$M/started" "$M" 2>/dev/null
cap() { ( ulimit -f $((CAP / 512)); trap '' XFSZ; exec cat > "$1" ) 2>/dev/null; cat > /dev/null; }
cap "$M/stdout" < "$M/o" & O=$!
cap "$M/stderr" < "$M/e" & R=$!
sh /dev/fd/4 > "$M/o" 2> "$M/e" < /dev/null 3>&-
rc=$?
exec 4<&-
trap : USR1
( sleep 2; kill -USR1 $$ ) 2>/dev/null & T=$!
wait $O $R
kill $T 2>/dev/null
rm -f "$M/o" "$M/e"
printf '%s %s\n' "$rc" "$(date +%s)" > "$M/finished.tmp"
sync "$M/finished.tmp" 2>/dev/null
mv "$M/finished.tmp" "$M/finished"
rm -f "$M/command"
"#;

/// Prints the `finished` report of a marker and the captured output.
const REPORT: &str = r#"report() {
  read rc t < "$M/finished"
  so=$(wc -c < "$M/stdout" 2>/dev/null) || so=0
  se=$(wc -c < "$M/stderr" 2>/dev/null) || se=0
  echo
  echo "$N finished $rc $so $se"
  head -c "$so" "$M/stdout" 2>/dev/null; head -c "$se" "$M/stderr" 2>/dev/null
}
"#;

/// What every script starts with: the nonce, the execution, its intent and the marker path.
fn preamble(nonce: &str, execution_id: &str, fingerprint: &str, dir: MarkerDir<'_>) -> String {
    format!(
        "set -u\numask 077\nN={}\nE={}\nF={}\n{}\ncase \"$D\" in /*) ;; *) D=\"$PWD/$D\" ;; esac\nM=\"$D/$E\"\n{REPORT}",
        quote(nonce),
        quote(execution_id),
        quote(fingerprint),
        dir.assignment()
    )
}

/// The script that learns the marker directory before any call is recorded: made if missing,
/// written and searchable, reported as its absolute physical path (`dir PATH`), or `refused`.
pub fn locate_script(nonce: &str, dir: MarkerDir<'_>) -> String {
    whole(format!(
        r#"set -u
umask 077
N={nonce}
{assign}
case "$D" in /*) ;; *) D="$PWD/$D" ;; esac
if ! mkdir -p "$D" 2>/dev/null || ! [ -d "$D" ] || ! [ -w "$D" ] || ! [ -x "$D" ]; then
  echo "$N refused the marker directory $D cannot be made or written"; exit 0
fi
P=$(cd "$D" && pwd -P) || {{ echo "$N refused the marker directory $D cannot be entered"; exit 0; }}
case "$P" in *"
"*) echo "$N refused the marker directory's path holds a newline"; exit 0 ;; esac
echo "$N dir $P"
"#,
        nonce = quote(nonce),
        assign = dir.assignment(),
    ))
}

/// The script of one dispatch: claim, record the intent, start the command detached, wait and
/// report.
pub fn dispatch_script(
    nonce: &str,
    execution_id: &str,
    fingerprint: &str,
    command: &str,
    cwd: Option<&str>,
    dir: MarkerDir<'_>,
) -> String {
    let mut s = preamble(nonce, execution_id, fingerprint, dir);
    s.push_str(&format!("C={}\n", quote(cwd.unwrap_or(""))));
    s.push_str(&format!(
        r#"if [ -n "$C" ] && ! [ -d "$C" ]; then echo "$N refused the working directory $C does not exist"; exit 0; fi
mkdir -p "$D" 2>/dev/null
if ! mkdir "$M" 2>/dev/null; then
  if [ -d "$M" ]; then echo "$N claimed-before"; else echo "$N refused the marker $M cannot be created (is $D writable, is the disk full?)"; fi
  exit 0
fi
if ! {{ printf '%s\n' "$F" > "$M/intent.tmp" && mv "$M/intent.tmp" "$M/intent" && printf '%s\n' {command} > "$M/command" && printf '%s' {runner} > "$M/run"; }} 2>/dev/null; then
  rm -rf "$M"; echo "$N refused the marker $M cannot be written (is the disk full?)"; exit 0
fi
sync "$M/intent" "$M" 2>/dev/null
if command -v setsid >/dev/null 2>&1; then
  setsid sh "$M/run" "$M" "$C" {cap} </dev/null >/dev/null 2>&1 &
else
  nohup sh "$M/run" "$M" "$C" {cap} </dev/null >/dev/null 2>&1 &
fi
P=$!
wait "$P"
if [ -e "$M/finished" ]; then report; else echo "$N lost"; fi
"#,
        command = quote(command),
        runner = quote(RUNNER),
        cap = CAPTURE_BYTES,
    ));
    whole(s)
}

/// The script as one function, called on its last line: `sh -s` reads and runs a script as
/// it arrives, so a connection lost mid-script would otherwise run a part of it; a function
/// is run only once it has arrived whole.
fn whole(body: String) -> String {
    format!("postern_main() {{\n{body}}}\npostern_main\n")
}

/// The read-only question of recovery: what became of this execution on the host. (It writes
/// only to abandon a claim whose command never started, so that it never will.)
pub fn query_script(
    nonce: &str,
    execution_id: &str,
    fingerprint: &str,
    dir: MarkerDir<'_>,
) -> String {
    let mut s = preamble(nonce, execution_id, fingerprint, dir);
    s.push_str(
        r#"if ! [ -d "$D" ] || ! [ -r "$D" ] || ! [ -x "$D" ]; then echo "$N unreadable $D"; exit 0; fi
if [ ! -d "$M" ]; then echo "$N none"; exit 0; fi
I=
if [ -r "$M/intent" ]; then read I < "$M/intent"; fi
if [ -n "$I" ] && [ "$I" != "$F" ]; then echo "$N foreign"; exit 0; fi
if [ -e "$M/finished" ]; then report; exit 0; fi
if [ -e "$M/started" ]; then
  read t p < "$M/started"
  if kill -0 "$p" 2>/dev/null && { [ ! -r "/proc/$p/cmdline" ] || tr '\0' ' ' < "/proc/$p/cmdline" | grep -qF -- "$E"; }; then
    echo "$N running $p"; exit 0
  fi
  if [ -e "$M/finished" ]; then report; else echo "$N dead $p"; fi
  exit 0
fi
if mkdir "$M/go" 2>/dev/null; then rm -f "$M/command"; echo "$N abandoned"; else echo "$N starting"; fi
"#,
    );
    whole(s)
}

/// A report of either script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// Nothing ran: why (no working directory, the marker could not be made or written).
    Refused(String),
    /// An earlier dispatch of this execution holds the claim.
    ClaimedBefore,
    /// Claimed and started; the connection ended before it finished (no later line).
    Claimed,
    /// The command ended.
    Finished {
        exit_code: i32,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// The runner ended without `finished`.
    Lost,
    /// No marker: the command never started.
    None,
    /// A claim whose runner never took the start gate, now taken by the query: the command
    /// never ran and never will under this marker.
    Abandoned,
    /// The marker belongs to another intent.
    Foreign,
    Running,
    /// Started, the pid gone, never finished: it may have half-run.
    Dead,
    Starting,
    /// The marker directory is missing or cannot be read: nothing can be said, least of all
    /// that the command never started.
    Unreadable,
    /// [`locate_script`]'s answer: the marker directory's absolute path.
    Located(String),
}

/// Reads the last report in `out` (a script's stdout); `None` when it holds none (the
/// connection ended before the script said anything).
pub fn parse(out: &[u8], nonce: &str) -> Option<Report> {
    let prefix = format!("{nonce} ");
    let mut report = None;
    let mut at = 0;
    while at < out.len() {
        let end = out[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(out.len(), |i| at + i);
        let line = String::from_utf8_lossy(&out[at..end]);
        at = end + 1;
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let mut words = rest.split_whitespace();
        report = Some(match words.next().unwrap_or("") {
            "refused" => Report::Refused(rest["refused".len()..].trim().to_string()),
            "claimed-before" => Report::ClaimedBefore,
            "claimed" => Report::Claimed,
            "lost" => Report::Lost,
            "none" => Report::None,
            "abandoned" => Report::Abandoned,
            "foreign" => Report::Foreign,
            "running" => Report::Running,
            "dead" => Report::Dead,
            "starting" => Report::Starting,
            "unreadable" => Report::Unreadable,
            "dir" => match rest["dir".len()..].strip_prefix(' ') {
                Some(path) if path.starts_with('/') => Report::Located(path.to_string()),
                _ => continue,
            },
            "finished" => {
                let mut n = || words.next().and_then(|w| w.parse::<i64>().ok());
                let (Some(code), Some(so), Some(se)) = (n(), n(), n()) else {
                    return None;
                };
                if !(0..=255).contains(&code) {
                    return None;
                }
                let (so, se) = (usize::try_from(so).ok()?, usize::try_from(se).ok()?);
                // The output follows the line, exactly as long as it says; shorter means the
                // connection ended inside it: no report.
                let body = out.get(at..at.checked_add(so)?.checked_add(se)?)?;
                return Some(Report::Finished {
                    exit_code: code as i32,
                    stdout: body[..so].to_vec(),
                    stderr: body[so..].to_vec(),
                });
            }
            _ => continue,
        });
    }
    report
}

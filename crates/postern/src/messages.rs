//! The CLI's own lines on stderr: what a verb tells its user beside its output (a warning, where
//! an export went, the state of a `connect` bridge, the error a verb ends with). This is the one
//! module that writes to stderr itself; everything else the process says is a diagnostic and
//! goes through `tracing` (`telemetry` routes it, as text or JSON lines, filtered by
//! `POSTERN_LOG`).

use std::fmt::Arguments;

/// A line for the user of a verb (`say(format_args!(…))`).
pub fn say(line: Arguments<'_>) {
    eprintln!("{line}");
}

/// A progress line on a terminal, redrawn in place (the next one, or [`say`], replaces it).
pub fn progress(line: Arguments<'_>) {
    eprint!("\r{line}");
}

/// The error a verb ends with (its causes after colons).
pub fn error(e: &anyhow::Error) {
    eprintln!("error: {e:#}");
}

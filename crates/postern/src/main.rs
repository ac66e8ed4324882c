//! `postern`: the command-line front of the Postern MCP action gateway.
//!
//! Architecture invariant: this crate only parses arguments, reads files and environment, and
//! prints. Decisions live in the library crates; this is the only crate that uses `anyhow`.

mod fingerprint;
mod secrets;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "postern",
    version,
    about = "An MCP action gateway: every action gets an identity, a fingerprint and a durable record"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the canonical action record and intent fingerprint a call would get.
    ///
    /// Answers "would these two calls be treated as the same intent?" without running anything.
    Fingerprint(fingerprint::FingerprintArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Fingerprint(args) => fingerprint::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

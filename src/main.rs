//! The `kindred` binary: parses arguments, installs logging, runs a command, prints the error
//! chain on failure. All behaviour lives in the library and `cli/`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    cli::init_tracing(args.verbose, args.command.serves());
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

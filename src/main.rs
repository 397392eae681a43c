//! The `kindred` binary: parses arguments, installs logging, runs a command, prints the error
//! chain on failure. All behaviour lives in the library and `cli/`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    if !args.command.serves() {
        restore_sigpipe();
    }
    cli::init_tracing(args.verbose, args.command.serves());
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// A command whose output is piped into a reader that stops early (`kindred encode … | head`)
/// ends as `cat` does, by SIGPIPE, instead of panicking in `println!` on the broken pipe.
/// Servers keep Rust's default (SIGPIPE ignored, writes fail with EPIPE), so a client that hangs
/// up never ends one; sockets are written with MSG_NOSIGNAL either way.
fn restore_sigpipe() {
    #[cfg(target_os = "linux")]
    // SAFETY: called once at start-up, before any thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

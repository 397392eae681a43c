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
            eprintln!("error: {}", error_message(&err));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, joined by ": " as anyhow's `{:#}` does, less any cause whose text
/// the message already ends with (an error that shows its source in its own text, as I/O
/// errors with their context do, would otherwise print it twice).
fn error_message(err: &anyhow::Error) -> String {
    join_causes(err.chain().map(|e| e.to_string()))
}

fn join_causes(causes: impl IntoIterator<Item = String>) -> String {
    let mut message = String::new();
    for cause in causes {
        if message.is_empty() {
            message = cause;
        } else if !message.ends_with(&cause) {
            message.push_str(": ");
            message.push_str(&cause);
        }
    }
    message
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

#[cfg(test)]
mod tests {
    use super::join_causes;

    #[test]
    fn a_cause_the_message_already_shows_is_not_repeated() {
        let causes = |c: &[&str]| join_causes(c.iter().map(|s| s.to_string()));
        assert_eq!(
            causes(&["opening a.jsonl: No such file", "No such file"]),
            "opening a.jsonl: No such file"
        );
        assert_eq!(
            causes(&["reindexing qatar", "opening x: denied", "denied"]),
            "reindexing qatar: opening x: denied"
        );
        assert_eq!(causes(&["one"]), "one");
        assert_eq!(causes(&["outer", "inner"]), "outer: inner");
    }
}

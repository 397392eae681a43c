//! A Milvus server for the Milvus backend's tests and bench: the PyPI package `milvus` (the
//! Milvus 2.3.5 standalone server, [`Kind::Standalone`]) or `milvus-lite` 3.2.2 (a Python
//! server speaking the Milvus 2.6 API, [`Kind::Lite`]), installed by `scripts/milvus.sh
//! [lite]` into target/, started by `scripts/milvus_server.py` on a free loopback port with its
//! own data directory, stopped on drop. The server's output goes to `<dir>.log` beside its data
//! directory; dropped while a test panics, it says whether the server was still running (or how
//! it ended) and prints that log's last lines, so a failure that a dead or stalled server caused
//! says so. Shared by `tests/it/milvus.rs` and `benches/scale.rs` (each includes this file with
//! `#[path]`). Panics, saying why, when the server cannot be installed or started.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Milvus 2.3.5 standalone (PyPI `milvus`): kindred's split layout.
    Standalone,
    /// milvus-lite 3.2.2 (PyPI `milvus-lite`): kindred's full-text layout.
    Lite,
}

impl Kind {
    /// `scripts/milvus.sh`'s arguments for this server.
    fn script_args(self) -> &'static [&'static str] {
        match self {
            Kind::Standalone => &[],
            Kind::Lite => &["lite"],
        }
    }
}

/// A running Milvus server.
pub struct Milvus {
    child: Child,
    pub port: u16,
    pub kind: Kind,
    /// Where the server's output goes (appended to by a restart on the same directory).
    log: PathBuf,
    /// Set by [`Milvus::stop`]: the server ended because it was asked to.
    stopped: bool,
}

impl Milvus {
    /// Installs (once) and starts the Milvus 2.3.5 standalone server over `dir`, on a free
    /// port.
    pub fn start(dir: &Path) -> Milvus {
        Milvus::start_kind(Kind::Standalone, dir)
    }

    /// Installs (once) and starts a `kind` server over `dir`, on a free port.
    pub fn start_kind(kind: Kind, dir: &Path) -> Milvus {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("addr").port()
        };
        Milvus::start_on(kind, dir, port)
    }

    /// Installs (once) and starts a `kind` server over `dir` on `port` (a restart: the same
    /// directory and port as before).
    pub fn start_on(kind: Kind, dir: &Path, port: u16) -> Milvus {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("scripts/milvus.sh");
        let install = Command::new(&script)
            .args(kind.script_args())
            .status()
            .expect("scripts/milvus.sh runs");
        assert!(
            install.success(),
            "scripts/milvus.sh {:?} could not install the {kind:?} Milvus server from PyPI",
            kind.script_args()
        );
        let python = Command::new(&script)
            .args(kind.script_args())
            .arg("python")
            .output()
            .expect("scripts/milvus.sh python");
        let python = String::from_utf8(python.stdout).expect("utf-8");
        let log = dir.with_extension("log");
        let output = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| {
                panic!("cannot open the Milvus server's log {}: {e}", log.display())
            });
        let mut child = Command::new(python.trim())
            .arg(root.join("scripts/milvus_server.py"))
            .args(["--dir", dir.to_str().expect("utf-8")])
            .args(["--port", &port.to_string()])
            .args((kind == Kind::Lite).then_some("--lite"))
            .stdout(Stdio::piped())
            .stderr(output)
            .spawn()
            .expect("the Milvus server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("reads the server's first line");
        assert!(
            line.starts_with("ready"),
            "the Milvus server did not start: {line:?}; its log ends:\n{}",
            tail(&log)
        );
        Milvus {
            child,
            port,
            kind,
            log,
            stopped: false,
        }
    }

    /// How the server ended, if it has (`None` while it runs).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The `--backend` value that reaches it.
    pub fn url(&self) -> String {
        format!("milvus://127.0.0.1:{}", self.port)
    }

    /// Stops it (SIGTERM, then waits).
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if self.exited().is_none() {
            // SAFETY: kill(2) with our own child's pid and a valid signal number.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}

impl Drop for Milvus {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.stopped {
            let state = match self.exited() {
                None => "was still running".to_string(),
                Some(status) => format!("had ended by itself ({status})"),
            };
            eprintln!(
                "the {:?} Milvus server on port {} {state}; its log ({}) ends:\n{}",
                self.kind,
                self.port,
                self.log.display(),
                tail(&self.log)
            );
        }
        self.stop();
    }
}

/// The last 80 lines of the file at `path` (or why it cannot be read).
fn tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(80)..].join("\n")
        }
        Err(e) => format!("(cannot read it: {e})"),
    }
}

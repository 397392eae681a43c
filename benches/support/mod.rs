//! What the benches share (`load`, `soak`; `ann` for the CPU model): a `kindred serve` child on loopback, a
//! minimal keep-alive HTTP/1.1 client, and numbers from the environment. Included by each bench
//! with `#[path = "support/mod.rs"] mod support;` (not a bench target itself).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The client's read and write timeout per request.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The number in environment variable `name`, or `default`.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `kindred serve` child process on an ephemeral loopback port, ready when returned.
pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Server {
    pub fn start(data: &Path, model: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kindred"))
            .env("KINDRED_MODEL", model)
            .env("RUST_LOG", "warn")
            .args([
                "--data",
                data.to_str().unwrap(),
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .expect("listening line")
            .to_string();
        let s = Server { child, base };
        let deadline = Instant::now() + Duration::from_secs(600);
        while ureq::get(&s.url("/readyz")).call().is_err() {
            assert!(Instant::now() < deadline, "not ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }
    pub fn url(&self, p: &str) -> String {
        format!("{}{p}", self.base)
    }
    pub fn stop(mut self) {
        // SAFETY: kill(2) with our own child's pid and a valid signal number.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        self.child.wait().unwrap();
    }
}

/// A minimal keep-alive HTTP/1.1 client (one write per request, TCP_NODELAY, 30 s timeouts);
/// reconnects after a transport error. Sends `Host: 127.0.0.1:PORT` and never an Origin.
pub struct Client {
    stream: Option<BufReader<TcpStream>>,
    host: String,
}

impl Client {
    pub fn connect(base: &str) -> Client {
        Client {
            stream: None,
            host: base.trim_start_matches("http://").to_string(),
        }
    }

    /// POSTs JSON; returns (status, body).
    pub fn post(&mut self, path: &str, body: &Value) -> std::io::Result<(u16, Vec<u8>)> {
        let body = serde_json::to_vec(body).expect("json");
        self.send("POST", path, Some("application/json"), &body)
    }

    /// Returns (status, body); an Err is a transport error or a timeout.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let r = self.try_send(method, path, content_type, body);
        if r.is_err() {
            self.stream = None;
        }
        r
    }

    fn try_send(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        if self.stream.is_none() {
            let s = TcpStream::connect(&self.host)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TIMEOUT))?;
            s.set_write_timeout(Some(TIMEOUT))?;
            self.stream = Some(BufReader::new(s));
        }
        let stream = self.stream.as_mut().unwrap();
        let ct = content_type.map_or(String::new(), |c| format!("Content-Type: {c}\r\n"));
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{ct}Content-Length: {}\r\n\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        stream.get_mut().write_all(&req)?;
        let mut status_line = String::new();
        if stream.read_line(&mut status_line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let (mut len, mut chunked, mut close) = (0usize, false, false);
        loop {
            let mut h = String::new();
            stream.read_line(&mut h)?;
            if h == "\r\n" || h.is_empty() {
                break;
            }
            let h = h.to_ascii_lowercase();
            if let Some(v) = h.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            } else if h.starts_with("transfer-encoding:") && h.contains("chunked") {
                chunked = true;
            } else if h.starts_with("connection:") && h.contains("close") {
                close = true;
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                stream.read_line(&mut size)?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| std::io::Error::other("bad chunk size"))?;
                let mut chunk = vec![0u8; n + 2];
                stream.read_exact(&mut chunk)?;
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
            }
        } else {
            out.resize(len, 0);
            stream.read_exact(&mut out)?;
        }
        if close {
            self.stream = None;
        }
        Ok((status, out))
    }
}

/// The CPU model, as /proc/cpuinfo names it (empty where it does not).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

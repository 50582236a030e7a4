//! A real `redis-server` (the Debian package) on a free 127.0.0.1 port, for the shared-store
//! tests. Killed (and reaped) when dropped, so no test leaves a process behind.
//!
//! A missing `redis-server` is a test failure with instructions, not a skip: CI installs it
//! (`.ci/run`), and a suite that silently skips the shared store proves nothing about it.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started server may take to answer `PING`.
const START_LIMIT: Duration = Duration::from_secs(20);

/// The `redis-server` program: `$TOOLWIRE_TEST_REDIS_SERVER`, else `redis-server` on `PATH`.
pub fn redis_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TOOLWIRE_TEST_REDIS_SERVER") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("redis-server"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "redis-server is not installed, and the shared-store tests (store_redis::) need a real one. \
             Install it with `apt-get install -y redis-server` (CI's .ci/run does), or point \
             TOOLWIRE_TEST_REDIS_SERVER at the program."
        )
    })
}

/// A free 127.0.0.1 port (free when asked; nothing listens on it until something binds it).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// One command as a RESP array of bulk strings.
fn resp(args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    req
}

/// A running `redis-server`.
pub struct RedisServer {
    pub port: u16,
    /// Its working directory (RDB/AOF files when persistent).
    dir: tempfile::TempDir,
    persistent: bool,
    /// `--requirepass`, when set.
    password: Option<String>,
    /// TLS only (`--port 0 --tls-port`): the server certificate and key files.
    tls: Option<(PathBuf, PathBuf)>,
    child: Option<Child>,
}

impl RedisServer {
    /// A server keeping nothing on disk (`--save '' --appendonly no`).
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// A server with an append-only file fsynced on every write, so a restart (even after
    /// SIGKILL) keeps every acknowledged write.
    pub fn start_persistent() -> Self {
        Self::start_with(true)
    }

    fn start_with(persistent: bool) -> Self {
        Self::start_on(free_port(), persistent, None)
    }

    /// A server on `port` (e.g. one a toolwire was pointed at before Redis came up), with a
    /// password when given.
    pub fn start_on(port: u16, persistent: bool, password: Option<&str>) -> Self {
        let mut s = RedisServer {
            port,
            dir: tempfile::tempdir().unwrap(),
            persistent,
            password: password.map(str::to_owned),
            tls: None,
            child: None,
        };
        s.spawn();
        s
    }

    /// A server speaking TLS only, with this certificate and key (PEM). `rediss://` clients must
    /// trust their issuer; the helper's own [`RedisServer::command`] does not speak TLS, so it
    /// waits by connecting only.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("server.crt");
        let key = dir.path().join("server.key");
        std::fs::write(&cert, cert_pem).unwrap();
        std::fs::write(&key, key_pem).unwrap();
        let mut s = RedisServer {
            port: free_port(),
            dir,
            persistent: false,
            password: None,
            tls: Some((cert, key)),
            child: None,
        };
        s.spawn();
        s
    }

    /// `rediss://127.0.0.1:<port>`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(redis_server_bin());
        let port = self.port.to_string();
        match &self.tls {
            None => cmd.args(["--port", &port]),
            Some((cert, key)) => cmd
                .args(["--port", "0", "--tls-port", &port, "--tls-auth-clients", "no"])
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key),
        };
        cmd.args(["--bind", "127.0.0.1", "--save", ""])
            .args(["--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(self.dir.path());
        if let Some(p) = &self.password {
            cmd.args(["--requirepass", p]);
        }
        if self.persistent {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e}. The shared-store tests need a real redis-server: \
                     `apt-get install -y redis-server` (CI's .ci/run does).",
                    redis_server_bin().display()
                )
            });
        self.child = Some(child);
        let started = Instant::now();
        let up = |s: &Self| match s.tls {
            None => s.pings(),
            Some(_) => TcpStream::connect_timeout(&([127, 0, 0, 1], s.port).into(), Duration::from_millis(500)).is_ok(),
        };
        while !up(self) {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("redis-server exited at start ({status}); port {} taken?", self.port);
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "redis-server did not answer PING within {START_LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Does it answer `PING` now?
    pub fn pings(&self) -> bool {
        self.command(&["PING"]).is_some_and(|r| r.starts_with("+PONG"))
    }

    /// Sends one command (RESP array of bulk strings) and returns the raw reply, or `None` when
    /// the server cannot be reached. Small replies only (one read).
    pub fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut buf = vec![0u8; 64 * 1024];
        if let Some(p) = &self.password {
            s.write_all(resp(&["AUTH", p]).as_bytes()).ok()?;
            let n = s.read(&mut buf).ok()?;
            if !buf[..n].starts_with(b"+OK") {
                return None;
            }
        }
        s.write_all(resp(args).as_bytes()).ok()?;
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Keys matching `pattern` (`KEYS`; test data only).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let reply = self.command(&["KEYS", pattern]).unwrap_or_default();
        reply
            .split("\r\n")
            .skip(1)
            .filter(|l| !l.starts_with('$') && !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// SIGKILL, then reap: the server is gone, as after a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP / SIGCONT: a server that accepts connections but does not answer (slow).
    pub fn pause(&self, paused: bool) {
        if let Some(c) = &self.child {
            let sig = if paused { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").args([sig, &c.id().to_string()]).status();
        }
    }

    /// Starts it again on the same port and directory (keeps its data when persistent).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            // A stopped process must be continued to die promptly of SIGKILL's reaping.
            let _ = Command::new("kill").args(["-CONT", &c.id().to_string()]).status();
        }
        self.kill();
    }
}

//! The real `toolwire serve` binary on 127.0.0.1:0, for what needs a process of its own:
//! signals (SIGTERM drain, SIGHUP reload), the child subreaper, and its stderr logs.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub const TOOLWIRE: &str = env!("CARGO_BIN_EXE_toolwire");

/// The binary to run: [`TOOLWIRE`], or `TOOLWIRE_TEST_BIN` when set (a copy taken right after
/// the build, where several checkouts share one target directory and overwrite its binary).
pub fn toolwire_bin() -> String {
    std::env::var("TOOLWIRE_TEST_BIN").unwrap_or_else(|_| TOOLWIRE.to_owned())
}

/// A running server process; dropping it kills it (SIGKILL) and reaps it.
pub struct Binary {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    lines: Arc<Mutex<Vec<String>>>,
    /// A copy of the binary that the unprivileged user can run (see `start_unprivileged`).
    _copy: Option<tempfile::TempDir>,
}

impl Binary {
    /// Starts `toolwire serve --config CONFIG --tools-dir TOOLS --log-format json` and waits
    /// for its `Listening.` line.
    pub fn start(config: &Path, tools: &Path) -> Self {
        Self::start_opts(config, tools, "json", &[])
    }

    /// Like [`Binary::start`] with `--log-format FORMAT` (`json` or `pretty`; pretty without
    /// colours, `NO_COLOR=1`).
    pub fn start_format(config: &Path, tools: &Path, format: &str) -> Self {
        Self::start_opts(config, tools, format, &[])
    }

    /// Like [`Binary::start`], with extra environment variables for the server process.
    pub fn start_with_env(config: &Path, tools: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_opts(config, tools, "json", env)
    }

    /// Starts the server with a log format and extra environment variables.
    pub fn start_opts(config: &Path, tools: &Path, format: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn(Command::new(toolwire_bin()), config, tools, format, env, None)
    }

    /// Like [`Binary::start`], as an unprivileged user: when the test runs as root, the server
    /// runs as `nobody` (uid and gid 65534, no supplementary groups, hence no capabilities);
    /// otherwise as the test's own user. `config` and `tools` must be readable by that user.
    pub fn start_unprivileged(config: &Path, tools: &Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        if !nix::unistd::geteuid().is_root() {
            return Self::spawn(Command::new(toolwire_bin()), config, tools, "json", &[], None);
        }
        // The checkout may sit where `nobody` cannot reach (under /root): run a copy.
        let copy = tempfile::tempdir().unwrap();
        std::fs::set_permissions(copy.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = copy.path().join("toolwire");
        std::fs::copy(toolwire_bin(), &bin).unwrap();
        let mut cmd = Command::new(&bin);
        // std clears the supplementary groups when root sets the uid.
        cmd.uid(65534).gid(65534).current_dir("/");
        Self::spawn(cmd, config, tools, "json", &[], Some(copy))
    }

    fn spawn(
        mut cmd: Command,
        config: &Path,
        tools: &Path,
        format: &str,
        env: &[(&str, &str)],
        copy: Option<tempfile::TempDir>,
    ) -> Self {
        let mut child = cmd
            .args(["serve", "--config"])
            .arg(config)
            .arg("--tools-dir")
            .arg(tools)
            .args(["--log-format", format])
            .env("NO_COLOR", "1")
            .env("TOOLWIRE_LISTEN", "127.0.0.1:0")
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if v["message"] == "Listening." {
                    let _ = tx.send(v["addr"].as_str().unwrap_or_default().to_owned());
                } else if line.contains("Listening.")
                    && let Some(rest) = line.split("addr=").nth(1)
                {
                    let addr = rest.split_whitespace().next().unwrap_or_default().trim_matches('"');
                    let _ = tx.send(addr.to_owned());
                }
                sink.lock().unwrap_or_else(PoisonError::into_inner).push(line);
            }
        });
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(20)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "no Listening line; stderr:\n{}",
                lines.lock().unwrap_or_else(PoisonError::into_inner).join("\n")
            );
        };
        Binary {
            child,
            addr,
            lines,
            _copy: copy,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends `sig` to the server process.
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(i32::try_from(self.child.id()).unwrap()), sig).unwrap();
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every stderr line so far.
    pub fn stderr(&self) -> String {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).join("\n")
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

//! `faultproc`: a misbehaving child process for the subprocess backend's tests
//! (`tests/it/common/faultproc.rs` builds it on first use). The first argument picks the mode:
//!
//! | mode | behaviour |
//! |---|---|
//! | `sleep MS` | sleeps, prints `{"slept": MS}` |
//! | `ignore-term MS` | blocks SIGTERM (so it never arrives), then sleeps |
//! | `spawn-grandchild MS [GRANDCHILD_MS]` | starts `faultproc sleep GRANDCHILD_MS` (default MS) sharing its stdout/stderr, prints `{"parent": pid, "grandchild": pid}` as the first stderr line (and into the file named by `$FAULTPROC_PIDS`, if set), then sleeps MS |
//! | `flood BYTES [stdout\|stderr\|both]` | writes BYTES of `x` to the stream(s) (default stdout) |
//! | `exit CODE` | prints a line to stderr, exits with CODE |
//! | `signal SEGV\|ABRT\|KILL` | raises the signal |
//! | `echo` | prints `{"argv", "env", "stdin", "cwd"}` as JSON; stdin as JSON if it parses, else the raw string |
//! | `invalid-json` | prints `{not json` |
//! | `no-stdin MS` | never reads stdin, sleeps, prints `{"slept": MS}` |
//!
//! The crate forbids `unsafe`, so SIGTERM is *blocked* (a safe `sigprocmask`) rather than set to
//! `SIG_IGN`: for a single-threaded process the effect is the same, the signal stays pending.

use std::io::{Read, Write};
use std::process::{Command, ExitCode};
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, raise, sigprocmask};
use serde_json::{Value, json};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let num = |i: usize| arg(i).parse::<u64>().unwrap_or(0);
    match arg(1) {
        "sleep" => sleep_then_report(num(2)),
        "no-stdin" => sleep_then_report(num(2)),
        "ignore-term" => {
            let mut set = SigSet::empty();
            set.add(Signal::SIGTERM);
            if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None) {
                eprintln!("faultproc: cannot block SIGTERM: {e}");
                return ExitCode::from(2);
            }
            sleep_then_report(num(2))
        }
        "spawn-grandchild" => spawn_grandchild(num(2), args.get(3).map_or(num(2), |_| num(3))),
        "flood" => flood(num(2), arg(3)),
        "exit" => {
            eprintln!("faultproc: exiting with code {} as asked", arg(2));
            ExitCode::from(arg(2).parse::<u8>().unwrap_or(1))
        }
        "signal" => {
            let sig = match arg(2) {
                "SEGV" => Signal::SIGSEGV,
                "ABRT" => Signal::SIGABRT,
                _ => Signal::SIGKILL,
            };
            eprintln!("faultproc: raising SIG{}", arg(2));
            // std's stack-overflow handler catches the first SIGSEGV, resets it to the default
            // action and returns; the second one is fatal.
            let _ = raise(sig);
            let _ = raise(sig);
            ExitCode::from(3)
        }
        "echo" => echo(&args),
        // `daemon MS PIDFILE`: double-fork a grandchild that calls setsid (leaving our process
        // group and session), writes its pid to PIDFILE and sleeps MS; we exit at once.
        "daemon" => daemon(num(2), arg(3)),
        "daemon-leaf" => {
            let _ = nix::unistd::setsid();
            let _ = std::fs::write(arg(3), std::process::id().to_string());
            sleep_then_report(num(2))
        }
        "invalid-json" => {
            print!("{{not json");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("faultproc: unknown mode `{other}`");
            ExitCode::from(2)
        }
    }
}

fn sleep_then_report(ms: u64) -> ExitCode {
    std::thread::sleep(Duration::from_millis(ms));
    println!("{}", json!({ "slept": ms }));
    ExitCode::SUCCESS
}

#[allow(clippy::zombie_processes, reason = "the grandchild is meant to outlive us, unreaped")]
fn spawn_grandchild(ms: u64, grandchild_ms: u64) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_else(|_| "faultproc".into());
    let child = match Command::new(exe).args(["sleep", &grandchild_ms.to_string()]).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("faultproc: cannot spawn the grandchild: {e}");
            return ExitCode::from(2);
        }
    };
    let pids = json!({ "parent": std::process::id(), "grandchild": child.id() }).to_string();
    eprintln!("{pids}");
    if let Some(path) = std::env::var_os("FAULTPROC_PIDS") {
        let _ = std::fs::write(path, &pids);
    }
    std::thread::sleep(Duration::from_millis(ms));
    ExitCode::SUCCESS
}

#[allow(clippy::zombie_processes, reason = "the leaf is meant to escape, unreaped")]
fn daemon(ms: u64, pidfile: &str) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_else(|_| "faultproc".into());
    let spawned = Command::new(exe)
        .args(["daemon-leaf", &ms.to_string(), pidfile])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        Ok(_) => {
            // Wait until the leaf has left our group (it writes the pid file after setsid), so
            // the group kill that follows our exit cannot reach it.
            for _ in 0..200 {
                if std::fs::metadata(pidfile).is_ok_and(|m| m.len() > 0) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            println!("{}", json!({"daemonized": true}));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("faultproc: cannot spawn the daemon: {e}");
            ExitCode::from(2)
        }
    }
}

fn flood(bytes: u64, which: &str) -> ExitCode {
    let chunk = [b'x'; 64 * 1024];
    let (to_out, to_err) = match which {
        "stderr" => (false, true),
        "both" => (true, true),
        _ => (true, false),
    };
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        if (to_out && out.write_all(&chunk[..n]).is_err()) || (to_err && err.write_all(&chunk[..n]).is_err()) {
            return ExitCode::from(4);
        }
        left -= n as u64;
    }
    ExitCode::SUCCESS
}

fn echo(args: &[String]) -> ExitCode {
    let mut stdin = String::new();
    let _ = std::io::stdin().read_to_string(&mut stdin);
    let stdin = serde_json::from_str::<Value>(&stdin).unwrap_or(Value::String(stdin));
    let env: serde_json::Map<String, Value> = std::env::vars().map(|(k, v)| (k, Value::String(v))).collect();
    let cwd = std::env::current_dir()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    println!("{}", json!({ "argv": args, "env": env, "stdin": stdin, "cwd": cwd }));
    ExitCode::SUCCESS
}

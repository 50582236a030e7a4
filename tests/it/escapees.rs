//! A tool process that escapes its process group (setsid + double fork) is still cleaned up:
//! `toolwire serve` is a child subreaper, so the escapee is re-parented to it and the reaper
//! kills and reaps it. Runs the real binary so the subreaper is toolwire, not the test runner.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_toolwire");
use crate::common::faultproc::faultproc;

#[test]
fn setsid_escapee_is_killed_and_reaped_by_the_subreaper() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("daemon.pid");
    let tools = dir.path().join("tools.d");
    std::fs::create_dir(&tools).unwrap();
    std::fs::write(
        tools.join("d.json"),
        serde_json::json!({"tools": [{
            "name": "start_daemon",
            "description": "Starts a background daemon that escapes its process group; for tests.",
            "exec": {"command": [faultproc(), "daemon", "30000", pidfile.to_str().unwrap()], "output": "json"}
        }]})
        .to_string(),
    )
    .unwrap();
    let mut server = Command::new(BIN)
        .args(["serve", "--tools-dir", tools.to_str().unwrap(), "--log-format", "json"])
        .env("TOOLWIRE_LISTEN", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server_pid = server.id();
    let stderr = server.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let addr = loop {
        let line = rx.recv_timeout(Duration::from_secs(20)).expect("Listening line");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"] == "Listening." {
            break v["addr"].as_str().unwrap().to_owned();
        }
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let result: serde_json::Value = rt.block_on(async {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("http://{addr}/v1/tools/start_daemon/call"))
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(result["ok"], true, "{result}");
    let daemon: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    // It really escaped: its session is its own, not the server's or the tool's group.
    let stat = std::fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap_or_default();
    if let Some((_, rest)) = stat.rsplit_once(')') {
        let f: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(
            f.get(3).copied(),
            Some(daemon.to_string().as_str()),
            "the daemon leads its own session: {stat}"
        );
    }
    let start = Instant::now();
    while crate::common::procs::pid_alive(daemon) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the escaped daemon {daemon} is still alive"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Reaped too: not left as a zombie child of the server.
    let start = Instant::now();
    while std::path::Path::new(&format!("/proc/{daemon}")).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the escaped daemon {daemon} was not reaped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server_pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let start = Instant::now();
    while server.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
}

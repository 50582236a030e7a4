//! Finding the processes a test started and waiting until they are gone (Linux `/proc`).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::procs::{pid_alive, zombie_children_of};

/// Live processes whose argv contains `marker` as one element — the tools' programs
/// themselves: a process that is still the exec shim (`toolwire __exec-shim … -- PROGRAM
/// ARGS`, which carries the same arguments until it execs) is not counted. Otherwise a test
/// could find a pid while it is the shim and then, reading `/proc/<pid>/cmdline` again in the
/// middle of its `execve` (empty for that moment), miss it.
pub fn pids_with_arg(marker: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let mut args = c.split(|&b| b == 0);
                let has_marker = args.clone().any(|a| a == marker.as_bytes());
                has_marker && args.nth(1) != Some(b"__exec-shim".as_slice())
            })
        })
        .filter(|&pid| pid_alive(pid))
        .collect()
}

/// Polls until some process with `marker` in its argv runs; returns their pids.
pub async fn wait_for_marker(marker: &str, limit: Duration) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let pids = pids_with_arg(marker);
        if !pids.is_empty() {
            return pids;
        }
        assert!(start.elapsed() < limit, "no process with `{marker}` started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The `{"parent", "grandchild"}` pids `faultproc spawn-grandchild` wrote to `file`.
pub async fn read_pid_file(file: &Path, limit: Duration) -> Vec<u32> {
    let start = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(file)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            let pid = |k: &str| u32::try_from(v[k].as_u64().unwrap_or(0)).unwrap_or(0);
            return vec![pid("parent"), pid("grandchild")];
        }
        assert!(start.elapsed() < limit, "no pid file at {}", file.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls until none of `pids` runs and none is an unreaped child of this (the server's)
/// process; fails after `limit`.
pub async fn assert_all_gone(pids: &[u32], limit: Duration) {
    assert!(!pids.is_empty() && !pids.contains(&0), "no pids to watch: {pids:?}");
    let start = Instant::now();
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
        let zombies: Vec<u32> = zombie_children_of(std::process::id())
            .into_iter()
            .filter(|z| pids.contains(z))
            .collect();
        if alive.is_empty() && zombies.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "after {:?}: still alive {alive:?}, unreaped zombies {zombies:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A marker unique to this test run, to find its processes by argv.
pub fn unique_marker(tag: &str) -> String {
    format!(
        "tw-marker-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    )
}

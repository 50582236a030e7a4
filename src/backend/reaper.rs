//! Cleanup of tool processes that escape their process group.
//!
//! Subprocess tools run in their own process group, which is killed on timeout, cancellation
//! and exit. A descendant that calls `setsid` (or double-forks into a new group) leaves that
//! group and would survive. On Linux, `serve` makes toolwire a *child subreaper*
//! (`PR_SET_CHILD_SUBREAPER`): orphaned descendants of its children are re-parented to toolwire
//! instead of to PID 1. [`sweep`] then finds them — children of toolwire that it did not spawn
//! directly and whose environment carries [`MARKER`] (every tool process gets it, and
//! descendants inherit it) — kills them (and their own group) and reaps them.
//!
//! What is still out of reach: an escapee that also clears its environment, or one that
//! re-parents before the subreaper is set. A cgroup per call would close that gap but needs
//! privileges a sidecar usually lacks.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError, RwLock};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// Environment variable set on every tool process; its value is toolwire's pid.
pub const MARKER: &str = "TOOLWIRE_TOOL_PROCESS";

/// How often the background sweep runs.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Set once this process is a subreaper; sweeping is pointless (and skipped) otherwise.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Held (shared) from `spawn` until the child is registered, and (exclusive) by a sweep, so a
/// sweep never mistakes a just-spawned direct child for an escapee.
pub static SPAWNING: RwLock<()> = RwLock::new(());

/// Direct children spawned by the subprocess backend (tokio reaps those; the sweep skips them).
static MANAGED: LazyLock<Mutex<HashSet<i32>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Escapees already killed, to be reaped once they are zombies (a zombie's environment can no
/// longer be read).
static KILLED: LazyLock<Mutex<HashSet<i32>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// The marker's value for this process.
pub fn marker_value() -> String {
    std::process::id().to_string()
}

/// Records a direct child spawned by the subprocess backend.
pub fn manage(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        MANAGED.lock().unwrap_or_else(PoisonError::into_inner).insert(pid);
    }
}

/// Forgets a direct child once it has been reaped.
pub fn release(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        MANAGED.lock().unwrap_or_else(PoisonError::into_inner).remove(&pid);
    }
}

/// Makes this process a child subreaper and starts the periodic sweep. Returns whether the
/// subreaper could be set (Linux only).
pub fn start() -> bool {
    #[cfg(target_os = "linux")]
    let ok = match nix::sys::prctl::set_child_subreaper(true) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "Cannot become a child subreaper; escaped tool processes may survive.");
            false
        }
    };
    #[cfg(not(target_os = "linux"))]
    let ok = false;
    if ok {
        ENABLED.store(true, Ordering::SeqCst);
        tokio::spawn(async {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                let _ = tokio::task::spawn_blocking(sweep).await;
            }
        });
    }
    ok
}

/// Kills and reaps escaped tool processes re-parented to us; returns how many were killed.
pub fn sweep() -> usize {
    if !ENABLED.load(Ordering::SeqCst) {
        return 0;
    }
    let _no_spawns = SPAWNING.write().unwrap_or_else(PoisonError::into_inner);
    let me = std::process::id().to_string();
    let needle = format!("{MARKER}={me}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let managed = MANAGED.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut killed = KILLED.lock().unwrap_or_else(PoisonError::into_inner);
    let mut count = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if managed.contains(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may contain spaces and parentheses: fields start after the last ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let (Some(state), Some(ppid), Some(pgrp)) = (fields.first(), fields.get(1), fields.get(2)) else {
            continue;
        };
        if *ppid != me {
            continue;
        }
        if *state == "Z" {
            if killed.remove(&pid) {
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
            }
            continue;
        }
        let marked = std::fs::read(format!("/proc/{pid}/environ"))
            .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
            .unwrap_or(false);
        if !marked {
            continue;
        }
        tracing::warn!(pid, "Killing a tool process that escaped its process group.");
        if *pgrp == pid.to_string() {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        killed.insert(pid);
        count += 1;
    }
    // Reap what we killed, where it is already a zombie.
    killed.retain(|pid| {
        !matches!(
            waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG)),
            Ok(nix::sys::wait::WaitStatus::Signaled(..) | nix::sys::wait::WaitStatus::Exited(..)) | Err(_)
        )
    });
    count
}

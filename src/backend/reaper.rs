//! Cleanup of tool processes that outlive their call: zombies and escapees.
//!
//! Subprocess tools run in their own process group, which is killed on timeout, cancellation
//! and exit. On Linux, `serve` makes toolwire a *child subreaper* (`PR_SET_CHILD_SUBREAPER`):
//! every orphaned descendant of a tool (a background `sleep &` whose parent shell exited, or a
//! daemon that called `setsid`) is re-parented to toolwire instead of to PID 1. toolwire must
//! then reap them, or each one stays a zombie for the life of the server.
//!
//! # The rule
//! Every child of toolwire is either **managed** — a tool process spawned by the subprocess
//! backend, registered here from spawn until tokio has reaped it — or an **orphaned tool
//! descendant**. A [`Reaper::sweep`] lists toolwire's children and, for each one that is not
//! managed:
//! - a zombie is reaped (`waitpid` on *its* pid only — never `waitpid(-1)`, which could steal
//!   the exit status of a managed child from tokio);
//! - a live one that is still in the process group of a running call is left alone (the call's
//!   end kills that group, and the next sweep reaps the zombie);
//! - any other live one has escaped its call: it is SIGKILLed (with its own group, when it
//!   leads one) and reaped once it is a zombie.
//!
//! A tool process gets no marker in its environment for this: with the subreaper, "child of
//! toolwire and not managed" is exactly "orphaned tool descendant".
//!
//! # Races
//! - *Spawned but not yet registered*: the backend holds [`Reaper::spawn_guard`] (shared) from
//!   before `spawn` until the pid is registered; a sweep that finds an unmanaged child takes it
//!   exclusively before deciding, so it waits for such a spawn to register. A sweep whose
//!   children are all managed takes no lock at all, so sweeps do not hold up spawns.
//! - *Coalescing*: one background task runs every sweep, one at a time. Child exits (`SIGCHLD`),
//!   the end of a call ([`Reaper::request_sweep`]) and a periodic tick only wake it; wake-ups
//!   that arrive while a sweep runs collapse into one more sweep.
//!
//! # State
//! Everything lives in a [`Reaper`] value that `serve` creates and hands to the executor; there
//! are no process-wide statics. An executor without a reaper (library use, in-process tests,
//! `toolwire call`) registers nothing and never sweeps.
//!
//! What is still out of reach: a descendant that re-parents before the subreaper is set, or one
//! that outlives toolwire itself. A cgroup per call would close those gaps but needs privileges
//! a sidecar usually lacks.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::sync::Notify;

/// How often the background sweep runs even when nothing woke it (a missed `SIGCHLD`, or an
/// escapee that is still alive).
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The reaper of one server. See the module documentation.
#[derive(Debug)]
pub struct Reaper {
    /// toolwire's pid.
    me: i32,
    /// toolwire's own process group, which is never signalled.
    my_group: i32,
    /// Held shared from `spawn` until the child is registered, exclusively by a sweep that is
    /// about to act on an unmanaged child.
    spawning: RwLock<()>,
    /// Direct children spawned by the subprocess backend (tokio reaps those).
    managed: Mutex<HashSet<i32>>,
    /// Wakes the sweeping task; `notify_one` keeps at most one pending wake-up (coalescing).
    wake: Notify,
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Zombies reaped.
    pub reaped: usize,
    /// Escaped live processes killed.
    pub killed: usize,
}

impl Reaper {
    /// A reaper for this process that has not been started (no subreaper, no task): for tests
    /// of the sweep itself.
    pub fn new() -> Self {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        Reaper {
            me,
            my_group: nix::unistd::getpgrp().as_raw(),
            spawning: RwLock::new(()),
            managed: Mutex::new(HashSet::new()),
            wake: Notify::new(),
        }
    }

    /// Makes this process a child subreaper and starts the sweeping task on the current tokio
    /// runtime. `None` when the subreaper cannot be set (not Linux, or refused): orphans then go
    /// to PID 1, which reaps them, and there is nothing for us to sweep.
    pub fn start() -> Option<Arc<Reaper>> {
        #[cfg(target_os = "linux")]
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!(error = %e, "Cannot become a child subreaper; escaped tool processes may survive.");
            return None;
        }
        #[cfg(not(target_os = "linux"))]
        return None;
        #[cfg(target_os = "linux")]
        {
            let reaper = Arc::new(Reaper::new());
            tokio::spawn(sweep_loop(Arc::downgrade(&reaper)));
            Some(reaper)
        }
    }

    /// Hold this from before spawning a child until [`Reaper::manage`] has registered it.
    pub fn spawn_guard(&self) -> RwLockReadGuard<'_, ()> {
        self.spawning.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a direct child: the sweep leaves it (and its exit status) to tokio.
    pub fn manage(&self, pid: u32) {
        if let Ok(pid) = i32::try_from(pid) {
            self.managed.lock().unwrap_or_else(PoisonError::into_inner).insert(pid);
        }
    }

    /// Forgets a direct child once it has been reaped (or handed to tokio's orphan reaping).
    pub fn release(&self, pid: u32) {
        if let Ok(pid) = i32::try_from(pid) {
            self.managed.lock().unwrap_or_else(PoisonError::into_inner).remove(&pid);
        }
    }

    /// Asks the sweeping task for a sweep soon (coalesced with other requests).
    pub fn request_sweep(&self) {
        self.wake.notify_one();
    }

    /// Reaps zombie children and kills escapees that are not managed. Blocking (reads `/proc`);
    /// run it off the async threads.
    pub fn sweep(&self) -> Swept {
        let mut swept = Swept::default();
        let children = children_of(self.me);
        let unmanaged: Vec<i32> = {
            let managed = self.managed.lock().unwrap_or_else(PoisonError::into_inner);
            children.into_iter().filter(|p| !managed.contains(p)).collect()
        };
        if unmanaged.is_empty() {
            return swept;
        }
        // Wait for spawns in flight to register their pid, and keep new ones out while acting.
        let _no_spawns = self.spawning.write().unwrap_or_else(PoisonError::into_inner);
        let managed = self.managed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for pid in unmanaged {
            if managed.contains(&pid) {
                continue;
            }
            // Re-read under the lock: it may have been reaped, and its pid reused, since.
            let Some(stat) = read_stat(pid) else { continue };
            if stat.ppid != self.me {
                continue;
            }
            if stat.state == 'Z' {
                if reap(pid) {
                    swept.reaped += 1;
                }
                continue;
            }
            if managed.contains(&stat.pgrp) {
                // Still in the group of a running call: that call's end kills it.
                continue;
            }
            tracing::warn!(
                pid,
                "Killing a tool process that outlived its call (escaped its process group)."
            );
            if stat.pgrp == pid && stat.pgrp != self.my_group {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            swept.killed += 1;
            // Usually already a zombie; if not, its SIGCHLD wakes the next sweep.
            if reap(pid) {
                swept.reaped += 1;
            }
        }
        swept
    }
}

impl Default for Reaper {
    fn default() -> Self {
        Self::new()
    }
}

/// The sweeping task: one sweep at a time, woken by `SIGCHLD`, requests and a tick. Ends when
/// the reaper is dropped.
async fn sweep_loop(reaper: Weak<Reaper>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    loop {
        let Some(strong) = reaper.upgrade() else { return };
        let woken = async {
            match sigchld.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = strong.wake.notified() => {}
            () = woken => {}
            _ = tick.tick() => {}
        }
        let sweeper = Arc::clone(&strong);
        drop(strong);
        let swept = tokio::task::spawn_blocking(move || sweeper.sweep()).await;
        if let Ok(swept) = swept
            && swept != Swept::default()
        {
            tracing::debug!(reaped = swept.reaped, killed = swept.killed, "Reaper sweep.");
        }
    }
}

/// `waitpid(pid, WNOHANG)`; true when it collected an exit status.
fn reap(pid: i32) -> bool {
    matches!(
        waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)),
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
    )
}

/// The fields of `/proc/<pid>/stat` the sweep needs.
struct Stat {
    state: char,
    ppid: i32,
    pgrp: i32,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat { state, ppid, pgrp })
}

/// The pids whose parent is `me`: from `/proc/self/task/*/children` (cheap: our children only;
/// an orphan is re-parented to any of our threads, so every thread's list is read), or, where
/// the kernel lacks that file, from a scan of `/proc`.
fn children_of(me: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut have_lists = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                have_lists = true;
                out.extend(list.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    if !have_lists && let Ok(entries) = std::fs::read_dir("/proc") {
        out.extend(
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&pid| read_stat(pid).is_some_and(|s| s.ppid == me)),
        );
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_of_self_names_our_parent_and_group() {
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let stat = read_stat(me).unwrap_or(Stat {
            state: '?',
            ppid: -1,
            pgrp: -1,
        });
        assert_eq!(stat.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(stat.pgrp, nix::unistd::getpgrp().as_raw());
    }
}

//! Process accounting from `/proc` (Linux): is a pid still running, which zombies are ours.

use std::fs;

/// The state letter (`R`, `S`, `Z`, …) and the parent pid of `pid`, if it exists.
fn state_and_ppid(pid: u32) -> Option<(char, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may contain spaces and parentheses, so split at the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// True while `pid` exists and is not a zombie (a zombie has stopped running; whether it was
/// reaped is [`zombie_children_of`]'s question).
pub fn pid_alive(pid: u32) -> bool {
    matches!(state_and_ppid(pid), Some((state, _)) if state != 'Z')
}

/// Zombies (state `Z`) whose parent is `parent`.
pub fn zombie_children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| matches!(state_and_ppid(pid), Some(('Z', ppid)) if ppid == parent))
        .collect()
}

//! The exec shim: a tiny re-exec step between toolwire and a tool's program.
//!
//! The crate forbids `unsafe`, so nothing can run in the child between `fork` and `exec`
//! (`pre_exec` is unsafe). Whatever must be set up *inside* the child therefore runs in a
//! program of its own: the toolwire binary itself, started as `toolwire __exec-shim [limits] --
//! PROGRAM ARGS…`. The shim
//! 1. applies the tool's resource limits (`setrlimit`, soft = hard, so the program cannot raise
//!    them again; for CPU time the hard limit is one second above, so SIGXCPU comes first);
//! 2. drops every capability when it has any (a server running as root, or with file or
//!    ambient capabilities): the bounding set (when it holds `CAP_SETPCAP`), then the ambient,
//!    inheritable, effective and permitted sets, and sets `no_new_privs`, so the program starts
//!    with none — a root tool cannot use `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` or `CAP_PERFMON` to
//!    read the (non-dumpable) server's memory or `/proc/<pid>/environ`;
//! 3. `execvp`s the program, looked up in the tool's `PATH` — the pid, process group, pipes,
//!    working directory and (cleared) environment set up by toolwire stay as they are.
//!
//! If any step fails, the shim prints one line starting with [`FAILURE_PREFIX`] on stderr and
//! exits with [`FAILURE_CODE`]; the subprocess backend turns that into a spawn failure.
//!
//! `serve`, `call` and `execute` configure the shim ([`ExecShim::this_binary`]). An executor
//! built in-process by a library user or a test has no shim unless it is given one: its tools
//! run directly, with the server's capabilities, and a tool with `exec.limits` fails to start.

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::path::PathBuf;

use crate::tool::ResourceLimits;

/// The hidden subcommand that runs the shim.
pub const SUBCOMMAND: &str = "__exec-shim";

/// Exit code of a shim that could not start the program (like a shell's "command not found").
pub const FAILURE_CODE: i32 = 127;

/// First words of the shim's error line on stderr.
pub const FAILURE_PREFIX: &str = "toolwire exec shim:";

/// Where the shim binary is, and whether this server has privileges for it to drop. Cheap to
/// clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecShim {
    program: PathBuf,
    /// The server is root or holds capabilities: every program goes through the shim.
    privileged: bool,
}

impl ExecShim {
    /// A shim at `program` (a toolwire binary) that every program goes through.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        ExecShim {
            program: program.into(),
            privileged: true,
        }
    }

    /// The running toolwire binary. On Linux this is `/proc/self/exe`, which still names the
    /// right file after the binary on disk was replaced or deleted (an upgrade of a running
    /// server); elsewhere `std::env::current_exe()`. Whether this process has privileges is
    /// read once here: a server's user and capabilities do not change while it runs.
    pub fn this_binary() -> std::io::Result<Self> {
        let proc_exe = std::path::Path::new("/proc/self/exe");
        let program = if cfg!(target_os = "linux") && proc_exe.exists() {
            proc_exe.to_path_buf()
        } else {
            std::env::current_exe()?
        };
        Ok(ExecShim {
            program,
            // Unreadable capabilities count as privileges: the shim then runs and decides.
            privileged: has_privileges().unwrap_or(true),
        })
    }

    /// Whether a program with `limits` must start through the shim. It has work only when
    /// there are limits to set or privileges to drop; otherwise it would change nothing before
    /// `exec`, and the program is spawned directly, saving the start of a large binary per call
    /// (~2.8 ms of CPU on the benchmark machine; docs/bench.md#exec-tools). A server that is
    /// not root and has no capabilities (the container image runs as uid 10001) takes this
    /// path for tools without `exec.limits`.
    pub fn needed(&self, limits: &ResourceLimits) -> bool {
        self.privileged || !limits.is_empty()
    }

    /// The program to spawn.
    pub fn program(&self) -> &std::path::Path {
        &self.program
    }

    /// The shim's arguments that run `program` with `args` under `limits`.
    pub fn args(&self, limits: &ResourceLimits, program: &str, args: &[String]) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![SUBCOMMAND.into()];
        for (flag, value) in [
            ("--address-space", limits.address_space),
            ("--cpu", limits.cpu_seconds),
            ("--open-files", limits.open_files),
            ("--processes", limits.processes),
        ] {
            if let Some(v) = value {
                out.push(flag.into());
                out.push(v.to_string().into());
            }
        }
        out.push("--".into());
        out.push(program.into());
        out.extend(args.iter().map(OsString::from));
        out
    }
}

/// Reads the shim's command line as [`ExecShim::args`] writes it — `__exec-shim`, then
/// `--flag value` pairs of the four limits, `--`, the program and its arguments — without the
/// full command-line parser: the shim runs once per subprocess call, and building `toolwire`'s
/// whole command tree would cost more than everything else it does. `None` for anything else
/// (the caller then parses with the full parser, which also explains mistakes).
pub fn parse_args(mut args: impl Iterator<Item = OsString>) -> Option<(ResourceLimits, Vec<OsString>)> {
    if args.next()? != SUBCOMMAND {
        return None;
    }
    let mut limits = ResourceLimits::default();
    loop {
        let flag = args.next()?;
        if flag == "--" {
            break;
        }
        let value: u64 = args.next()?.to_str()?.parse().ok()?;
        let slot = match flag.to_str()? {
            "--address-space" => &mut limits.address_space,
            "--cpu" => &mut limits.cpu_seconds,
            "--open-files" => &mut limits.open_files,
            "--processes" => &mut limits.processes,
            _ => return None,
        };
        if slot.replace(value).is_some() {
            return None;
        }
    }
    let command: Vec<OsString> = args.collect();
    (!command.is_empty()).then_some((limits, command))
}

/// Why the shim could not start the program.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("no program to run")]
    NoProgram,
    #[error("an argument contains a NUL byte")]
    Nul,
    #[error("cannot set the {limit} limit: {errno}")]
    Limit {
        limit: &'static str,
        errno: nix::errno::Errno,
    },
    #[error("cannot drop capabilities: {0}")]
    Capabilities(String),
    #[error("{program}: {errno}")]
    Exec { program: String, errno: nix::errno::Errno },
}

/// Applies `limits`, drops capabilities and execs `command` (program first). Returns only on
/// failure.
pub fn exec(limits: &ResourceLimits, command: &[OsString]) -> Result<Infallible, ShimError> {
    let program = command.first().ok_or(ShimError::NoProgram)?;
    let argv: Vec<CString> = command
        .iter()
        .map(|a| CString::new(a.as_encoded_bytes().to_vec()).map_err(|_| ShimError::Nul))
        .collect::<Result<_, _>>()?;
    let Some(file) = argv.first() else {
        return Err(ShimError::NoProgram);
    };
    apply_limits(limits)?;
    drop_capabilities()?;
    nix::unistd::execvp(file, &argv).map_err(|errno| ShimError::Exec {
        program: program.to_string_lossy().into_owned(),
        errno,
    })
}

/// Sets each limit as soft = hard = min(value, current hard limit), so it works unprivileged
/// and cannot be raised by the program (CPU time: hard = soft + 1 s, see below).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn apply_limits(limits: &ResourceLimits) -> Result<(), ShimError> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    for (resource, limit, value) in [
        (Resource::RLIMIT_AS, "address space", limits.address_space),
        (Resource::RLIMIT_CPU, "CPU time", limits.cpu_seconds),
        (Resource::RLIMIT_NOFILE, "open files", limits.open_files),
        (Resource::RLIMIT_NPROC, "processes", limits.processes),
    ] {
        let Some(value) = value else { continue };
        let (_, hard) = getrlimit(resource).map_err(|errno| ShimError::Limit { limit, errno })?;
        let soft = value.min(hard);
        // CPU: the kernel sends SIGXCPU at the soft limit but SIGKILL at the hard one; one more
        // second of hard limit lets the program end by the telling SIGXCPU (or clean up).
        let hard = if resource == Resource::RLIMIT_CPU {
            soft.saturating_add(1).min(hard)
        } else {
            soft
        };
        setrlimit(resource, soft, hard).map_err(|errno| ShimError::Limit { limit, errno })?;
    }
    Ok(())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn apply_limits(limits: &ResourceLimits) -> Result<(), ShimError> {
    if limits.is_empty() {
        Ok(())
    } else {
        Err(ShimError::Limit {
            limit: "resource",
            errno: nix::errno::Errno::ENOSYS,
        })
    }
}

/// Leaves the process without any capability, for itself and for what it execs. A process
/// with no capability and not root has nothing to drop, and nothing is changed (a setuid
/// program it runs still works).
#[cfg(target_os = "linux")]
fn drop_capabilities() -> Result<(), ShimError> {
    use caps::{CapSet, Capability};
    let err = |e: caps::errors::CapsError| ShimError::Capabilities(e.to_string());
    if !has_privileges()? {
        return Ok(());
    }
    let permitted = caps::read(None, CapSet::Permitted).map_err(err)?;
    // Root regains its bounding set on exec; empty it when we may (CAP_SETPCAP).
    if permitted.contains(&Capability::CAP_SETPCAP) {
        caps::raise(None, CapSet::Effective, Capability::CAP_SETPCAP).map_err(err)?;
        caps::clear(None, CapSet::Bounding).map_err(err)?;
    }
    caps::clear(None, CapSet::Ambient).map_err(err)?;
    caps::clear(None, CapSet::Inheritable).map_err(err)?;
    caps::clear(None, CapSet::Effective).map_err(err)?;
    caps::clear(None, CapSet::Permitted).map_err(err)?;
    // With no_new_privs, exec never grants more than the (now empty) permitted set: this holds
    // even where the bounding set could not be emptied (root without CAP_SETPCAP), and keeps
    // setuid and file-capability programs from bringing privileges back.
    nix::sys::prctl::set_no_new_privs().map_err(|e| ShimError::Capabilities(e.to_string()))?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn drop_capabilities() -> Result<(), ShimError> {
    Ok(())
}

/// Whether this process has anything [`drop_capabilities`] would drop: it is root, or it holds
/// permitted or ambient capabilities.
#[cfg(target_os = "linux")]
fn has_privileges() -> Result<bool, ShimError> {
    use caps::CapSet;
    let err = |e: caps::errors::CapsError| ShimError::Capabilities(e.to_string());
    let permitted = caps::read(None, CapSet::Permitted).map_err(err)?;
    let ambient = caps::read(None, CapSet::Ambient).map_err(err)?;
    Ok(!permitted.is_empty() || !ambient.is_empty() || nix::unistd::geteuid().is_root())
}

#[cfg(not(target_os = "linux"))]
fn has_privileges() -> Result<bool, ShimError> {
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_carry_the_limits_then_the_command() {
        let shim = ExecShim::new("/bin/toolwire");
        let limits = ResourceLimits {
            open_files: Some(64),
            cpu_seconds: Some(2),
            ..ResourceLimits::default()
        };
        let args = shim.args(&limits, "grep", &["-n".into(), "x".into()]);
        let args: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
        assert_eq!(
            args,
            [SUBCOMMAND, "--cpu", "2", "--open-files", "64", "--", "grep", "-n", "x"]
        );
    }

    #[test]
    fn the_shim_is_skipped_only_when_it_would_change_nothing() {
        let limits = ResourceLimits {
            open_files: Some(64),
            ..ResourceLimits::default()
        };
        let none = ResourceLimits::default();
        let plain = ExecShim {
            program: "/bin/toolwire".into(),
            privileged: false,
        };
        assert!(!plain.needed(&none), "nothing to set, nothing to drop");
        assert!(plain.needed(&limits), "limits are set in the shim");
        let root = ExecShim::new("/bin/toolwire");
        assert!(
            root.needed(&none) && root.needed(&limits),
            "privileges are dropped in the shim"
        );
        // This process: the shim is needed exactly when it has privileges to drop.
        let this = ExecShim::this_binary().unwrap();
        let privileged = has_privileges().unwrap();
        assert_eq!(this.needed(&none), privileged);
        assert!(this.needed(&limits));
    }

    #[test]
    fn parse_args_reads_what_args_writes() {
        let shim = ExecShim::new("/bin/toolwire");
        let limits = ResourceLimits {
            address_space: Some(1 << 30),
            cpu_seconds: Some(2),
            open_files: Some(64),
            processes: Some(10),
        };
        let argv = shim.args(&limits, "grep", &["--".into(), "-n".into()]);
        let (read, command) = parse_args(argv.into_iter()).unwrap();
        assert_eq!(read, limits);
        assert_eq!(command, ["grep", "--", "-n"]);
        let none = shim.args(&ResourceLimits::default(), "true", &[]);
        let (read, command) = parse_args(none.into_iter()).unwrap();
        assert_eq!(
            (read, command),
            (ResourceLimits::default(), vec![OsString::from("true")])
        );
    }

    #[test]
    fn parse_args_leaves_anything_else_to_the_full_parser() {
        let parse = |argv: &[&str]| parse_args(argv.iter().map(OsString::from));
        assert!(parse(&["serve"]).is_none());
        assert!(parse(&[SUBCOMMAND, "--",]).is_none(), "no program");
        assert!(parse(&[SUBCOMMAND, "true"]).is_none(), "no `--`");
        assert!(parse(&[SUBCOMMAND, "--cpu=2", "--", "true"]).is_none());
        assert!(parse(&[SUBCOMMAND, "--cpu", "x", "--", "true"]).is_none());
        assert!(parse(&[SUBCOMMAND, "--cpu", "1", "--cpu", "2", "--", "true"]).is_none());
        assert!(parse(&[SUBCOMMAND, "--nice", "1", "--", "true"]).is_none());
    }
}

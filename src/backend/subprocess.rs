//! The subprocess backend: runs one attempt of an `exec` tool as a child process.
//!
//! # What the child gets
//! - **argv, never a shell.** The program is `spec.program`; every `spec.args` template renders
//!   to exactly one argv element, so `$(id)`, `; rm -rf /` or `a b` arrive as one literal
//!   argument each. A NUL byte in a rendered argument is rejected before spawning
//!   ([`BackendError::InvalidArgument`]); every other spawn failure (missing program, not
//!   executable, `E2BIG` for an oversized argv) is [`BackendError::Spawn`].
//! - **No option injection.** The program still parses its argv: an element that *starts* with a
//!   placeholder and renders to something starting with `-` would be an option (`grep {pattern}
//!   file` with `-r`). It is refused ([`BackendError::InvalidArgument`], which the model can
//!   repair) unless a literal `--` element comes before it or the tool sets
//!   `allow_option_values`.
//! - **Exactly the configured environment.** Only `spec.env` plus `PATH` = [`DEFAULT_PATH`]
//!   (unless `spec.env` sets `PATH`). Nothing of the server's own environment (tokens, secrets)
//!   reaches the child. A relative `program` is looked up in that `PATH`, not the server's.
//! - **The exec shim**, when the executor has one ([`ExecContext::shim`]) and it has work
//!   ([`ExecShim::needed`]: limits to set or privileges to drop): the child is
//!   `toolwire __exec-shim`, which sets `spec.limits`, drops every capability and execs the
//!   program (see [`super::shim`]). Its own failure line becomes [`BackendError::Spawn`].
//!   Without a shim the program is spawned directly and a tool with limits fails to start.
//! - **stdin**: `/dev/null`, or with `stdin = "json"` the envelope
//!   `{"arguments", "state", "call": {"id", "attempt"}}` — `state` holding only the paths the
//!   tool references (`spec.state_paths`) — written by its own task so a child that never reads
//!   stdin cannot block us (a broken pipe is ignored).
//! - Its own **process group** (`process_group(0)`), so the whole group can be signalled.
//!
//! # What we read
//! stdout and stderr are read by two tasks started right after spawn. stdout keeps the first
//! `policy.max_read_bytes`; stderr keeps only its last [`STDERR_KEEP`] bytes (it is used for the
//! error tail only). Both keep *reading and discarding* past their cap, so a child never blocks
//! on a full 64 KiB pipe.
//!
//! # How it ends
//! - On timeout: SIGTERM to the whole group, wait `policy.kill_grace`, then SIGKILL to the group;
//!   the result is [`BackendError::Timeout`] naming the signal that ended the child.
//! - After the child exits (or is killed) the rest of its group is SIGKILLed too: a grandchild
//!   that still holds stdout/stderr would otherwise keep the pipes open. Waiting for EOF on the
//!   pipes is then bounded by [`PIPE_DRAIN_TIMEOUT`]; whatever was read by then is used.
//! - The child is always reaped (`wait`), so no zombies are left.
//! - **Cancellation** (the future is dropped: client disconnect, request deadline, shutdown): a
//!   guard's `Drop` spawns a cleanup task on the current tokio runtime that TERMs the group, waits
//!   the grace, KILLs the group and reaps the child. Without a runtime (or when that task is itself
//!   dropped, e.g. at runtime shutdown) it SIGKILLs the group at once; the child's
//!   `kill_on_drop(true)` is the last resort.
//!
//! # What the cleanup reaches, and what it does not
//! Signals go to the **process group** only. A descendant that calls `setsid`/`setpgid` or
//! double-forks into another group escapes it and survives the call (and may keep our pipes
//! open: the drain bound above still ends the call). Under `serve`, such escapees and the
//! zombies of killed group members are re-parented to toolwire (a subreaper) and handled by
//! [`super::reaper`]: the child is registered there ([`ExecContext::reaper`]) from spawn until
//! it is reaped, so the reaper never takes its exit status.
//! The group is signalled once more after the child has been reaped; if by then the group is
//! empty, its id could in theory have been reused by an unrelated new group in that
//! microsecond window — the same trade-off other tool runners (codex, pants) make.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};

use super::reaper::Reaper;
use super::shim::{self, ExecShim};
use super::{Attempt, BackendError, Output};
use crate::template::{Segment, Template};
use crate::tool::{ExecSpec, OutputMode, StdinMode};

/// The `PATH` a child gets unless the tool sets its own: the standard system directories only,
/// never the server's `PATH`.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How long we wait for EOF on stdout/stderr once the child has exited and its group has been
/// killed. Only a descendant that left the group can still hold the pipes then; we stop waiting
/// for it (codex uses the same 2 s bound).
pub const PIPE_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How much of the end of stderr goes into the error the model sees (cut by
/// [`BackendError::to_tool_error`], after secrets are masked in the whole kept part).
pub const STDERR_TAIL_BYTES: usize = super::STDERR_TAIL_BYTES;

/// How much of the end of stderr is kept while reading: more than the tail, so secrets are
/// masked before the cut and the tail can start on a character boundary.
pub const STDERR_KEEP: usize = 4 * 1024;

/// Bound on reaping after SIGKILL. SIGKILL cannot be caught, so this only matters for a process
/// stuck in uninterruptible sleep; `kill_on_drop` and tokio's orphan reaping take over then.
const REAP_TIMEOUT: Duration = Duration::from_secs(2);

/// Size of one read from a pipe (the Linux pipe capacity).
const READ_CHUNK: usize = 64 * 1024;

/// What the server sets up for every subprocess call: the exec shim and the reaper. The
/// default (no shim, no reaper) is what an executor built in-process gets.
#[derive(Debug, Clone, Default)]
pub struct ExecContext {
    /// Runs the program through `toolwire __exec-shim` (resource limits, no capabilities).
    pub shim: Option<ExecShim>,
    /// Registers each child so the subreaper's sweep leaves it to tokio.
    pub reaper: Option<Arc<Reaper>>,
}

/// Runs one attempt of `spec` without shim or reaper. See the module documentation.
pub async fn call(spec: &ExecSpec, attempt: &Attempt<'_>) -> Result<Output, BackendError> {
    call_in(&ExecContext::default(), spec, attempt).await
}

/// Runs one attempt of `spec` in `ctx`. See the module documentation for the guarantees.
pub async fn call_in(ctx: &ExecContext, spec: &ExecSpec, attempt: &Attempt<'_>) -> Result<Output, BackendError> {
    let deadline = Instant::now() + attempt.timeout;
    let args = render_args(spec, attempt)?;
    let envelope = match spec.stdin {
        StdinMode::Json => Some(stdin_envelope(spec, attempt)?),
        StdinMode::None => None,
    };

    let (mut cmd, shimmed) = base_command(ctx, &spec.program, &args, &spec.limits, spec.cwd.as_deref())?;
    // Then the call's trace context when traces are on (`docs/tracing.md`), then the tool's `env`.
    cmd.envs(crate::telemetry::traces::context_env())
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if envelope.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut group = spawn_group(ctx, &mut cmd, &spec.program, attempt.policy.kill_grace)?;
    let (stdin, stdout, stderr) = group.take_pipes();

    // Readers and writer start before we wait for anything, so no pipe can fill up.
    let cap = attempt.policy.max_read_bytes;
    let (stop_out, out_reader) = spawn_reader(stdout, Keep::Head(cap));
    let (stop_err, err_reader) = spawn_reader(stderr, Keep::Tail(cap.min(STDERR_KEEP)));
    let _writer = match (stdin, envelope) {
        (Some(stdin), Some(bytes)) => Some(AbortOnDrop(tokio::spawn(write_stdin(stdin, bytes)))),
        _ => None,
    };

    let ended = group.wait_until(deadline).await;
    // Whatever ended the child, nothing else of its group may outlive the call.
    group.kill_rest();

    let drain_deadline = Instant::now() + PIPE_DRAIN_TIMEOUT;
    let stdout = finish_reader(out_reader, stop_out, drain_deadline).await;
    let stderr = finish_reader(err_reader, stop_err, drain_deadline).await;

    let status = match ended {
        Ended::Exited(status) => status,
        Ended::TimedOut(signal) => {
            return Err(BackendError::Timeout {
                timeout: attempt.timeout,
                sent: true,
                signal: Some(signal.to_owned()),
            });
        }
        Ended::WaitFailed(e) => return Err(BackendError::Io(format!("waiting for the program failed: {e}"))),
    };

    if let Some(code) = status.code() {
        if code == shim::FAILURE_CODE
            && shimmed
            && let Some(reason) = shim_failure(&stderr.kept)
        {
            return Err(BackendError::Spawn(reason));
        }
        if code != 0 {
            return Err(BackendError::NonzeroExit {
                code,
                stderr_tail: stderr_tail(&stderr.kept),
            });
        }
    } else {
        return Err(BackendError::Signaled {
            signal: signal_name(status.signal().unwrap_or(0)),
            stderr_tail: stderr_tail(&stderr.kept),
        });
    }

    let truncated = stdout.total > stdout.kept.len();
    match spec.output {
        OutputMode::Json if truncated => Err(BackendError::OutputTooLarge { limit: cap }),
        OutputMode::Json => {
            let value = serde_json::from_slice(&stdout.kept).map_err(|e| {
                BackendError::InvalidOutput(format!(
                    "the tool printed invalid JSON on stdout ({e}); its output setting is \"json\""
                ))
            })?;
            super::files::with_json_files(Output::new(value, false), cap)
        }
        OutputMode::Text => Ok(Output::new(
            Value::String(utf8_prefix_lossy(&stdout.kept, truncated)),
            truncated,
        )),
    }
}

/// The command that starts `program` with `args`, as every child of this module starts:
/// through the exec shim when it has work ([`ExecShim::needed`]: limits to set, privileges to
/// drop), directly otherwise; with a cleared environment holding only `PATH` = [`DEFAULT_PATH`]
/// (the caller adds its own variables after it, so theirs win); in its own process group; killed
/// on drop. Also says whether the shim is in between (only then is a shim failure line its own).
fn base_command(
    ctx: &ExecContext,
    program: &str,
    args: &[String],
    limits: &crate::tool::ResourceLimits,
    cwd: Option<&std::path::Path>,
) -> Result<(Command, bool), BackendError> {
    let shim = ctx.shim.as_ref().filter(|shim| shim.needed(limits));
    let mut cmd = match shim {
        Some(shim) => {
            let mut cmd = Command::new(shim.program());
            cmd.args(shim.args(limits, program, args));
            cmd
        }
        None if !limits.is_empty() => {
            return Err(BackendError::Spawn(format!(
                "{program}: resource limits (`exec.limits`) need the exec shim, which this executor was built without"
            )));
        }
        None => {
            let mut cmd = Command::new(program);
            cmd.args(args);
            cmd
        }
    };
    cmd.env_clear()
        .env("PATH", DEFAULT_PATH)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    Ok((cmd, shim.is_some()))
}

/// Spawns `cmd` (from [`base_command`]) as a [`Group`], registered with the reaper while it starts
/// so the subreaper's sweep leaves it to tokio.
fn spawn_group(ctx: &ExecContext, cmd: &mut Command, program: &str, grace: Duration) -> Result<Group, BackendError> {
    let spawning = ctx.reaper.as_deref().map(Reaper::spawn_guard);
    let child = cmd
        .spawn()
        .map_err(|e| BackendError::Spawn(format!("{program}: {e}")))?;
    // The group id is the child's pid (`process_group(0)`); `id()` is `Some` until it is reaped.
    let pid = child.id();
    let managed = match (&ctx.reaper, pid) {
        (Some(reaper), Some(pid)) => Some(Managed::new(Arc::clone(reaper), pid)),
        _ => None,
    };
    drop(spawning);
    Ok(Group {
        child: Some(child),
        pgid: pid.and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw),
        grace,
        done: false,
        cleaning_up: false,
        managed,
    })
}

/// A long-lived child (an MCP stdio server): spawned like a tool's program (its own process
/// group, exactly the configured environment, the exec shim without limits, registered with the
/// reaper), with stdin and stdout handed to the caller and stderr drained into a bounded tail.
/// Dropping it (or [`ServerChild::shut_down`]) TERMs the group, waits the grace, KILLs the
/// group and reaps the child.
pub struct ServerChild {
    group: Group,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<tokio::process::ChildStdout>,
    stderr: Arc<std::sync::Mutex<std::collections::VecDeque<u8>>>,
    _stderr_reader: AbortOnDrop<()>,
}

impl std::fmt::Debug for ServerChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerChild").field("pgid", &self.group.pgid).finish()
    }
}

/// The spawn settings of a [`ServerChild`].
pub struct ServerCommand<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: Option<&'a std::path::Path>,
    pub kill_grace: Duration,
}

/// Starts a long-lived child (see [`ServerChild`]).
pub fn spawn_server(ctx: &ExecContext, command: &ServerCommand<'_>) -> Result<ServerChild, BackendError> {
    let no_limits = crate::tool::ResourceLimits::default();
    let (mut cmd, _) = base_command(ctx, command.program, command.args, &no_limits, command.cwd)?;
    cmd.envs(command.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut group = spawn_group(ctx, &mut cmd, command.program, command.kill_grace)?;
    let (stdin, stdout, stderr_pipe) = group.take_pipes();
    let stderr: Arc<std::sync::Mutex<std::collections::VecDeque<u8>>> = Arc::default();
    let tail = Arc::clone(&stderr);
    // Drains stderr for the child's whole life (a full pipe would stall it), keeping the end.
    let reader = tokio::spawn(async move {
        let Some(mut pipe) = stderr_pipe else { return };
        let mut chunk = vec![0u8; 8 * 1024];
        while let Ok(n) = pipe.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let mut kept = tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            kept.extend(&chunk[..n]);
            let excess = kept.len().saturating_sub(STDERR_KEEP);
            kept.drain(..excess);
        }
    });
    Ok(ServerChild {
        group,
        stdin,
        stdout,
        stderr,
        _stderr_reader: AbortOnDrop(reader),
    })
}

impl ServerChild {
    /// The end of what the child wrote to stderr so far (lossy, trimmed).
    pub fn stderr_tail(&self) -> String {
        let kept = self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (a, b) = kept.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        stderr_tail(&bytes)
    }

    /// Waits until the child exits; `None` when it cannot be waited for. Its group is killed
    /// after (descendants must not outlive it).
    pub async fn wait(&mut self) -> Option<String> {
        let child = self.group.child.as_mut()?;
        let status = child.wait().await.ok()?;
        self.group.kill_rest();
        Some(match status.code() {
            Some(code) => format!("exited with code {code}"),
            None => format!("was killed by {}", signal_name(status.signal().unwrap_or(0))),
        })
    }

    /// TERM, grace, KILL, reap (bounded).
    pub async fn shut_down(mut self) {
        let group = Group {
            child: self.group.child.take(),
            pgid: self.group.pgid,
            grace: self.group.grace,
            done: false,
            cleaning_up: true,
            managed: self.group.managed.take(),
        };
        self.group.done = true;
        group.shut_down().await;
    }
}

/// The reason in a shim's failure line ([`shim::FAILURE_PREFIX`]), if stderr is one.
fn shim_failure(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let reason = text.trim().strip_prefix(shim::FAILURE_PREFIX)?;
    Some(reason.trim().to_owned())
}

/// Registers a direct child with the reaper for as long as it lives, so the sweep leaves it to
/// tokio; on drop (after the child was reaped) it is released and a sweep is requested for the
/// descendants it left behind.
struct Managed {
    reaper: Arc<Reaper>,
    pid: u32,
}

impl Managed {
    fn new(reaper: Arc<Reaper>, pid: u32) -> Self {
        reaper.manage(pid);
        Managed { reaper, pid }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        self.reaper.release(self.pid);
        self.reaper.request_sweep();
    }
}

/// Renders each argument template to exactly one argv element (no encoding, no splitting).
///
/// An element that starts with a placeholder and renders to something starting with `-` is
/// refused unless the tool allows option values or a literal `--` comes before it: the program
/// would read the value as an option (`grep {pattern} file` with `-r` searches everything).
fn render_args(spec: &ExecSpec, attempt: &Attempt<'_>) -> Result<Vec<String>, BackendError> {
    let mut after_double_dash = false;
    let mut out = Vec::with_capacity(spec.args.len());
    for (i, t) in spec.args.iter().enumerate() {
        let arg = t.render(attempt.arguments, attempt.state, str::to_owned);
        if arg.contains('\0') {
            return Err(BackendError::InvalidArgument(format!(
                "argument {} of the command contains a NUL byte, which cannot be passed to a program",
                i + 1
            )));
        }
        if let Some(name) = leading_placeholder(t, attempt)
            && arg.starts_with('-')
            && !after_double_dash
            && !spec.allow_option_values
        {
            return Err(BackendError::InvalidArgument(format!(
                "the value of `{name}` starts with `-`, which the program would read as an option, not as a value; \
                 pass a value that does not start with `-` (e.g. drop the leading dashes, or rephrase a search \
                 pattern so it starts with another character)"
            )));
        }
        if t.segments == [Segment::Literal("--".to_owned())] {
            after_double_dash = true;
        }
        out.push(arg);
    }
    Ok(out)
}

/// When `t` starts with a placeholder: the name of the placeholder that supplies the first
/// character of the rendered element (the first one with a non-empty value), for the error.
fn leading_placeholder(t: &Template, attempt: &Attempt<'_>) -> Option<String> {
    let name = |seg: &Segment| match seg {
        Segment::Arg(name) => Some(name.clone()),
        Segment::State(path) => Some(format!("state.{}", path.join("."))),
        Segment::Literal(_) => None,
    };
    let first = name(t.segments.first()?)?;
    let supplying = t
        .segments
        .iter()
        .map_while(|seg| name(seg).map(|n| (seg, n)))
        .find(|(seg, _)| {
            crate::template::lookup(seg, attempt.arguments, attempt.state)
                .is_some_and(|v| !crate::template::scalar_text(v).is_empty())
        })
        .map(|(_, n)| n);
    Some(supplying.unwrap_or(first))
}

/// The `state` of the stdin envelope: only the paths the tool references (`inject` sources,
/// `{state.…}` placeholders), each at its own place; a path missing from the request state is
/// left out. Always an object.
fn requested_state(spec: &ExecSpec, state: &Value) -> Value {
    crate::tool::project_state(&spec.state_paths, state)
}

/// The JSON written to stdin with `stdin = "json"`.
fn stdin_envelope(spec: &ExecSpec, attempt: &Attempt<'_>) -> Result<Vec<u8>, BackendError> {
    let envelope = json!({
        "arguments": attempt.arguments,
        "state": requested_state(spec, attempt.state),
        "call": {"id": attempt.call_id, "attempt": attempt.attempt},
    });
    serde_json::to_vec(&envelope)
        .map_err(|e| BackendError::InvalidArgument(format!("the stdin envelope cannot be encoded: {e}")))
}

/// Writes `bytes` and closes stdin. Errors are ignored: a child that exits without reading gives
/// EPIPE, which is its business, not a failure of the call.
async fn write_stdin(mut stdin: ChildStdin, bytes: Vec<u8>) {
    let _ = stdin.write_all(&bytes).await;
    let _ = stdin.shutdown().await;
}

/// How the child ended, as seen by [`Group::wait_until`].
enum Ended {
    Exited(ExitStatus),
    /// The deadline passed; the named signal ended the child.
    TimedOut(&'static str),
    WaitFailed(std::io::Error),
}

/// The child and its process group. Dropping it before [`Group::kill_rest`] (cancellation)
/// ends the whole group; see the module documentation.
struct Group {
    child: Option<Child>,
    pgid: Option<Pid>,
    grace: Duration,
    /// The child was reaped and the group killed; nothing left to do on drop.
    done: bool,
    /// This value lives in the cleanup task; if that is dropped too, SIGKILL at once.
    cleaning_up: bool,
    /// The child's registration with the reaper; it lives exactly as long as the child is ours
    /// to reap, so it moves into the cleanup task with the child.
    managed: Option<Managed>,
}

impl Group {
    /// The child's stdin, stdout and stderr pipes (those that were set up), handed to the caller.
    fn take_pipes(
        &mut self,
    ) -> (
        Option<ChildStdin>,
        Option<tokio::process::ChildStdout>,
        Option<tokio::process::ChildStderr>,
    ) {
        match self.child.as_mut() {
            Some(c) => (c.stdin.take(), c.stdout.take(), c.stderr.take()),
            None => (None, None, None),
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH (the group is already gone) is the expected, fine outcome.
            let _ = killpg(pgid, signal);
        }
    }

    /// Waits for the child until `deadline`; past it, TERM, grace, KILL (all to the group).
    async fn wait_until(&mut self, deadline: Instant) -> Ended {
        let Some(child) = self.child.as_mut() else {
            return Ended::WaitFailed(std::io::Error::other("no child"));
        };
        match timeout_at(deadline, child.wait()).await {
            Ok(Ok(status)) => return Ended::Exited(status),
            Ok(Err(e)) => return Ended::WaitFailed(e),
            Err(_) => {}
        }
        self.signal(Signal::SIGTERM);
        let Some(child) = self.child.as_mut() else {
            return Ended::WaitFailed(std::io::Error::other("no child"));
        };
        if let Ok(Ok(status)) = timeout(self.grace, child.wait()).await {
            return Ended::TimedOut(status.signal().map_or("SIGTERM", |s| signal_str(s, "SIGTERM")));
        }
        self.signal(Signal::SIGKILL);
        if let Some(child) = self.child.as_mut() {
            // Bounded; if it still has not been reaped, `kill_on_drop` and tokio's orphan
            // reaping take over when `child` is dropped.
            let _ = timeout(REAP_TIMEOUT, child.wait()).await;
        }
        Ended::TimedOut("SIGKILL")
    }

    /// SIGKILLs whatever is left of the group (descendants holding our pipes) after the child
    /// has been reaped, and disarms the drop guard.
    fn kill_rest(&mut self) {
        self.signal(Signal::SIGKILL);
        self.done = true;
    }

    /// The cancellation path: TERM, grace, KILL, reap.
    async fn shut_down(mut self) {
        self.signal(Signal::SIGTERM);
        if let Some(child) = self.child.as_mut() {
            let _ = timeout(self.grace, child.wait()).await;
        }
        self.signal(Signal::SIGKILL);
        if let Some(child) = self.child.as_mut() {
            let _ = timeout(REAP_TIMEOUT, child.wait()).await;
        }
        self.signal(Signal::SIGKILL);
        self.done = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if !self.cleaning_up
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let group = Group {
                child: self.child.take(),
                pgid: self.pgid,
                grace: self.grace,
                done: false,
                cleaning_up: true,
                managed: self.managed.take(),
            };
            handle.spawn(group.shut_down());
            return;
        }
        // No runtime, or the cleanup task itself was dropped: no time for a grace period.
        self.signal(Signal::SIGKILL);
        // `self.child` drops next: `kill_on_drop` plus tokio's best-effort orphan reaping.
    }
}

/// Aborts the task when dropped, so no helper task outlives the call.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Which part of a stream to keep.
#[derive(Clone, Copy)]
enum Keep {
    /// The first `n` bytes (stdout: the output).
    Head(usize),
    /// The last `n` bytes (stderr: the error tail).
    Tail(usize),
}

/// What a reader kept of one stream.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    /// Bytes read in total, kept or not.
    total: usize,
}

/// Starts reading `stream` to EOF in its own task. Sending on (or dropping) the returned sender
/// makes the reader stop and return what it has.
fn spawn_reader<R>(stream: Option<R>, keep: Keep) -> (oneshot::Sender<()>, AbortOnDrop<Captured>)
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        match stream {
            Some(stream) => read_capped(stream, keep, stop_rx).await,
            None => Captured::default(),
        }
    });
    (stop_tx, AbortOnDrop(task))
}

/// Reads to EOF (or until stopped), keeping at most the `keep` bytes and discarding the rest.
async fn read_capped<R: AsyncRead + Unpin>(mut stream: R, keep: Keep, mut stop: oneshot::Receiver<()>) -> Captured {
    let mut out = Captured::default();
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = tokio::select! {
            biased;
            _ = &mut stop => break,
            read = stream.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
        };
        out.total = out.total.saturating_add(n);
        let data = &chunk[..n];
        match keep {
            Keep::Head(cap) => {
                let room = cap.saturating_sub(out.kept.len());
                out.kept.extend_from_slice(&data[..n.min(room)]);
            }
            Keep::Tail(cap) => {
                out.kept.extend_from_slice(&data[n.saturating_sub(cap)..]);
                let excess = out.kept.len().saturating_sub(cap);
                out.kept.drain(..excess);
            }
        }
    }
    out
}

/// Waits for a reader until `deadline`, then tells it to stop and takes what it has.
async fn finish_reader(mut reader: AbortOnDrop<Captured>, stop: oneshot::Sender<()>, deadline: Instant) -> Captured {
    if let Ok(Ok(captured)) = timeout_at(deadline, &mut reader.0).await {
        return captured;
    }
    let _ = stop.send(());
    // The reader checks `stop` before every read, so it returns promptly; still bounded.
    match timeout(Duration::from_millis(100), &mut reader.0).await {
        Ok(Ok(captured)) => captured,
        _ => Captured::default(),
    }
}

/// The last [`STDERR_KEEP`] bytes of stderr, starting on a character boundary, lossy, trimmed.
fn stderr_tail(bytes: &[u8]) -> String {
    let mut start = bytes.len().saturating_sub(STDERR_KEEP);
    // Skip UTF-8 continuation bytes so the tail does not start with a broken character.
    while start < bytes.len() && start > 0 && (bytes[start] & 0b1100_0000) == 0b1000_0000 {
        start += 1;
    }
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}

/// `bytes` as text; when the stream was cut, a character split by the cut is dropped instead of
/// becoming U+FFFD.
fn utf8_prefix_lossy(bytes: &[u8], truncated: bool) -> String {
    let end = match std::str::from_utf8(bytes) {
        Err(e) if truncated && e.error_len().is_none() => e.valid_up_to(),
        _ => bytes.len(),
    };
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// `"SIGSEGV"` for 11; `"signal 40"` for numbers nix does not name.
fn signal_name(signo: i32) -> String {
    Signal::try_from(signo).map_or_else(|_| format!("signal {signo}"), |s| s.as_str().to_owned())
}

/// Like [`signal_name`], for a static name with a fallback.
fn signal_str(signo: i32, fallback: &'static str) -> &'static str {
    Signal::try_from(signo).map_or(fallback, Signal::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tail_starts_on_a_char_boundary() {
        let mut bytes = vec![b'x'; 10];
        bytes.extend("é".repeat(STDERR_KEEP).as_bytes());
        bytes.extend(b"  end\n");
        let tail = stderr_tail(&bytes);
        assert!(tail.ends_with("end"));
        assert!(!tail.contains('\u{FFFD}'));
        assert!(tail.len() <= STDERR_KEEP);
        let shown = super::super::tail_cut(&tail, STDERR_TAIL_BYTES);
        assert!(shown.ends_with("end") && shown.len() <= STDERR_TAIL_BYTES);
        assert!(!shown.contains('\u{FFFD}'));
    }

    #[test]
    fn truncated_text_drops_a_split_character() {
        let bytes = "aé".as_bytes();
        assert_eq!(utf8_prefix_lossy(&bytes[..2], true), "a");
        assert_eq!(utf8_prefix_lossy(&bytes[..2], false), "a\u{FFFD}");
    }

    #[test]
    fn requested_state_keeps_only_the_referenced_paths() {
        let spec = ExecSpec {
            state_paths: vec![
                vec!["user".into(), "id".into()],
                vec!["org".into()],
                vec!["missing".into(), "x".into()],
            ],
            ..ExecSpec::default()
        };
        let state = json!({"user": {"id": "u", "token": "t"}, "org": {"id": 1, "b": 2}, "key": "k"});
        assert_eq!(
            requested_state(&spec, &state),
            json!({"user": {"id": "u"}, "org": {"id": 1, "b": 2}})
        );
        assert_eq!(requested_state(&ExecSpec::default(), &state), json!({}));
        assert_eq!(requested_state(&spec, &Value::Null), json!({}));
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(11), "SIGSEGV");
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_str(15, "x"), "SIGTERM");
    }

    #[tokio::test]
    async fn tail_reader_keeps_only_the_end() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (_stop, rx) = oneshot::channel::<()>();
        let got = read_capped(&data[..], Keep::Tail(1000), rx).await;
        assert_eq!(got.total, data.len());
        assert_eq!(got.kept, &data[data.len() - 1000..]);
        let (_stop, rx) = oneshot::channel::<()>();
        let got = read_capped(&data[..], Keep::Head(1000), rx).await;
        assert_eq!(got.kept, &data[..1000]);
    }
}

//! The executor: for each parsed call — look the tool up, check the arguments, fill injected
//! state, wait for admission, run the retry loop against the backend, bound the output — and
//! return exactly one [`ToolResult`] per call, in call order, whatever happens (unknown tool,
//! bad arguments, timeouts, rejection, cancellation, even a panic inside one call).

pub mod breaker;
pub mod limits;
pub mod output;
pub mod replay;
pub mod retry;
pub mod validate;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::backend::Backends;
use crate::backend::egress::EgressPolicy;
use crate::backend::http::HttpBackend;
use crate::backend::{Attempt, BackendError};
use crate::call::{ErrorKind, Outcome, ToolCall, ToolError, ToolResult};
use crate::config::ServerConfig;
use crate::registry::Registry;
use crate::store::{Claim, ClaimGuard, Namespace, Waited};
use crate::tool::Tool;
use replay::Stored as Ran;
use retry::{Jitter, RandomJitter, RetryBudget};

/// Most tool names listed in an `unknown_tool` message.
const MAX_LISTED_TOOLS: usize = 20;

/// The `tool` label (metrics) and log field of a call whose name is no registered tool.
pub const UNKNOWN_TOOL_LABEL: &str = "_unknown";

/// How one batch runs: the executor's view of a request's options (the wire shape lives with
/// the request, in `turn`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions<'a> {
    /// Run calls one by one, in order, instead of concurrently.
    pub sequential: bool,
    /// Lower the per-request parallelism (never above the server's).
    pub max_concurrency: Option<usize>,
    /// Deadline of the whole batch; never above the server's `request_timeout`.
    pub deadline: Option<Duration>,
    /// Only these tools may run; other calls get `unknown_tool`.
    pub allowed_tools: Option<&'a [String]>,
    /// Keep returned files' bytes in the results (`results[].files[].data`).
    pub include_file_data: bool,
}

/// Server-wide limits the executor applies.
#[derive(Debug, Clone)]
pub struct ExecLimits {
    pub request_parallelism: usize,
    pub json_depth: usize,
    pub request_timeout: Duration,
}

/// Runs tool calls. One per server; cheap to share behind an `Arc`.
pub struct Executor {
    backends: Backends,
    /// Tool calls in flight across all requests.
    global: Arc<Semaphore>,
    limits: ExecLimits,
    jitter: Arc<dyn Jitter>,
    breakers: Arc<breaker::Breakers>,
    /// Per-tool concurrency caps (`concurrency = N`), kept across reloads like the breakers.
    tool_limits: limits::ToolLimits,
    /// Where results are kept for replay-safe execution (`None` when disabled).
    replay: Option<replay::ReplayStore>,
    /// The backing of the replay and `Idempotency-Key` stores (`[store]`), and its health.
    stores: crate::store::Stores,
}

/// Why the executor could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[from] BackendError),
    #[error("cannot set up the store: {0}")]
    Store(#[from] crate::store::StoreError),
}

/// One request's worth of calls.
pub struct Batch<'a> {
    pub calls: &'a [ToolCall],
    pub state: &'a Value,
    /// Who sent the request: a digest of the matched auth token, or `anonymous`. Part of every
    /// replay key, so one client never receives another's stored results.
    pub principal: &'a str,
    pub options: RunOptions<'a>,
    /// Prefix of every call's `Idempotency-Key`.
    pub request_id: &'a str,
    /// Cancelled on server shutdown (and when a streaming client goes away): unfinished calls
    /// end as `rejected` and their work is dropped (process groups killed, requests aborted).
    pub cancel: &'a CancellationToken,
    /// Where progress events go, for streaming responses. At most `calls × (max_attempts + 2)`
    /// events per request, so the channel is bounded by the request itself.
    pub events: Option<&'a EventSink>,
}

/// One call on its way through the executor's steps (check → replay → admit → retry), carried
/// as one value instead of a long argument list.
#[derive(Clone, Copy)]
struct CallCtx<'a> {
    /// The request's registry snapshot.
    registry: &'a Registry,
    batch: &'a Batch<'a>,
    call: &'a ToolCall,
    /// The call's position in the batch (and in `results`).
    index: usize,
    /// The request's deadline; a call's own deadline is at most this.
    deadline: Instant,
    /// The request's parallelism slots.
    request_slots: &'a Arc<Semaphore>,
}

/// What claiming a call's replay key decided.
enum Claimed {
    /// Run the call; settle the claim afterwards (`None`: run without one).
    Run(Option<ClaimGuard<Ran>>),
    /// Answer with this stored (or concurrently produced) result.
    Answer(Ran),
}

/// Receives [`ExecEvent`]s as they happen.
pub type EventSink = tokio::sync::mpsc::UnboundedSender<ExecEvent>;

/// Progress of a batch, in the order things happen (streaming responses).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ExecEvent {
    /// A call began (before argument checks and admission).
    CallStarted {
        index: usize,
        id: Option<String>,
        name: String,
    },
    /// An attempt failed and another one follows after `retry_in_ms`.
    AttemptFailed {
        index: usize,
        id: Option<String>,
        name: String,
        attempt: u32,
        error: ToolError,
        retry_in_ms: u64,
    },
    /// A call ended; `result` is exactly its entry of `results`.
    CallFinished { index: usize, result: ToolResult },
}

impl Batch<'_> {
    fn emit(&self, event: ExecEvent) {
        if let Some(sink) = self.events {
            // A closed receiver means the client left; cancellation handles that.
            let _ = sink.send(event);
        }
    }
}

impl Executor {
    /// An executor with the server's limits and the shared HTTP client.
    pub fn new(config: &ServerConfig) -> Result<Self, ExecutorError> {
        let stores = crate::store::Stores::from_config(&config.replay, &config.store)?;
        Ok(Executor {
            backends: Backends::new(HttpBackend::with_egress(
                &config.http_client,
                EgressPolicy::from_config(&config.egress),
            )?),
            global: Arc::new(Semaphore::new(config.limits.global_in_flight)),
            limits: ExecLimits {
                request_parallelism: config.limits.request_parallelism,
                json_depth: config.limits.json_depth,
                request_timeout: config.limits.request_timeout.0,
            },
            jitter: Arc::new(RandomJitter),
            breakers: breaker::Breakers::new(config.breaker.failures, config.breaker.open_for.0),
            tool_limits: limits::ToolLimits::default(),
            replay: config.replay.enabled.then(|| stores.open(Namespace::Replay)),
            stores,
        })
    }

    /// The backing of the stores: the `Idempotency-Key` store is opened on it too, so both
    /// share one Redis connection.
    pub fn stores(&self) -> &crate::store::Stores {
        &self.stores
    }

    /// Runs subprocess tools through `shim` (resource limits, no capabilities; see
    /// [`crate::backend::shim`]). Without one, programs are started directly and a tool with
    /// `exec.limits` fails to start.
    pub fn with_exec_shim(mut self, shim: Option<crate::backend::shim::ExecShim>) -> Self {
        self.backends.exec.shim = shim;
        self
    }

    /// Registers every subprocess with `reaper`, the subreaper's sweep (see
    /// [`crate::backend::reaper`]).
    pub fn with_reaper(mut self, reaper: Option<Arc<crate::backend::reaper::Reaper>>) -> Self {
        self.backends.exec.reaper = reaper;
        self
    }

    /// Runs MCP-backed tools through `caller` (the hub of [`crate::mcp`]); without one they
    /// fail as `backend_unavailable`.
    pub fn with_mcp(mut self, caller: Option<Arc<dyn crate::backend::McpCaller>>) -> Self {
        self.backends.mcp = caller;
        self
    }

    /// The subprocess context (shim, reaper), shared with the MCP hub's stdio servers.
    pub fn exec_context(&self) -> crate::backend::subprocess::ExecContext {
        self.backends.exec.clone()
    }

    /// Replaces the replay store (e.g. with one shared by several replicas).
    pub fn with_replay_store(mut self, store: Option<replay::ReplayStore>) -> Self {
        self.replay = store;
        self
    }

    /// Replaces the jitter source (tests pin it).
    pub fn with_jitter(mut self, jitter: Arc<dyn Jitter>) -> Self {
        self.jitter = jitter;
        self
    }

    /// The breaker state of a backend (`None` until it has seen traffic).
    pub fn breaker(&self, key: &str) -> Option<breaker::BreakerView> {
        self.breakers.view(key)
    }

    /// Tool calls currently holding a global in-flight slot.
    pub fn in_flight(&self, capacity: usize) -> usize {
        capacity.saturating_sub(self.global.available_permits())
    }

    /// Runs every call of the batch against `registry` (a snapshot: a reload during the request
    /// does not change the tools it runs). Returns one result per call, in call order.
    pub async fn execute(&self, registry: &Registry, batch: &Batch<'_>) -> Vec<ToolResult> {
        let request_budget = batch
            .options
            .deadline
            .map_or(self.limits.request_timeout, |d| d.min(self.limits.request_timeout));
        let deadline = Instant::now() + request_budget;
        let parallel = !batch.options.sequential;
        let width = if parallel {
            batch
                .options
                .max_concurrency
                .map_or(self.limits.request_parallelism, |m| {
                    m.min(self.limits.request_parallelism)
                })
                .max(1)
        } else {
            1
        };
        let request_slots = Arc::new(Semaphore::new(width));
        let cx = |index: usize, call| CallCtx {
            registry,
            batch,
            call,
            index,
            deadline,
            request_slots: &request_slots,
        };
        if parallel {
            let futs = batch
                .calls
                .iter()
                .enumerate()
                .map(|(index, call)| self.run_call(cx(index, call)));
            futures_util::future::join_all(futs).await
        } else {
            let mut out = Vec::with_capacity(batch.calls.len());
            for (index, call) in batch.calls.iter().enumerate() {
                out.push(self.run_call(cx(index, call)).await);
            }
            out
        }
    }

    /// One call, start to finish, with a panic in it turned into an `internal` result.
    async fn run_call(&self, cx: CallCtx<'_>) -> ToolResult {
        let CallCtx {
            registry,
            batch,
            call,
            index,
            ..
        } = cx;
        let started = Instant::now();
        let _in_flight = InFlight::enter();
        if batch.events.is_some() {
            batch.emit(ExecEvent::CallStarted {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
            });
        }
        // Logs and metrics name registered tools only: a model-chosen name is unbounded
        // (metric label cardinality, log size), so anything else is `_unknown`.
        let label = registry.get(&call.name).map_or(UNKNOWN_TOOL_LABEL, |t| t.name.as_str());
        let span = tracing::info_span!("tool_call", tool = %label, call_id = call.id.as_deref().unwrap_or("-"), index);
        // `Span::none()` unless OpenTelemetry traces are on (`docs/tracing.md`).
        let trace = crate::telemetry::traces::tool_span(label, call.id.as_deref());
        let work = AssertUnwindSafe(self.run_checked(&cx)).catch_unwind();
        let (ran, replayed) = async {
            tokio::select! {
                r = work => match r {
                    Ok(r) => r,
                    Err(_) => (Ran::err(ToolError::new(ErrorKind::Internal, "The tool runner failed unexpectedly on this call. Try again later.", true)), false),
                },
                () = batch.cancel.cancelled() => (Ran::err(ToolError::new(ErrorKind::Rejected, "The server is shutting down; the call was stopped. Try again.", true)), false),
            }
        }
        .instrument(span.clone())
        .instrument(trace.clone())
        .await;
        let Ran {
            outcome,
            files,
            truncated,
            attempts,
        } = ran;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let outcome = match outcome {
            Outcome::Err(mut e) => {
                // Backend error bodies and stderr can echo tokens or state; neither may reach the model.
                registry.redactor.redact_error(&mut e, batch.state);
                Outcome::Err(e)
            }
            ok @ Outcome::Ok(_) => ok,
        };
        let result = ToolResult {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.to_value(),
            outcome,
            files,
            include_file_data: batch.options.include_file_data,
            truncated,
            attempts,
            duration_ms,
            replayed,
        };
        let outcome_label = result.error().map_or("ok", |e| e.kind.as_str());
        crate::telemetry::traces::finish_tool(&trace, result.error().map(|e| e.kind.as_str()), attempts, replayed);
        span.in_scope(|| {
            tracing::info!(outcome = outcome_label, attempts, duration_ms, "Tool call finished.");
        });
        crate::telemetry::metrics::tool_call(label, outcome_label, attempts, started.elapsed());
        if outcome_label == "rejected" {
            crate::telemetry::metrics::rejected("admission");
        }
        // Only a streaming request has a sink; the others need no copy of the result.
        if batch.events.is_some() {
            batch.emit(ExecEvent::CallFinished {
                index,
                result: result.clone(),
            });
        }
        result
    }

    /// Checks the call, answers repeats from the replay store, and runs the rest.
    /// Returns what the call produced and whether it was replayed.
    async fn run_checked(&self, cx: &CallCtx<'_>) -> (Ran, bool) {
        let CallCtx {
            registry,
            batch,
            call,
            deadline: request_deadline,
            ..
        } = *cx;
        let tool = match self.lookup(registry, batch.options.allowed_tools, &call.name) {
            Ok(t) => t,
            Err(e) => return (Ran::err(e), false),
        };
        let mut args = match validate::check_arguments(tool, &call.arguments, self.limits.json_depth) {
            Ok(a) => a,
            Err(e) => return (Ran::err(e), false),
        };
        // The key covers what the model sent; the injected values are covered by the scope.
        let replay = match (&self.replay, call.id.as_deref(), tool.policy.replay) {
            (Some(store), Some(id), true) => {
                let visible = tool.visible_state(batch.state);
                let scope = replay::Scope {
                    principal: batch.principal,
                    state: &visible,
                };
                Some((store, replay::key(id, &tool.name, &args, scope)))
            }
            _ => None,
        };
        if let Err(e) = inject(tool, batch.state, &mut args) {
            return (Ran::err(e), false);
        }
        let mut guard = None;
        if let Some((store, key)) = replay {
            let deadline = request_deadline.min(Instant::now() + tool.policy.deadline);
            match self.claim_call(store, key, deadline, tool).await {
                Ok(Claimed::Run(g)) => guard = g,
                Ok(Claimed::Answer(s)) => return (s, true),
                Err(e) => return (Ran::err(e), false),
            }
        }
        let ran = self.run_tool(cx, tool, args).await;
        if let Some(g) = guard {
            // Failures the agent may retry (timeouts, unreachable or failing backends,
            // rejections) are not stored: a re-sent request should try those again.
            let settled = match &ran.outcome {
                Outcome::Err(e) if e.retryable => g.abandon().await,
                _ => g.complete(ran.clone()).await,
            };
            if let Err(e) = settled {
                // The call ran and its result is returned; only its replay is lost (a claim
                // left behind lapses with its lease).
                tracing::warn!(tool = %tool.name, error = %e, "Could not store the call's result for replay.");
            }
        }
        (ran, false)
    }

    /// Claims a call's replay key: run it (holding the claim), or answer with the result of an
    /// earlier or concurrent identical call. When the store fails, an idempotent tool runs
    /// without deduplication (counted, warned once per interval) and any other tool fails fast
    /// with the retryable `store_unavailable` rather than risk running twice.
    async fn claim_call(
        &self,
        store: &replay::ReplayStore,
        key: String,
        deadline: Instant,
        tool: &Tool,
    ) -> Result<Claimed, ToolError> {
        let fail = |e: crate::store::StoreError| {
            if tool.policy.idempotent {
                self.stores.health().bypassed(Namespace::Replay, &tool.name, &e);
                Ok(Claimed::Run(None))
            } else {
                Err(ToolError::new(
                    ErrorKind::StoreUnavailable,
                    "The replay store is unavailable, and this tool is not idempotent, so it was not run (it could otherwise run twice). Try again shortly.",
                    true,
                ))
            }
        };
        loop {
            let claim = match store.claim(&key, "", replay::lease(deadline)).await {
                Ok(c) => c,
                Err(e) => return fail(e),
            };
            match claim {
                Claim::Done(s) => return Ok(Claimed::Answer(s)),
                Claim::Fresh(lease) => {
                    return Ok(Claimed::Run(Some(ClaimGuard::new(Arc::clone(store), key, lease))));
                }
                // Replay keys carry no fingerprint; a mismatch cannot happen. Run it.
                Claim::Mismatch => return Ok(Claimed::Run(None)),
                Claim::InFlight(pending) => match store.wait(&key, "", pending, deadline).await {
                    Ok(Waited::Done(s)) => return Ok(Claimed::Answer(s)),
                    // The first run was abandoned (cancelled) or its lease lapsed: claim again.
                    Ok(Waited::Released) => {}
                    Ok(Waited::TimedOut) => {
                        return Err(ToolError::new(
                            ErrorKind::Rejected,
                            "An identical call is still running and did not finish before this one's deadline. Try again later.",
                            true,
                        ));
                    }
                    Err(e) => return fail(e),
                },
            }
        }
    }

    /// Admission, the retry loop against the backend, and the output bound.
    async fn run_tool(&self, cx: &CallCtx<'_>, tool: &Tool, args: Map<String, Value>) -> Ran {
        let CallCtx {
            registry,
            batch,
            call,
            index,
            deadline: request_deadline,
            request_slots,
        } = *cx;
        let deadline = request_deadline.min(Instant::now() + tool.policy.deadline);
        let _permits = match self.admit(tool, Arc::clone(request_slots), deadline).await {
            Ok(p) => p,
            Err(e) => return Ran::err(e),
        };
        let key = format!(
            "{}:{}",
            batch.request_id,
            call.id.clone().unwrap_or_else(|| format!("#{index}"))
        );
        let on_retry = |attempt: u32, err: &BackendError, delay: Duration| {
            let mut error = err.to_tool_error();
            registry.redactor.redact_error(&mut error, batch.state);
            batch.emit(ExecEvent::AttemptFailed {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
                attempt,
                error,
                retry_in_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            });
        };
        let on_attempt = |n: u32, err: Option<&BackendError>, backoff: Option<Duration>| {
            let outcome = err.map_or("ok", |e| e.to_tool_error().kind.as_str());
            crate::telemetry::traces::attempt(n, outcome, backoff);
        };
        let budget = RetryBudget {
            policy: &tool.policy.retry,
            timeout: tool.policy.timeout,
            idempotent: tool.policy.idempotent,
            deadline,
            stop_grace: Backends::stop_grace(&tool.backend, &tool.policy),
            on_retry: batch.events.is_some().then_some(&on_retry as retry::OnRetry<'_>),
            on_attempt: crate::telemetry::traces::enabled().then_some(&on_attempt as retry::OnAttempt<'_>),
        };
        let args = &args;
        let key = key.as_str();
        let backend_key = tool.backend.breaker_key();
        let backend_key = backend_key.as_str();
        let outcome = retry::run(budget, self.jitter.as_ref(), |n, timeout| async move {
            let attempt = Attempt {
                call_id: call.id.as_deref(),
                attempt: n,
                arguments: args,
                state: batch.state,
                idempotency_key: key,
                timeout,
                policy: &tool.policy,
            };
            let admission = self
                .breakers
                .admit(backend_key)
                .map_err(|retry_after| BackendError::Unavailable { retry_after })?;
            let result = self.backends.call(&tool.backend, &attempt).await;
            admission.record(result.as_ref().map(|_| ()));
            // Masked before the retry loop logs it and before the excerpt is cut for the model.
            result.map_err(|mut e| {
                registry.redactor.redact_backend_error(&mut e, batch.state);
                e
            })
        })
        .await;
        match outcome.result {
            Ok(out) => {
                // A backend may echo what it was sent (its Authorization header, a URL with a
                // key): mask the secrets in every string of the output, before it is cut.
                // `state` values are not masked here: echoing them (a user's own id or name) is
                // what many tools are for; errors mask them.
                let value = registry.redactor.redact_output(out.value, out.truncated);
                let (value, truncated) = output::bound(value, out.truncated, tool.policy.max_output_bytes);
                Ran {
                    outcome: Outcome::Ok(value),
                    files: out.files,
                    truncated,
                    attempts: outcome.attempts,
                }
            }
            Err(e) => Ran {
                attempts: outcome.attempts,
                ..Ran::err(e)
            },
        }
    }

    fn lookup<'r>(
        &self,
        registry: &'r Registry,
        allowed: Option<&[String]>,
        name: &str,
    ) -> Result<&'r Tool, ToolError> {
        let allowed = |n: &str| allowed.is_none_or(|list| list.iter().any(|t| t == n));
        if let Some(tool) = registry.get(name).filter(|_| allowed(name)) {
            return Ok(tool);
        }
        let known: Vec<&str> = registry
            .tools()
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| allowed(n))
            .collect();
        let mut list = known
            .iter()
            .take(MAX_LISTED_TOOLS)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if known.len() > MAX_LISTED_TOOLS {
            list.push_str(&format!(", … ({} more)", known.len() - MAX_LISTED_TOOLS));
        }
        if !crate::call::is_portable_tool_name(name) {
            // Never a tool here (names are checked at load); not echoed: it may be huge or
            // carry control characters.
            return Err(ToolError::new(
                ErrorKind::UnknownTool,
                format!("The tool name is not valid: tool names are 1-64 of a-z A-Z 0-9 _ -. Available tools: {list}."),
                false,
            ));
        }
        Err(ToolError::new(
            ErrorKind::UnknownTool,
            format!("There is no tool named `{name}` here. Available tools: {list}."),
            false,
        ))
    }

    /// Waits for a slot of the request, the tool and the server, within the call's deadline.
    /// Waiting is bounded by the deadline, so no queue grows without limit.
    async fn admit(
        &self,
        tool: &Tool,
        request_slots: Arc<Semaphore>,
        deadline: Instant,
    ) -> Result<Vec<OwnedSemaphorePermit>, ToolError> {
        let mut permits = Vec::with_capacity(3);
        let mut sems = vec![("request", request_slots)];
        if let Some(limit) = tool.policy.concurrency {
            sems.push(("tool", self.tool_limits.get(&tool.name, limit)));
        }
        sems.push(("server", Arc::clone(&self.global)));
        for (what, sem) in sems {
            match tokio::time::timeout_at(deadline, sem.acquire_owned()).await {
                // A slot freed at the deadline itself (typically by a call that just ran out of
                // time) is too late to start in: the call is rejected, not "deadline_exceeded
                // after 0 attempts", so the outcome does not depend on which timer fired first.
                Ok(Ok(p)) if Instant::now() < deadline => permits.push(p),
                Ok(_) | Err(_) => {
                    return Err(ToolError::new(
                        ErrorKind::Rejected,
                        format!(
                            "Too many calls are running ({what} limit); this call could not start before its deadline. Try again later."
                        ),
                        true,
                    ));
                }
            }
        }
        Ok(permits)
    }
}

/// Fills the tool's hidden arguments from the request state. The model's own values for those
/// keys were already removed (`validate`), so a missing state value can never be replaced by
/// one the model chose: a required one fails the call with `missing_state` (a fault of the
/// application, which the model cannot repair), an optional one (`"state.x?"`) is left out.
fn inject(tool: &Tool, state: &Value, args: &mut Map<String, Value>) -> Result<(), ToolError> {
    for i in &tool.inject {
        let mut cur = Some(state);
        for p in &i.path {
            cur = cur.and_then(|v| v.get(p));
        }
        match cur.filter(|v| !v.is_null()) {
            Some(v) => {
                args.insert(i.key.clone(), v.clone());
            }
            None if i.optional => {}
            None => {
                return Err(ToolError::new(
                    ErrorKind::MissingState,
                    format!(
                        "This tool could not run: the application did not supply `state.{}` (needed for `{}`). This is not a problem with the call's arguments; do not retry it unchanged.",
                        i.path.join("."),
                        i.key
                    ),
                    false,
                ));
            }
        }
    }
    Ok(())
}

/// Keeps the in-flight gauge right even when a call's future is dropped.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        crate::telemetry::metrics::in_flight(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        crate::telemetry::metrics::in_flight(-1.0);
    }
}

//! The executor: for each parsed call — look the tool up, check the arguments, fill injected
//! state, wait for admission, run the retry loop against the backend, bound the output — and
//! return exactly one [`ToolResult`] per call, in call order, whatever happens (unknown tool,
//! bad arguments, timeouts, rejection, cancellation, even a panic inside one call).

pub mod breaker;
pub mod output;
pub mod replay;
pub mod retry;
pub mod validate;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::backend::egress::EgressPolicy;
use crate::backend::http::HttpBackend;
use crate::backend::{Attempt, BackendError, subprocess};
use crate::call::{ErrorKind, Outcome, ToolCall, ToolError, ToolResult};
use crate::config::ServerConfig;
use crate::registry::Registry;
use crate::tool::{BackendSpec, Tool};
use replay::Stored as Ran;
use retry::{Jitter, RandomJitter, RetryBudget};

/// Most tool names listed in an `unknown_tool` message.
const MAX_LISTED_TOOLS: usize = 20;

/// Per-request options (`options` of `POST /v1/execute`). All optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecOptions {
    /// Run calls concurrently (default true); false runs them one by one, in order.
    pub parallel: Option<bool>,
    /// Lower the per-request parallelism (never above the server's).
    pub max_concurrency: Option<usize>,
    /// Deadline of the whole request; never above the server's `request_timeout`.
    pub deadline_ms: Option<u64>,
    /// Only these tools may run in this request; other calls get `unknown_tool`.
    pub tools: Option<Vec<String>>,
    /// List each returned file's bytes (`results[].files[].data`, base64); default false: only
    /// name, type and size. Provider messages always carry the files either way.
    pub include_file_data: Option<bool>,
    /// OpenAI Chat only (tool messages are text there): also append one `user` message after
    /// the tool messages that carries the returned images (default false).
    pub files_as_user_message: Option<bool>,
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
    http: HttpBackend,
    /// Tool calls in flight across all requests.
    global: Arc<Semaphore>,
    limits: ExecLimits,
    jitter: Arc<dyn Jitter>,
    breakers: Arc<breaker::Breakers>,
    /// Where results are kept for replay-safe execution (`None` when disabled).
    replay: Option<Arc<dyn replay::ReplayStore>>,
    /// The exec shim and the reaper for subprocess tools (none unless set by the binary).
    exec: subprocess::ExecContext,
}

/// Why the executor could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[from] BackendError),
}

/// One request's worth of calls.
pub struct Batch<'a> {
    pub calls: &'a [ToolCall],
    pub state: &'a Value,
    pub options: &'a ExecOptions,
    /// Prefix of every call's `Idempotency-Key`.
    pub request_id: &'a str,
    /// Cancelled on server shutdown (and when a streaming client goes away): unfinished calls
    /// end as `rejected` and their work is dropped (process groups killed, requests aborted).
    pub cancel: &'a CancellationToken,
    /// Where progress events go, for streaming responses. At most `calls × (max_attempts + 2)`
    /// events per request, so the channel is bounded by the request itself.
    pub events: Option<&'a EventSink>,
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
        Ok(Executor {
            http: HttpBackend::with_egress(&config.http_client, EgressPolicy::from_config(&config.egress))?,
            global: Arc::new(Semaphore::new(config.limits.global_in_flight)),
            limits: ExecLimits {
                request_parallelism: config.limits.request_parallelism,
                json_depth: config.limits.json_depth,
                request_timeout: config.limits.request_timeout.0,
            },
            jitter: Arc::new(RandomJitter),
            breakers: breaker::Breakers::new(config.breaker.failures, config.breaker.open_for.0),
            replay: config.replay.enabled.then(|| {
                Arc::new(replay::MemoryStore::new(
                    config.replay.ttl.0,
                    config.replay.max_entries,
                    config.replay.max_bytes,
                )) as Arc<dyn replay::ReplayStore>
            }),
            exec: subprocess::ExecContext::default(),
        })
    }

    /// Runs subprocess tools through `shim` (resource limits, no capabilities; see
    /// [`crate::backend::shim`]). Without one, programs are started directly and a tool with
    /// `exec.limits` fails to start.
    pub fn with_exec_shim(mut self, shim: Option<crate::backend::shim::ExecShim>) -> Self {
        self.exec.shim = shim;
        self
    }

    /// Registers every subprocess with `reaper`, the subreaper's sweep (see
    /// [`crate::backend::reaper`]).
    pub fn with_reaper(mut self, reaper: Option<Arc<crate::backend::reaper::Reaper>>) -> Self {
        self.exec.reaper = reaper;
        self
    }

    /// Replaces the replay store (e.g. with one shared by several replicas).
    pub fn with_replay_store(mut self, store: Option<Arc<dyn replay::ReplayStore>>) -> Self {
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
            .deadline_ms
            .map(Duration::from_millis)
            .map_or(self.limits.request_timeout, |d| d.min(self.limits.request_timeout));
        let deadline = Instant::now() + request_budget;
        let parallel = batch.options.parallel.unwrap_or(true);
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
        if parallel {
            let futs = batch
                .calls
                .iter()
                .enumerate()
                .map(|(i, call)| self.run_call(registry, batch, call, i, deadline, Arc::clone(&request_slots)));
            futures_util::future::join_all(futs).await
        } else {
            let mut out = Vec::with_capacity(batch.calls.len());
            for (i, call) in batch.calls.iter().enumerate() {
                out.push(
                    self.run_call(registry, batch, call, i, deadline, Arc::clone(&request_slots))
                        .await,
                );
            }
            out
        }
    }

    /// One call, start to finish, with a panic in it turned into an `internal` result.
    async fn run_call(
        &self,
        registry: &Registry,
        batch: &Batch<'_>,
        call: &ToolCall,
        index: usize,
        deadline: Instant,
        request_slots: Arc<Semaphore>,
    ) -> ToolResult {
        let started = Instant::now();
        let _in_flight = InFlight::enter();
        batch.emit(ExecEvent::CallStarted {
            index,
            id: call.id.clone(),
            name: call.name.clone(),
        });
        let span =
            tracing::info_span!("tool_call", tool = %call.name, call_id = call.id.as_deref().unwrap_or("-"), index);
        let work =
            AssertUnwindSafe(self.run_checked(registry, batch, call, index, deadline, request_slots)).catch_unwind();
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
                crate::redact::Redactor::new(&registry.secrets, batch.state).redact_error(&mut e);
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
            include_file_data: batch.options.include_file_data.unwrap_or(false),
            truncated,
            attempts,
            duration_ms,
            replayed,
        };
        let outcome_label = result.error().map_or("ok", |e| e.kind.as_str());
        span.in_scope(|| {
            tracing::info!(outcome = outcome_label, attempts, duration_ms, "Tool call finished.");
        });
        crate::telemetry::metrics::tool_call(&call.name, outcome_label, attempts, started.elapsed());
        if outcome_label == "rejected" {
            crate::telemetry::metrics::rejected("admission");
        }
        batch.emit(ExecEvent::CallFinished {
            index,
            result: result.clone(),
        });
        result
    }

    /// Checks the call, answers repeats from the replay store, and runs the rest.
    /// Returns what the call produced and whether it was replayed.
    async fn run_checked(
        &self,
        registry: &Registry,
        batch: &Batch<'_>,
        call: &ToolCall,
        index: usize,
        request_deadline: Instant,
        request_slots: Arc<Semaphore>,
    ) -> (Ran, bool) {
        let tool = match self.lookup(registry, batch.options, &call.name) {
            Ok(t) => t,
            Err(e) => return (Ran::err(e), false),
        };
        let args = match validate::check_arguments(tool, &call.arguments, self.limits.json_depth) {
            Ok(a) => a,
            Err(e) => return (Ran::err(e), false),
        };
        let mut guard = None;
        if let (Some(store), Some(id), true) = (&self.replay, call.id.as_deref(), tool.policy.replay) {
            let key = replay::key(id, &tool.name, &args);
            let deadline = request_deadline.min(Instant::now() + tool.policy.deadline);
            loop {
                match store.claim(&key) {
                    replay::Claim::Stored(s) => return (s, true),
                    replay::Claim::Fresh => {
                        guard = Some(ReplayGuard {
                            store: Arc::clone(store),
                            key,
                            settled: false,
                        });
                        break;
                    }
                    replay::Claim::InFlight(mut rx) => {
                        match tokio::time::timeout_at(deadline, wait_settled(&mut rx)).await {
                            Ok(Some(s)) => return (s, true),
                            // The first run was abandoned (cancelled): claim again.
                            Ok(None) => {}
                            Err(_) => {
                                let e = ToolError::new(
                                    ErrorKind::Rejected,
                                    "An identical call is still running and did not finish before this one's deadline. Try again later.",
                                    true,
                                );
                                return (Ran::err(e), false);
                            }
                        }
                    }
                }
            }
        }
        let ran = self
            .run_tool(
                registry,
                batch,
                call,
                index,
                request_deadline,
                request_slots,
                tool,
                args,
            )
            .await;
        if let Some(g) = guard {
            g.settle(&ran);
        }
        (ran, false)
    }

    /// Admission, the retry loop against the backend, and the output bound.
    #[allow(clippy::too_many_arguments, reason = "one private step of run_checked")]
    async fn run_tool(
        &self,
        registry: &Registry,
        batch: &Batch<'_>,
        call: &ToolCall,
        index: usize,
        request_deadline: Instant,
        request_slots: Arc<Semaphore>,
        tool: &Tool,
        mut args: Map<String, Value>,
    ) -> Ran {
        inject(tool, batch.state, &mut args);
        let deadline = request_deadline.min(Instant::now() + tool.policy.deadline);
        let _permits = match self.admit(tool, request_slots, deadline).await {
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
            crate::redact::Redactor::new(&registry.secrets, batch.state).redact_error(&mut error);
            batch.emit(ExecEvent::AttemptFailed {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
                attempt,
                error,
                retry_in_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            });
        };
        let budget = RetryBudget {
            policy: &tool.policy.retry,
            timeout: tool.policy.timeout,
            idempotent: tool.policy.idempotent,
            deadline,
            stop_grace: match tool.backend {
                BackendSpec::Exec(_) => tool.policy.kill_grace + Duration::from_secs(2),
                BackendSpec::Http(_) => Duration::ZERO,
            },
            on_retry: batch.events.is_some().then_some(&on_retry as retry::OnRetry<'_>),
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
            let result = match &tool.backend {
                BackendSpec::Http(spec) => self.http.call(spec, &attempt).await,
                BackendSpec::Exec(spec) => subprocess::call_in(&self.exec, spec, &attempt).await,
            };
            admission.record(result.as_ref().map(|_| ()));
            result
        })
        .await;
        match outcome.result {
            Ok(out) => {
                let (value, truncated) = output::bound(out.value, out.truncated, tool.policy.max_output_bytes);
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

    fn lookup<'r>(&self, registry: &'r Registry, options: &ExecOptions, name: &str) -> Result<&'r Tool, ToolError> {
        let allowed = |n: &str| options.tools.as_ref().is_none_or(|list| list.iter().any(|t| t == n));
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
        if let Some(limit) = &tool.limiter {
            sems.push(("tool", Arc::clone(limit)));
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

/// Adds the tool's hidden arguments from the request state (absent state paths are left out).
fn inject(tool: &Tool, state: &Value, args: &mut Map<String, Value>) {
    for (key, path) in &tool.inject {
        let mut cur = Some(state);
        for p in path {
            cur = cur.and_then(|v| v.get(p));
        }
        if let Some(v) = cur.filter(|v| !v.is_null()) {
            args.insert(key.clone(), v.clone());
        }
    }
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

/// Waits until a running duplicate settles: `Some` with its result, `None` if it was abandoned.
async fn wait_settled(rx: &mut tokio::sync::watch::Receiver<Option<replay::Stored>>) -> Option<replay::Stored> {
    if rx.borrow().is_some() {
        return rx.borrow().clone();
    }
    match rx.changed().await {
        Ok(()) => rx.borrow().clone(),
        Err(_) => None,
    }
}

/// The claim of a fresh run: stores its result, or releases the key if the run is dropped.
struct ReplayGuard {
    store: Arc<dyn replay::ReplayStore>,
    key: String,
    settled: bool,
}

impl ReplayGuard {
    /// Stores the result, except failures the agent may retry (timeouts, unreachable or
    /// failing backends, rejections): a re-sent request should try those again.
    fn settle(mut self, ran: &Ran) {
        self.settled = true;
        match &ran.outcome {
            Outcome::Err(e) if e.retryable => self.store.abandon(&self.key),
            _ => self.store.complete(&self.key, ran.clone()),
        }
    }
}

impl Drop for ReplayGuard {
    fn drop(&mut self) {
        if !self.settled {
            self.store.abandon(&self.key);
        }
    }
}

//! MCP servers as backends: the [`McpHub`] (`docs/mcp.md`).
//!
//! # One supervisor per server
//! Each `[[mcp]]` server gets a task that connects (spawn or HTTP, then the era probe: a
//! `server/discover`, falling back to the legacy `initialize` handshake — rmcp's
//! `ClientLifecycleMode::Auto` — all bounded by [`HubSettings::connect_timeout`]), lists the
//! tools, then waits until the connection ends (the child exits, the transport closes, a call
//! found the transport broken, or the server was removed). A broken connection is retried with
//! exponential backoff ([`HubSettings::backoff_initial`] … [`HubSettings::backoff_max`]); while
//! it is down, calls of its tools fail at once with `backend_unavailable` (nothing is sent),
//! and the last listed tools stay in the registry. Servers are independent: one that hangs or
//! crashes never delays or fails another's calls.
//!
//! # Reloads
//! [`McpHub::sync`] runs before every registry build: servers whose checked spec is unchanged
//! keep their live connection (and are listed again); changed or removed ones are stopped
//! (TERM → grace → KILL for a child) and new ones started. A server's
//! `notifications/tools/list_changed`, and a reconnect that lists different tools, call the
//! hook set with [`McpHub::on_tools_changed`] — the reloader's trigger, so the new list is
//! swapped in by the same atomic swap as a changed tools file.
//!
//! # Bounds
//! One message from a server is at most the spec's `max_message_bytes` (stdio lines longer than
//! that are dropped by the transport; HTTP bodies and SSE events are refused); a listing is at
//! most [`HubSettings::max_tools`] tools over [`HubSettings::max_list_pages`] pages within
//! [`HubSettings::list_timeout`]; stderr of a child is kept as a bounded tail.

mod result;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, ProtocolVersion,
    ServerNotification, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt as _, Peer, RoleClient, ServiceError};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::egress::EgressPolicy;
use crate::backend::subprocess::{ExecContext, ServerChild, ServerCommand, spawn_server};
use crate::backend::{Attempt, BackendError, McpCaller, McpFuture, Output};
use crate::redact::Redactor;
use crate::tool::{DiscoveredTool, McpDiscovery, McpServerSpec, McpSpec, McpTransport};

/// Limits and timings of the hub.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// Spawn or connect, era probe and handshake, together.
    pub connect_timeout: Duration,
    /// One whole `tools/list` (every page).
    pub list_timeout: Duration,
    /// Most tools taken from one server.
    pub max_tools: usize,
    /// Most `tools/list` pages followed.
    pub max_list_pages: usize,
    /// First wait before reconnecting a server whose connection broke; doubled per failure.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// How long the first load waits for a new server's first connection attempt.
    pub first_wait: Duration,
}

impl Default for HubSettings {
    fn default() -> Self {
        HubSettings {
            connect_timeout: Duration::from_secs(20),
            list_timeout: Duration::from_secs(10),
            max_tools: 1000,
            max_list_pages: 100,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            first_wait: Duration::from_secs(25),
        }
    }
}

/// The live MCP servers. Cheap to clone (shared).
#[derive(Clone)]
pub struct McpHub {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").finish_non_exhaustive()
    }
}

type Hook = Arc<dyn Fn() + Send + Sync>;

struct Inner {
    servers: Mutex<BTreeMap<String, Arc<Server>>>,
    http: reqwest::Client,
    egress: EgressPolicy,
    exec: ExecContext,
    settings: HubSettings,
    on_change: Mutex<Option<Hook>>,
}

impl Inner {
    fn tools_changed(&self) {
        let hook = self
            .on_change
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            hook();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for server in self
            .servers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
        {
            server.stop.cancel();
        }
    }
}

/// The live connection calls use, and the token a call cancels when it finds the transport
/// broken (one per connection, so a late report cannot end the next connection).
#[derive(Clone)]
struct Conn {
    peer: Peer<RoleClient>,
    broken: CancellationToken,
}

/// One server: its spec, its live connection (if any), what it listed last, and its state.
struct Server {
    spec: McpServerSpec,
    state: Mutex<State>,
    conn: Mutex<Option<Conn>>,
    tools: Mutex<Option<Vec<DiscoveredTool>>>,
    /// Cancelled when the server is removed or replaced (or the hub dropped).
    stop: CancellationToken,
    /// `true` once the first connection attempt has ended (either way).
    first_done: watch::Sender<bool>,
    /// Masks the server's configured header and env values in errors shown.
    redactor: Redactor,
}

#[derive(Debug, Default, Clone)]
struct State {
    connected: bool,
    protocol_version: Option<String>,
    failing_since_ms: Option<u64>,
    last_error: Option<String>,
    /// Connections made after the first.
    restarts: u64,
    connects: u64,
    /// When the supervisor tries again (while down).
    next_attempt: Option<Instant>,
}

/// A server's state as `/readyz` and `/v1/tools` show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// `connected`, `connecting` (before the first answer) or `failing`.
    pub state: &'static str,
    /// The negotiated protocol revision (`2026-07-28`, `2025-11-25`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// Unix milliseconds since when it has been failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<u64>,
    /// The last error, with the server's secrets masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Reconnections after the first connection.
    pub restarts: u64,
    /// Tools it listed last (before `include`/`exclude`).
    pub tools: usize,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl McpHub {
    /// A hub whose HTTP servers are reached with `http` (the executor's egress-guarded client;
    /// `egress` checks IP-literal URLs the resolver never sees) and whose stdio servers are
    /// spawned in `exec` (shim, reaper).
    pub fn new(http: reqwest::Client, egress: EgressPolicy, exec: ExecContext, settings: HubSettings) -> Self {
        McpHub {
            inner: Arc::new(Inner {
                servers: Mutex::new(BTreeMap::new()),
                http,
                egress,
                exec,
                settings,
                on_change: Mutex::new(None),
            }),
        }
    }

    /// The hub of a server config: its HTTP client settings and egress policy; stdio servers
    /// spawned in `exec`.
    pub fn from_config(config: &crate::config::ServerConfig, exec: ExecContext) -> Result<Self, BackendError> {
        Self::from_config_with(config, exec, HubSettings::default())
    }

    /// [`McpHub::from_config`] with other settings (tests shorten the backoff).
    pub fn from_config_with(
        config: &crate::config::ServerConfig,
        exec: ExecContext,
        settings: HubSettings,
    ) -> Result<Self, BackendError> {
        let egress = EgressPolicy::from_config(&config.egress);
        let http = crate::backend::http::HttpBackend::with_egress(&config.http_client, egress.clone())?;
        Ok(Self::new(http.client(), egress, exec, settings))
    }

    /// Called whenever a server's tool list may have changed outside a reload (its
    /// `list_changed` notification, a reconnect that listed something else).
    pub fn on_tools_changed(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self
            .inner
            .on_change
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(hook));
    }

    /// The caller the executor's backends use for MCP tools.
    pub fn caller(&self) -> Arc<dyn McpCaller> {
        Arc::new(self.clone())
    }

    /// Makes the live servers match `specs` (see the module documentation) and lists every
    /// connected server's tools again. Returns what each server listed (its last good list
    /// when it cannot answer now). Waits for a new server's first attempt at most
    /// [`HubSettings::first_wait`].
    pub async fn sync(&self, specs: &[McpServerSpec]) -> McpDiscovery {
        let mut fresh = Vec::new();
        let mut kept = Vec::new();
        {
            let mut servers = self
                .inner
                .servers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let wanted: HashMap<&str, &McpServerSpec> = specs.iter().map(|s| (s.name.as_str(), s)).collect();
            servers.retain(|name, server| {
                let keep = wanted.get(name.as_str()).is_some_and(|s| **s == server.spec);
                if !keep {
                    server.stop.cancel();
                }
                keep
            });
            for spec in specs {
                match servers.get(&spec.name) {
                    Some(server) => kept.push(Arc::clone(server)),
                    None => {
                        let server = Server::start(spec.clone(), Arc::downgrade(&self.inner));
                        servers.insert(spec.name.clone(), Arc::clone(&server));
                        fresh.push(server);
                    }
                }
            }
        }
        let wait = self.inner.settings.first_wait;
        let settings = self.inner.settings.clone();
        let fresh_waits = fresh.iter().map(|s| {
            let mut rx = s.first_done.subscribe();
            async move {
                let _ = tokio::time::timeout(wait, rx.wait_for(|done| *done)).await;
            }
        });
        // Kept servers are listed again now (a reload is also "list again").
        let relists = kept.iter().map(|s| {
            let s = Arc::clone(s);
            let settings = settings.clone();
            async move {
                let peer = s.peer();
                if let Some(peer) = peer {
                    match list_tools(&peer, &settings).await {
                        Ok(tools) => {
                            s.set_tools(tools);
                        }
                        Err(e) => s.note_error(&e),
                    }
                }
            }
        });
        futures_util::future::join(
            futures_util::future::join_all(fresh_waits),
            futures_util::future::join_all(relists),
        )
        .await;
        self.discovery()
    }

    /// What every server listed last.
    pub fn discovery(&self) -> McpDiscovery {
        let servers = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        servers
            .iter()
            .filter_map(|(name, s)| {
                let tools = s
                    .tools
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()?;
                Some((name.clone(), tools))
            })
            .collect()
    }

    /// Every server's state, by name.
    pub fn status(&self) -> Vec<ServerStatus> {
        let servers = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        servers.values().map(|s| s.status()).collect()
    }

    /// Stops every server (children TERMed, then KILLed after their grace) and waits for their
    /// supervisors a bounded time.
    pub async fn shut_down(&self) {
        let servers: Vec<Arc<Server>> = {
            let mut map = self
                .inner
                .servers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::mem::take(&mut *map).into_values().collect()
        };
        for s in &servers {
            s.stop.cancel();
        }
        let grace = servers.iter().map(|s| s.spec.kill_grace).max().unwrap_or_default();
        // The supervisors drop their connections and children on cancel; give them the grace.
        let deadline = Instant::now() + grace + Duration::from_secs(3);
        for s in &servers {
            while s.conn.lock().map(|c| c.is_some()).unwrap_or(false) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    async fn call_tool(&self, spec: &McpSpec, attempt: &Attempt<'_>) -> Result<Output, BackendError> {
        let server = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&spec.server)
            .cloned();
        let Some(server) = server else {
            return Err(BackendError::ServerDown {
                message: format!("MCP server `{}` is not configured any more", spec.server),
                retry_after: None,
            });
        };
        let Some(Conn { peer, broken }) = server.conn() else {
            let state = server.state();
            let retry_after = state.next_attempt.map(|t| t.saturating_duration_since(Instant::now()));
            let why = state.last_error.unwrap_or_else(|| "it is starting".to_owned());
            return Err(BackendError::ServerDown {
                message: format!("MCP server `{}` is not connected ({why})", spec.server),
                retry_after,
            });
        };
        let mut params = CallToolRequestParams::new(spec.tool.clone());
        params.arguments = Some(attempt.arguments.clone());
        // Dropping the request future (timeout, cancelled call) sends `notifications/cancelled`
        // on stdio and closes the request's stream on HTTP.
        match tokio::time::timeout(attempt.timeout, peer.call_tool(params)).await {
            Err(_) => Err(BackendError::Timeout {
                timeout: attempt.timeout,
                sent: true,
                signal: None,
            }),
            Ok(Ok(result)) => {
                let value = serde_json::to_value(&result)
                    .map_err(|e| BackendError::InvalidOutput(format!("the MCP result cannot be read: {e}")))?;
                result::map_result(value, attempt.policy.max_read_bytes)
            }
            Ok(Err(e)) => Err(server.call_error(e, &broken)),
        }
    }
}

impl McpCaller for McpHub {
    fn call<'a>(&'a self, spec: &'a McpSpec, attempt: &'a Attempt<'a>) -> McpFuture<'a> {
        Box::pin(self.call_tool(spec, attempt))
    }
}

impl Server {
    fn start(spec: McpServerSpec, hub: Weak<Inner>) -> Arc<Server> {
        let secrets: Vec<String> = match &spec.transport {
            McpTransport::Http { headers, url } => {
                let mut v: Vec<String> = headers.iter().map(|(_, v)| v.clone()).collect();
                // Credentials in a URL (`user:pass@`, `?key=`) are secrets too.
                if let Ok(u) = reqwest::Url::parse(url) {
                    v.extend(u.password().map(str::to_owned));
                    v.extend(u.query_pairs().map(|(_, v)| v.into_owned()));
                }
                v
            }
            McpTransport::Stdio { env, .. } => env.iter().map(|(_, v)| v.clone()).collect(),
        };
        let (first_done, _) = watch::channel(false);
        let server = Arc::new(Server {
            redactor: Redactor::new(&secrets),
            spec,
            state: Mutex::new(State::default()),
            conn: Mutex::new(None),
            tools: Mutex::new(None),
            stop: CancellationToken::new(),
            first_done,
        });
        tokio::spawn(supervise(Arc::clone(&server), hub));
        server
    }

    fn peer(&self) -> Option<Peer<RoleClient>> {
        self.conn().map(|c| c.peer)
    }

    fn conn(&self) -> Option<Conn> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn state(&self) -> State {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn status(&self) -> ServerStatus {
        let s = self.state();
        let tools = self
            .tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map_or(0, Vec::len);
        ServerStatus {
            name: self.spec.name.clone(),
            transport: match self.spec.transport {
                McpTransport::Stdio { .. } => "stdio",
                McpTransport::Http { .. } => "http",
            },
            state: if s.connected {
                "connected"
            } else if s.connects == 0 && s.last_error.is_none() {
                "connecting"
            } else {
                "failing"
            },
            protocol_version: s.protocol_version,
            failing_since_ms: s.failing_since_ms,
            last_error: s.last_error,
            restarts: s.restarts,
            tools,
        }
    }

    /// Stores a listing; `true` when it differs from the last one.
    fn set_tools(&self, tools: Vec<DiscoveredTool>) -> bool {
        let mut slot = self.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = slot.as_ref() != Some(&tools);
        *slot = Some(tools);
        changed
    }

    fn redact(&self, text: &str) -> String {
        self.redactor.redact(text).into_owned()
    }

    /// Records an error without changing whether the server is connected.
    fn note_error(&self, error: &str) {
        let error = self.redact(error);
        tracing::warn!(server = %self.spec.name, %error, "MCP server error.");
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.last_error = Some(error);
    }

    fn set_down(&self, error: &str, next_attempt: Option<Instant>) {
        let error = self.redact(error);
        tracing::warn!(server = %self.spec.name, %error, "MCP server is down.");
        *self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.connected = false;
        st.failing_since_ms.get_or_insert_with(now_ms);
        st.last_error = Some(error);
        st.next_attempt = next_attempt;
    }

    /// The error of a failed request; a broken transport also makes the supervisor reconnect.
    fn call_error(&self, e: ServiceError, broken: &CancellationToken) -> BackendError {
        match e {
            ServiceError::McpError(data) => {
                let message = self.redact(&data.message);
                if data.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                    BackendError::InvalidArgument(format!("the MCP server refused the arguments: {message}"))
                } else {
                    BackendError::ToolReported(format!("the MCP server answered with an error: {message}"))
                }
            }
            ServiceError::Timeout { timeout } => BackendError::Timeout {
                timeout,
                sent: true,
                signal: None,
            },
            ServiceError::UnexpectedResponse | ServiceError::InputRequiredRoundsExceeded { .. } => {
                BackendError::InvalidOutput(
                    "the MCP server answered with something other than a tool result (tasks and input requests are not supported)"
                        .to_owned(),
                )
            }
            other => {
                let message = self.redact(&other.to_string());
                broken.cancel();
                BackendError::Disconnected(message)
            }
        }
    }
}

/// The client side of the connection: toolwire's name, and the tool-list hook.
#[derive(Clone)]
struct Handler {
    hub: Weak<Inner>,
    server: String,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolwire", env!("CARGO_PKG_VERSION")),
        )
    }

    fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) -> impl Future<Output = ()> + Send + '_ {
        // The hook only signals (a bounded channel of one), so a flood of these costs nothing
        // but a debounced reload.
        tracing::debug!(server = %self.server, "MCP tools/list_changed.");
        if let Some(hub) = self.hub.upgrade() {
            hub.tools_changed();
        }
        std::future::ready(())
    }
}

/// A live connection: the running client and, for stdio, the child.
struct Live {
    running: RunningService<RoleClient, Handler>,
    child: Option<ServerChild>,
}

/// Connects, lists, waits; reconnects with backoff. Ends when the server is stopped.
async fn supervise(server: Arc<Server>, hub: Weak<Inner>) {
    let Some(settings) = hub.upgrade().map(|h| h.settings.clone()) else {
        return;
    };
    let mut backoff = settings.backoff_initial;
    loop {
        if server.stop.is_cancelled() {
            break;
        }
        let attempt = tokio::select! {
            biased;
            () = server.stop.cancelled() => break,
            r = tokio::time::timeout(settings.connect_timeout, connect(&server, &hub)) => r,
        };
        match attempt {
            Ok(Ok(live)) => {
                let peer = live.running.peer().clone();
                let broken = CancellationToken::new();
                let version = peer.peer_info().map(|i| i.protocol_version.to_string());
                let listed = list_tools(&peer, &settings).await;
                {
                    let mut st = server.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    st.connected = true;
                    st.protocol_version = version;
                    st.failing_since_ms = None;
                    st.last_error = None;
                    st.next_attempt = None;
                    if st.connects > 0 {
                        st.restarts += 1;
                    }
                    st.connects += 1;
                }
                *server.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Conn {
                    peer,
                    broken: broken.clone(),
                });
                tracing::info!(server = %server.spec.name, "MCP server connected.");
                match listed {
                    Ok(tools) => {
                        // A new or different list (a server that came up after the load, or
                        // came back with other tools) is swapped in by a reload. Right after a
                        // load this is one reload more that finds nothing changed.
                        if server.set_tools(tools)
                            && let Some(h) = hub.upgrade()
                        {
                            h.tools_changed();
                        }
                    }
                    Err(e) => server.note_error(&e),
                }
                server.first_done.send_replace(true);
                backoff = settings.backoff_initial;
                let _listening = listen_for_changes(&live, &hub);
                let why = wait_closed(live, &server, &broken).await;

                if server.stop.is_cancelled() {
                    *server.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                    break;
                }
                server.set_down(&why, Some(Instant::now() + backoff));
            }
            Ok(Err(e)) => server.set_down(&e, Some(Instant::now() + backoff)),
            Err(_) => server.set_down(
                &format!("no answer to the MCP handshake within {:?}", settings.connect_timeout),
                Some(Instant::now() + backoff),
            ),
        }
        server.first_done.send_replace(true);
        tokio::select! {
            () = server.stop.cancelled() => break,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(settings.backoff_max);
    }
    *server.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

/// On a modern (2026-07-28) connection list changes come only on a `subscriptions/listen`
/// stream the client opens: open one when the server offers it, and call the hook on every
/// `tools/list_changed` it delivers. The task ends with the connection (aborted on drop).
fn listen_for_changes(live: &Live, hub: &Weak<Inner>) -> Option<AbortOnDrop> {
    let peer = live.running.peer().clone();
    let info = peer.peer_info()?;
    let offers = info.capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true);
    if info.protocol_version.has_initialize() || !offers {
        return None;
    }
    let hub = Weak::clone(hub);
    Some(AbortOnDrop(tokio::spawn(async move {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        let mut sub = match peer.listen(filter).await {
            Ok(sub) => sub,
            Err(e) => {
                tracing::debug!(error = %e, "MCP subscriptions/listen refused.");
                return;
            }
        };
        while let Ok(Some(n)) = sub.next().await {
            if matches!(n, ServerNotification::ToolListChangedNotification(_))
                && let Some(h) = hub.upgrade()
            {
                h.tools_changed();
            }
        }
    })))
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits until the connection ends; returns why. The child (if any) is stopped and reaped.
async fn wait_closed(live: Live, server: &Server, broken: &CancellationToken) -> String {
    let Live { running, mut child } = live;
    let reason = {
        let exited = async {
            match child.as_mut() {
                Some(c) => c.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = running.waiting() => "the connection closed".to_owned(),
            r = exited => format!("the server process {}", r.unwrap_or_else(|| "ended".to_owned())),
            () = server.stop.cancelled() => "stopped".to_owned(),
            () = broken.cancelled() => "a request found the transport broken".to_owned(),
        }
    };
    // `running` is dropped by now, which cancels the client; then the child goes.
    match child {
        Some(child) => {
            let (status, stderr) = end_child(child).await;
            let reason = match status {
                Some(s) if reason == "the connection closed" => format!("the server process {s}"),
                _ => reason,
            };
            reason + &stderr
        }
        None => reason,
    }
}

/// Ends the process of a server that failed or went away, for the message that explains it:
/// waits briefly for its exit status (it may be exiting on its own), keeps the end of its
/// stderr, then TERM, grace, KILL and reap. Returns the status (`exited with code 1`) and
/// `"; its error output ends with: …"` (empty when it wrote nothing).
async fn end_child(mut child: ServerChild) -> (Option<String>, String) {
    let status = tokio::time::timeout(Duration::from_millis(200), child.wait())
        .await
        .ok()
        .flatten();
    let tail = child.stderr_tail();
    child.shut_down().await;
    let stderr = if tail.is_empty() {
        String::new()
    } else {
        format!("; its error output ends with: {}", crate::backend::tail_cut(&tail, 512))
    };
    (status, stderr)
}

fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Spawns or reaches the server and runs the handshake.
async fn connect(server: &Server, hub: &Weak<Inner>) -> Result<Live, String> {
    let Some(inner) = hub.upgrade() else {
        return Err("the hub is gone".to_owned());
    };
    let handler = Handler {
        hub: Weak::clone(hub),
        server: server.spec.name.clone(),
    };
    let cap = server.spec.max_message_bytes;
    match &server.spec.transport {
        McpTransport::Stdio {
            program,
            args,
            env,
            cwd,
        } => {
            let mut child = spawn_server(
                &inner.exec,
                &ServerCommand {
                    program,
                    args,
                    env,
                    cwd: cwd.as_deref(),
                    kill_grace: server.spec.kill_grace,
                },
            )
            .map_err(|e| e.to_string())?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                child.shut_down().await;
                return Err("the server's pipes could not be opened".to_owned());
            };
            drop(inner);
            let transport = AsyncRwTransport::<RoleClient, _, _>::new_client(stdout, stdin).with_max_line_length(cap);
            match handler.serve_with_lifecycle(transport, lifecycle()).await {
                Ok(running) => Ok(Live {
                    running,
                    child: Some(child),
                }),
                Err(e) => {
                    let (status, stderr) = end_child(child).await;
                    let mut msg = format!("the MCP handshake failed: {e}");
                    if let Some(s) = status {
                        msg.push_str(&format!("; the server process {s}"));
                    }
                    Err(msg + &stderr)
                }
            }
        }
        McpTransport::Http { url, headers } => {
            if let Ok(u) = reqwest::Url::parse(url) {
                let ip = u
                    .host_str()
                    .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
                    .and_then(|h| h.parse::<std::net::IpAddr>().ok());
                if let Some(ip) = ip
                    && !inner.egress.permits(ip)
                {
                    return Err(format!("the egress policy blocks {ip}"));
                }
            }
            let mut custom = HashMap::new();
            for (k, v) in headers {
                let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| format!("`{k}` is not a valid header name"))?;
                let value = reqwest::header::HeaderValue::from_str(v)
                    .map_err(|_| format!("the value of header `{k}` is not a valid header value"))?;
                custom.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(custom)
                .max_json_response_size(cap)
                .max_sse_event_size(cap)
                .reinit_on_expired_session(true);
            let transport = StreamableHttpClientTransport::with_client(inner.http.clone(), config);
            drop(inner);
            handler
                .serve_with_lifecycle(transport, lifecycle())
                .await
                .map(|running| Live { running, child: None })
                .map_err(|e| format!("the MCP handshake failed: {e}"))
        }
    }
}

/// Every page of `tools/list`, bounded in pages, tools and time, copied into toolwire's types.
async fn list_tools(peer: &Peer<RoleClient>, settings: &HubSettings) -> Result<Vec<DiscoveredTool>, String> {
    let work = async {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..settings.max_list_pages {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let page = peer
                .list_tools(params)
                .await
                .map_err(|e| format!("tools/list failed: {e}"))?;
            for tool in &page.tools {
                if tools.len() >= settings.max_tools {
                    return Err(format!("the server lists more than {} tools", settings.max_tools));
                }
                let v = serde_json::to_value(tool).map_err(|e| format!("a listed tool cannot be read: {e}"))?;
                let Some(name) = v.get("name").and_then(Value::as_str) else {
                    continue;
                };
                tools.push(DiscoveredTool {
                    name: name.to_owned(),
                    description: v.get("description").and_then(Value::as_str).map(str::to_owned),
                    input_schema: v
                        .get("inputSchema")
                        .cloned()
                        .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                });
            }
            match page.next_cursor {
                Some(c) if !c.is_empty() => cursor = Some(c),
                _ => return Ok(tools),
            }
        }
        Err(format!(
            "the server's tool list has more than {} pages",
            settings.max_list_pages
        ))
    };
    tokio::time::timeout(settings.list_timeout, work)
        .await
        .unwrap_or_else(|_| Err(format!("tools/list did not finish within {:?}", settings.list_timeout)))
}

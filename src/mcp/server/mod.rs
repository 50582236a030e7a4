//! toolwire's tools served to MCP clients (`docs/mcp.md`): `POST /mcp` (Streamable
//! HTTP, mounted by `api`) and `toolwire mcp` (stdio).
//!
//! One handler serves both transports and both protocol eras: `tools/list` reads the live
//! registry on every request (a hot reload shows at once), `tools/call` runs the same
//! [`turn::call_tool`] as `POST /v1/tools/{name}/call`, so validation, injection, replay,
//! limits, breakers, redaction and metrics are the executor's. The HTTP side is stateless
//! (no session store): any replica, or a restarted one, answers any request.

mod content;

use std::sync::Arc;

use arc_swap::ArcSwap;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool as McpTool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::server::McpServerConfig;
use crate::executor::Executor;
use crate::registry::Registry;
use crate::tool::Tool;
use crate::turn;

/// `_meta` key of `tools/call` that carries the request state (an object): what `state` is to
/// `POST /v1/execute`. Injected parameters are filled from it; the model never sees it.
pub const STATE_META_KEY: &str = "toolwire/state";

/// `_meta` key of `tools/call` that names the call (a string, like a provider's call id): a
/// repeat with the same id, tool, arguments and principal is answered from the replay store
/// instead of running again. Without it every call runs.
pub const CALL_ID_META_KEY: &str = "toolwire/call_id";

/// `_meta` key of a failed result: `{kind, retryable}` as in `/v1/execute`'s `error`.
pub const ERROR_META_KEY: &str = "toolwire/error";

/// `_meta` key of a result answered from the replay store (`true`): nothing ran again.
pub const REPLAYED_META_KEY: &str = "toolwire/replayed";

/// Longest `toolwire/call_id` accepted, in bytes (it becomes part of a replay key).
const MAX_CALL_ID_BYTES: usize = 256;

/// Who is calling, put into the HTTP request's extensions by the API's auth guard (the
/// principal of the matched token); absent (stdio) means [`turn::ANONYMOUS`]. Replay results
/// are scoped to it.
#[derive(Debug, Clone)]
pub struct Caller(pub Arc<str>);

/// What the MCP handler runs with: the same registry, executor and cancellation as the HTTP
/// API.
pub struct Engine {
    /// The live tool set; loaded on every request.
    pub registry: Arc<ArcSwap<Registry>>,
    pub executor: Arc<Executor>,
    /// The server's cancellation: calls still running when the drain budget is spent end.
    pub cancel: CancellationToken,
    /// Calls running at once over stdio (HTTP sheds load per request before it gets here):
    /// past it, a call fails at once with `rejected` instead of queueing.
    pub slots: Option<Arc<Semaphore>>,
    /// State used when a call carries none (`toolwire mcp --state`).
    pub default_state: Value,
}

/// The MCP server handler. Cheap to clone: the stateless HTTP transport builds one per
/// request.
#[derive(Clone)]
pub struct ToolServer {
    engine: Arc<Engine>,
}

impl ToolServer {
    pub fn new(engine: Arc<Engine>) -> Self {
        ToolServer { engine }
    }
}

/// A tool as MCP lists it: its model-visible JSON Schema (injected parameters are already
/// left out at load, `$defs` and 2020-12 keywords kept as declared) as `inputSchema`.
fn mcp_tool(t: &Tool) -> McpTool {
    let mut schema = match &t.parameters {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    // MCP requires an object root; a declaration without `type` means the same thing.
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    let mut tool = McpTool::new(t.name.clone(), t.description.clone(), Arc::new(schema));
    if t.policy.idempotent {
        let mut hints = ToolAnnotations::new();
        hints.idempotent_hint = Some(true);
        tool = tool.with_annotations(hints);
    }
    tool
}

/// A client-supplied name, safe to quote in an error: escaped and cut.
fn quoted(name: &str) -> String {
    let mut s: String = name.escape_debug().take(80).collect();
    if name.len() > 80 {
        s.push('…');
    }
    s
}

/// Is the request on the stateless 2026-07-28 revision (or later)? Then `structuredContent`
/// may be any JSON value; before, only an object.
fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v.as_str() >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str())
}

/// The principal of a request: the HTTP caller put there by the auth guard, else anonymous.
fn principal(ctx: &RequestContext<RoleServer>) -> Arc<str> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .map_or_else(|| Arc::from(turn::ANONYMOUS), |c| Arc::clone(&c.0))
}

/// Reads `toolwire/state` and `toolwire/call_id` from the call's `_meta`.
fn meta_fields(
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Result<(Option<Value>, Option<String>), ErrorData> {
    let get = |key: &str| -> Option<Value> {
        request
            .meta
            .as_ref()
            .and_then(|m| m.get(key).cloned())
            .or_else(|| ctx.meta.get(key).cloned())
    };
    let state = match get(STATE_META_KEY) {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v),
        Some(_) => {
            return Err(ErrorData::invalid_params(
                format!("`_meta.{STATE_META_KEY}` must be a JSON object"),
                None,
            ));
        }
    };
    let call_id = match get(CALL_ID_META_KEY) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_CALL_ID_BYTES => Some(s),
        Some(_) => {
            return Err(ErrorData::invalid_params(
                format!("`_meta.{CALL_ID_META_KEY}` must be a non-empty string of at most {MAX_CALL_ID_BYTES} bytes"),
                None,
            ));
        }
    };
    Ok((state, call_id))
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolwire", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools served by toolwire. Hidden context for the tools goes in the `_meta` key `toolwire/state` of tools/call.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let registry = self.engine.registry.load();
        Ok(ListToolsResult::with_all_items(
            registry.tools().iter().map(|t| mcp_tool(t)).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<McpTool> {
        self.engine.registry.load().get(name).map(|t| mcp_tool(t))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // One snapshot for the whole call: a reload meanwhile does not change the tool.
        let registry = self.engine.registry.load_full();
        let name: &str = &request.name;
        if registry.get(name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{}`; call tools/list for the tools served", quoted(name)),
                None,
            ));
        }
        let (state, call_id) = meta_fields(&request, &ctx)?;
        let state = state.unwrap_or_else(|| self.engine.default_state.clone());
        let _slot = match &self.engine.slots {
            None => None,
            Some(slots) => match Arc::clone(slots).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    crate::telemetry::metrics::rejected("shed");
                    return Ok(content::overloaded().into());
                }
            },
        };
        let principal = principal(&ctx);
        // A client cancelling the request (`notifications/cancelled`, which the SDK turns into
        // the request's token) ends the call the way a server shutdown does: the backend
        // request dropped, process groups killed. The watcher ends with the call (drop guard).
        let cancel = self.engine.cancel.child_token();
        let _stop_watch = cancel.clone().drop_guard();
        {
            let (request_ct, cancel) = (ctx.ct.clone(), cancel.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = request_ct.cancelled() => cancel.cancel(),
                    () = cancel.cancelled() => {}
                }
            });
        }
        let tctx = turn::Context {
            executor: &self.engine.executor,
            registry: &registry,
            principal: &principal,
            cancel: &cancel,
        };
        let arguments = request.arguments.map(Value::Object);
        let result = turn::call_tool_with_id(tctx, call_id, name, arguments.as_ref(), &state).await;
        Ok(content::to_mcp(&result, is_modern(&ctx)).into())
    }
}

/// Builds the `/mcp` route: rmcp's Streamable HTTP service, stateless (no session store, so
/// restart-safe and replica-safe) with JSON answers, for clients of both eras. `Host` and
/// `Origin` are checked as configured; the body limit is the API's.
pub fn http_route<S: Clone + Send + Sync + 'static>(
    engine: Arc<Engine>,
    config: &McpServerConfig,
    body_limit: usize,
) -> axum::routing::MethodRouter<S> {
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_sse_retry(None)
        .with_max_request_body_bytes(body_limit)
        .with_cancellation_token(engine.cancel.child_token())
        .with_allowed_origins(config.allowed_origins.iter().cloned())
        .enforce_origin_validation();
    http = if config.allowed_hosts.iter().any(|h| h == "*") {
        http.disable_allowed_hosts()
    } else {
        http.with_allowed_hosts(config.allowed_hosts.iter().cloned())
    };
    let server = ToolServer::new(engine);
    let service: StreamableHttpService<ToolServer, NeverSessionManager> = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        http,
    );
    axum::routing::any_service(service)
}

/// Why serving over stdio stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("the MCP session over stdio could not start: {0}")]
    Start(String),
    #[error("the MCP session over stdio ended abnormally: {0}")]
    Join(String),
}

/// Serves the tools over stdin/stdout until the client closes stdin or `shutdown` resolves.
/// Messages longer than `max_line_bytes` are dropped (bounded memory). Nothing else may write
/// to stdout meanwhile: logs go to stderr.
pub async fn serve_stdio(
    engine: Arc<Engine>,
    max_line_bytes: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StdioError> {
    let (stdin, stdout) = rmcp::transport::io::stdio();
    let transport =
        rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout).with_max_line_length(max_line_bytes);
    let cancel = engine.cancel.clone();
    let running = ToolServer::new(engine)
        .serve(transport)
        .await
        .map_err(|e| StdioError::Start(e.to_string()))?;
    let stop = running.cancellation_token();
    tokio::spawn(async move {
        shutdown.await;
        cancel.cancel();
        stop.cancel();
    });
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| StdioError::Join(e.to_string()))
}

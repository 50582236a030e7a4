//! The HTTP API (`docs/api.md`): router, handlers and the request-error shape.

pub mod error;
pub mod extract;
pub mod guard;
mod handlers;
pub mod idempotency;
mod mcp;
mod observe;
pub mod stream;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::middleware;
use axum::routing::{get, post};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use crate::executor::Executor;
use crate::registry::Registry;

pub use error::ApiError;

/// Shared state of every handler: one `Arc`, so the per-request clones (one per middleware
/// layer and handler that extracts `State`) are one reference count each, not one per field.
/// Fields are read through `Deref` (`state.config`, `state.executor`, …).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    /// The active tool set. Swapped whole on reload; a request keeps the snapshot it started with.
    pub registry: Arc<ArcSwap<Registry>>,
    pub config: Arc<ServerConfig>,
    pub executor: Arc<Executor>,
    /// Cancelled when the drain budget of a shutdown is spent: running calls end as `rejected`.
    pub cancel: CancellationToken,
    /// Set once shutdown starts: `/readyz` answers 503 so load balancers stop sending work.
    pub draining: Arc<AtomicBool>,
    /// Requests being worked on; when none is free, new work is shed with 503.
    pub work_slots: Arc<Semaphore>,
    pub tokens: Arc<guard::Tokens>,
    /// What reloads did (`/readyz`, `/v1/tools`); the same status the reloader writes.
    pub reload: crate::reload::SharedStatus,
    /// Reloads the tool set (file watch, SIGHUP); holds the same `registry`.
    pub reloader: crate::reload::Reloader,
    /// Recent `Idempotency-Key`s of execute requests and their answers.
    pub request_keys: idempotency::RequestKeys,
    /// The MCP servers whose tools are in the registry (`docs/mcp.md`), if any.
    pub mcp: Option<crate::mcp::McpHub>,
}

impl AppState {
    /// State around a loaded registry without MCP servers.
    pub fn new(config: ServerConfig, registry: Registry, executor: Executor) -> Self {
        Self::with_mcp(config, registry, executor, None)
    }

    /// State around a registry built with the MCP hub `hub`: reloads list its servers again,
    /// and `/readyz` and `/v1/tools` show their state.
    pub fn with_mcp(
        config: ServerConfig,
        registry: Registry,
        executor: Executor,
        hub: Option<crate::mcp::McpHub>,
    ) -> Self {
        let _ = crate::telemetry::metrics::handle();
        crate::telemetry::metrics::reload("initial", registry.len());
        let mut reloader = crate::reload::Reloader::new(registry, &config);
        reloader.mcp = hub.clone();
        AppState(Arc::new(Shared {
            registry: Arc::clone(&reloader.registry),
            reload: Arc::clone(&reloader.status),
            reloader,
            work_slots: Arc::new(Semaphore::new(config.limits.concurrent_requests)),
            tokens: Arc::new(guard::Tokens::new(&config.auth.tokens)),
            request_keys: executor.stores().open(crate::store::Namespace::Requests),
            config: Arc::new(config),
            executor: Arc::new(executor),
            cancel: CancellationToken::new(),
            draining: Arc::new(AtomicBool::new(false)),
            mcp: hub,
        }))
    }
}

/// Every route the API serves, as (method, path). `openapi.yaml` must describe exactly these;
/// a test keeps the two in step.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/v1/tools"),
    ("GET", "/v1/schemas"),
    ("POST", "/v1/execute"),
    ("POST", "/v1/completions/assemble"),
    ("POST", "/v1/tools/{name}/call"),
    ("GET", "/metrics"),
    ("POST", "/mcp"),
];

/// The router with every route and the error fallbacks.
pub fn router(state: AppState) -> Router {
    let body_limit = state.config.limits.body_bytes;
    // Work routes: shed load first (cheapest rejection), then authenticate.
    let work = Router::new()
        .route("/v1/execute", post(handlers::execute))
        .route("/v1/completions/assemble", post(handlers::assemble))
        .route("/v1/tools/{name}/call", post(handlers::call_tool))
        // Authenticate, read the body within its timeout, then take a slot (one middleware).
        .layer(middleware::from_fn_with_state(state.clone(), guard::work));
    let read = Router::new()
        .route("/v1/tools", get(handlers::list_tools))
        .route("/v1/schemas", get(handlers::schemas))
        .layer(middleware::from_fn_with_state(state.clone(), guard::require_token));
    let mut metrics = Router::new().route("/metrics", get(handlers::metrics));
    if state.config.auth.protect_metrics {
        metrics = metrics.layer(middleware::from_fn_with_state(state.clone(), guard::require_token));
    }
    let mut app = Router::new()
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .merge(work)
        .merge(read)
        .merge(metrics);
    if state.config.mcp_server.enabled {
        app = app.merge(mcp_routes(&state));
    }
    app.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(observe::observe))
        .with_state(state)
}

/// `/mcp` (`docs/mcp.md`): the MCP handler over the live registry and the same executor,
/// behind the work routes' guards. Outermost first: authenticate, read the body within its
/// limits, check it is one JSON-RPC message, then take a work slot.
fn mcp_routes(state: &AppState) -> Router<AppState> {
    let engine = Arc::new(crate::mcp::server::Engine {
        registry: Arc::clone(&state.registry),
        executor: Arc::clone(&state.executor),
        cancel: state.cancel.clone(),
        slots: None,
        default_state: serde_json::Value::Null,
    });
    let route = crate::mcp::server::http_route(engine, &state.config.mcp_server, state.config.limits.body_bytes);
    Router::new()
        .route("/mcp", route)
        .layer(middleware::from_fn_with_state(state.clone(), guard::shed_load))
        .layer(middleware::from_fn(mcp::check_message))
        .layer(middleware::from_fn_with_state(state.clone(), guard::read_body))
        .layer(middleware::from_fn_with_state(state.clone(), guard::require_token))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(uri.path().to_owned())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

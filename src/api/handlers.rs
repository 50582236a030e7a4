//! Thin handlers: read the state, call the library, shape the JSON.

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::ApiJson;
use super::guard::Principal;
use super::idempotency;
use super::{ApiError, AppState};
use crate::call::ToolResult;
use crate::provider::catalog::{self, SchemaWarning, ToolFilter};
use crate::provider::{DeclareOptions, Provider};
use crate::tool::Tool;
use crate::turn::{self, ExecuteError, ExecuteRequest};

/// `GET /healthz`: the process is alive.
pub(super) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: a tool set is loaded and requests can be served (503 while draining).
/// Unauthenticated, so it shows counts only: reload errors quote files and keys, and are on
/// the authenticated `GET /v1/tools`.
pub(super) async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::NotReady("shutting down".into()));
    }
    let reg = state.registry.load();
    let reload = state
        .reload
        .lock()
        .map(|s| s.summary())
        .unwrap_or_else(|p| p.into_inner().summary());
    // The store's state is shown, but a shared store being down does not make the replica
    // unready: every replica shares it, so all would leave the load balancer at once, while
    // idempotent tools still run and the others fail fast with a retryable error
    // (docs/scale.md#readiness).
    let store = state.executor.stores().health().view();
    let mut body =
        json!({"status": "ready", "version": reg.version, "tools": reg.len(), "reload": reload, "store": store});
    if let Some(hub) = &state.mcp {
        // States only: error messages (which may name hosts and files) stay on `/v1/tools`.
        let servers: Vec<Value> = hub
            .status()
            .into_iter()
            .map(|s| json!({"name": s.name, "state": s.state, "failing_since_ms": s.failing_since_ms}))
            .collect();
        body["mcp"] = Value::Array(servers);
    }
    Ok(Json(body))
}

/// `GET /v1/tools`: every tool with its description, schema, backend kind and limits.
pub(super) async fn list_tools(State(state): State<AppState>) -> Json<Value> {
    let reg = state.registry.load();
    let servers = state.mcp.as_ref().map(crate::mcp::McpHub::status).unwrap_or_default();
    let mut warnings = catalog::schema_warnings(&reg);
    let tools: Vec<Value> = reg
        .tools()
        .iter()
        .map(|t| {
            let mut v = tool_json(t, warnings.remove(&t.name).unwrap_or_default());
            let key = t.backend.breaker_key();
            let view = state
                .executor
                .breaker(&key)
                .unwrap_or(crate::executor::breaker::BreakerView::Closed {
                    consecutive_failures: 0,
                });
            v["breaker"] = json!({"backend": key, "status": view});
            if let crate::tool::BackendSpec::Mcp(m) = &t.backend {
                let state = servers.iter().find(|s| s.name == m.server).map(|s| s.state);
                v["mcp"] = json!({"server": m.server, "tool": m.tool, "state": state});
            }
            v
        })
        .collect();
    let reload = state.reload.lock().map(|s| s.clone()).unwrap_or_default();
    let mut body = json!({"version": reg.version, "reload": reload, "tools": tools});
    if state.mcp.is_some() {
        body["mcp"] = json!(servers);
    }
    Json(body)
}

/// The public view of a tool. Backend URLs, headers, argv and env are left out: they may hold
/// resolved secrets.
fn tool_json(t: &Tool, warnings: Vec<SchemaWarning>) -> Value {
    json!({
        "name": t.name,
        "description": t.description,
        "tags": t.tags,
        "backend": t.backend.kind(),
        "parameters": t.parameters,
        "injected": t.inject.iter().map(|i| &i.key).collect::<Vec<_>>(),
        "policy": t.policy,
        "schema_warnings": warnings,
    })
}

/// Query of `GET /v1/schemas`.
#[derive(Debug, Deserialize)]
pub(super) struct SchemasQuery {
    provider: String,
    #[serde(default)]
    strict: bool,
    /// Comma-separated tags.
    tags: Option<String>,
    /// Comma-separated tool names.
    tools: Option<String>,
    /// Gemini only: `openapi` for the OpenAPI-subset `parameters` form.
    gemini_format: Option<String>,
}

/// `GET /v1/schemas?provider=X[&strict=true][&tags=a,b][&tools=x,y]`: exactly the array for
/// the provider's `tools` request field (Bedrock: `toolConfig.tools`).
pub(super) async fn schemas(
    State(state): State<AppState>,
    query: Result<Query<SchemasQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let provider = Provider::from_name(&q.provider).ok_or_else(|| ApiError::UnknownProvider(q.provider.clone()))?;
    let gemini_openapi = match q.gemini_format.as_deref() {
        None | Some("json_schema") => false,
        Some("openapi") => true,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "gemini_format `{other}` is not `json_schema` or `openapi`"
            )));
        }
    };
    let split = |s: Option<String>| -> Vec<String> {
        s.map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
    };
    let filter = ToolFilter {
        tags: split(q.tags),
        tools: split(q.tools),
    };
    let opts = DeclareOptions {
        strict: q.strict,
        gemini_openapi,
    };
    let reg = state.registry.load();
    let declared = catalog::declarations(&reg, provider, &opts, &filter)
        .map_err(|unknown| ApiError::Unprocessable(format!("unknown tools: {}", unknown.join(", "))))?;
    Ok(Json(Value::Array(declared.tools)))
}

/// `POST /v1/execute`: run every tool call of a raw completion; answer with the results and the
/// provider-native messages to append. With `Accept: text/event-stream` (SSE) or
/// `application/x-ndjson` the answer is a stream of progress events ending with a `response`
/// event that holds exactly the non-streaming body.
pub(super) async fn execute(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    headers: axum::http::HeaderMap,
    ApiJson(req): ApiJson<ExecuteRequest>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse as _;
    let principal = principal.map_or_else(Principal::anonymous, |Extension(p)| p);
    let prepared = turn::prepare(&req, state.config.limits.calls_per_request).map_err(ApiError::from)?;
    // One snapshot for the whole request: a reload meanwhile does not change its tools.
    let registry = state.registry.load_full();
    if let Some(format) = super::stream::wanted(&headers) {
        return Ok(super::stream::respond(
            state,
            registry,
            prepared,
            req,
            format,
            principal.0.to_string(),
        ));
    }
    let ctx = turn::Context {
        executor: &state.executor,
        registry: &registry,
        principal: &principal.0,
        cancel: &state.cancel,
    };
    let Some(key) = headers.get("idempotency-key") else {
        // Boxed: the turn's future (every call's backend request inline) is large, and every
        // layer around this handler would move it again on the way in.
        let resp = Box::pin(turn::run(ctx, prepared, &req)).await;
        return Ok(Json(resp).into_response());
    };
    let key = key.to_str().unwrap_or_default();
    let wait_limit = state.config.limits.request_timeout.0;
    let answer = idempotency::once(&state.request_keys, &principal.0, key, &req, wait_limit, || {
        Box::pin(turn::run(ctx, prepared, &req))
    })
    .await?;
    Ok(match answer {
        idempotency::Answer::Ran(v) => Json(v).into_response(),
        idempotency::Answer::Replayed(bytes) => {
            ([(axum::http::header::CONTENT_TYPE, "application/json")], bytes).into_response()
        }
    })
}

/// Body of `POST /v1/completions/assemble`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AssembleBody {
    provider: Option<String>,
    completion_stream: Value,
}

/// `POST /v1/completions/assemble`: a streamed completion → the non-streamed body the provider
/// would have returned; nothing runs. The body is exactly the assembled completion, so it can
/// be stored or replayed as-is; the provider and the assembly warnings travel in the
/// `Toolwire-Provider` and `Toolwire-Stream-Warning` (one per warning) headers.
pub(super) async fn assemble(ApiJson(body): ApiJson<AssembleBody>) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse as _;
    let named = match &body.provider {
        Some(name) => Some(Provider::from_name(name).ok_or_else(|| ApiError::UnknownProvider(name.clone()))?),
        None => None,
    };
    let (provider, assembled) = turn::assemble_stream(named, &body.completion_stream).map_err(ApiError::from)?;
    let mut resp = Json(assembled.completion).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        "toolwire-provider",
        axum::http::HeaderValue::from_static(provider.as_str()),
    );
    for w in &assembled.warnings {
        if let Ok(v) = axum::http::HeaderValue::from_str(&header_safe(w)) {
            headers.append("toolwire-stream-warning", v);
        }
    }
    Ok(resp)
}

/// A warning as a header value: visible ASCII only (event type names come from the input),
/// at most 300 characters.
fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
        .take(300)
        .collect()
}

/// Body of `POST /v1/tools/{name}/call`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CallBody {
    arguments: Option<Value>,
    #[serde(default)]
    state: Value,
}

/// `POST /v1/tools/{name}/call`: run one tool directly, for non-LLM callers and debugging.
pub(super) async fn call_tool(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<CallBody>,
) -> Result<Json<ToolResult>, ApiError> {
    let registry = state.registry.load_full();
    if registry.get(&name).is_none() {
        return Err(ApiError::UnknownTool(name));
    }
    if !(body.state.is_object() || body.state.is_null()) {
        return Err(ApiError::from(ExecuteError::BadState));
    }
    let principal = principal.map_or_else(Principal::anonymous, |Extension(p)| p);
    let ctx = turn::Context {
        executor: &state.executor,
        registry: &registry,
        principal: &principal.0,
        cancel: &state.cancel,
    };
    let result = turn::call_tool(ctx, &name, body.arguments.as_ref(), &body.state).await;
    Ok(Json(result))
}

/// `GET /metrics`: Prometheus text format.
pub(super) async fn metrics() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::telemetry::metrics::render(),
    )
}

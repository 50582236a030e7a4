//! Thin handlers: read the state, call the library, shape the JSON.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::ApiJson;
use super::{ApiError, AppState};
use crate::call::ToolResult;
use crate::execute::{self, ExecuteError, ExecuteRequest};
use crate::provider::{DeclareOptions, Provider};
use crate::registry::{Registry, ToolFilter};
use crate::tool::Tool;

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
    Ok(Json(
        json!({"status": "ready", "version": reg.version, "tools": reg.len(), "reload": reload}),
    ))
}

/// `GET /v1/tools`: every tool with its description, schema, backend kind and limits.
pub(super) async fn list_tools(State(state): State<AppState>) -> Json<Value> {
    let reg = state.registry.load();
    let tools: Vec<Value> = reg
        .tools()
        .iter()
        .map(|t| {
            let mut v = tool_json(t, &reg);
            let key = t.backend.breaker_key();
            let view = state
                .executor
                .breaker(&key)
                .unwrap_or(crate::executor::breaker::BreakerView::Closed {
                    consecutive_failures: 0,
                });
            v["breaker"] = json!({"backend": key, "status": view});
            v
        })
        .collect();
    let reload = state.reload.lock().map(|s| s.clone()).unwrap_or_default();
    Json(json!({"version": reg.version, "reload": reload, "tools": tools}))
}

/// The public view of a tool. Backend URLs, headers, argv and env are left out: they may hold
/// resolved secrets.
fn tool_json(t: &Tool, reg: &Registry) -> Value {
    let warnings = reg.schema_warnings.get(&t.name).cloned().unwrap_or_default();
    json!({
        "name": t.name,
        "description": t.description,
        "tags": t.tags,
        "backend": t.backend.kind(),
        "parameters": t.parameters,
        "injected": t.inject.iter().map(|(k, _)| k).collect::<Vec<_>>(),
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
    let declared = reg
        .declarations(provider, &opts, &filter)
        .map_err(|unknown| ApiError::Unprocessable(format!("unknown tools: {}", unknown.join(", "))))?;
    Ok(Json(Value::Array(declared.tools)))
}

/// `POST /v1/execute`: run every tool call of a raw completion; answer with the results and the
/// provider-native messages to append. With `Accept: text/event-stream` (SSE) or
/// `application/x-ndjson` the answer is a stream of progress events ending with a `response`
/// event that holds exactly the non-streaming body.
pub(super) async fn execute(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    ApiJson(req): ApiJson<ExecuteRequest>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse as _;
    let (provider, parsed) = execute::prepare(&req, state.config.limits.calls_per_request).map_err(ApiError::from)?;
    // One snapshot for the whole request: a reload meanwhile does not change its tools.
    let registry = state.registry.load_full();
    match super::stream::wanted(&headers) {
        None => {
            let key = headers
                .get("idempotency-key")
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            let Some(key) = key else {
                let resp = execute::run(&state.executor, &registry, provider, parsed, &req, &state.cancel).await;
                return Ok(Json(resp).into_response());
            };
            if key.is_empty() || key.len() > super::idempotency::MAX_KEY_LEN {
                return Err(ApiError::InvalidRequest(format!(
                    "Idempotency-Key must be 1 to {} visible ASCII characters",
                    super::idempotency::MAX_KEY_LEN
                )));
            }
            let digest = super::idempotency::body_digest(&json!({
                "provider": req.provider, "completion": req.completion, "state": req.state,
                "options": format!("{:?}", req.options),
            }));
            let keys = &state.request_keys;
            loop {
                match keys.claim(&key, &digest) {
                    super::idempotency::KeyClaim::Mismatch => return Err(ApiError::IdempotencyKeyReused),
                    super::idempotency::KeyClaim::Done(v) => {
                        return Ok(Json(super::idempotency::mark_replayed(v)).into_response());
                    }
                    super::idempotency::KeyClaim::InFlight(mut rx) => {
                        let waited = tokio::time::timeout(state.config.limits.request_timeout.0, rx.changed()).await;
                        if let (Ok(Ok(())), Some(v)) = (waited, rx.borrow().clone()) {
                            return Ok(Json(super::idempotency::mark_replayed(v)).into_response());
                        }
                    }
                    super::idempotency::KeyClaim::Fresh => break,
                }
            }
            // Released if this handler is dropped (client gone) before it stores a response.
            struct Release<'a>(&'a super::idempotency::RequestKeys, &'a str, bool);
            impl Drop for Release<'_> {
                fn drop(&mut self) {
                    if !self.2 {
                        self.0.abandon(self.1);
                    }
                }
            }
            let mut release = Release(keys, &key, false);
            let resp = execute::run(&state.executor, &registry, provider, parsed, &req, &state.cancel).await;
            let value = serde_json::to_value(&resp).map_err(|e| ApiError::Internal(e.to_string()))?;
            keys.complete(&key, &value);
            release.2 = true;
            Ok(Json(value).into_response())
        }
        Some(format) => Ok(super::stream::respond(state, registry, provider, parsed, req, format)),
    }
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
    let result = execute::call_tool(
        &state.executor,
        &registry,
        &name,
        body.arguments.as_ref(),
        &body.state,
        &state.cancel,
    )
    .await;
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

//! Thin handlers: read the state, call the library, shape the JSON.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use crate::tool::Tool;

/// `GET /healthz`: the process is alive.
pub(super) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: a tool set is loaded and requests can be served.
pub(super) async fn readyz(State(state): State<AppState>) -> Json<Value> {
    let reg = state.registry.load();
    Json(json!({"status": "ready", "version": reg.version, "tools": reg.len()}))
}

/// `GET /v1/tools`: every tool with its description, schema, backend kind and limits.
pub(super) async fn list_tools(State(state): State<AppState>) -> Json<Value> {
    let reg = state.registry.load();
    let tools: Vec<Value> = reg.tools().iter().map(|t| tool_json(t)).collect();
    Json(json!({"version": reg.version, "tools": tools}))
}

/// The public view of a tool. Backend URLs, headers, argv and env are left out: they may hold
/// resolved secrets.
fn tool_json(t: &Tool) -> Value {
    json!({
        "name": t.name,
        "description": t.description,
        "tags": t.tags,
        "backend": t.backend.kind(),
        "parameters": t.parameters,
        "injected": t.inject.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "policy": t.policy,
    })
}

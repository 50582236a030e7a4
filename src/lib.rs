//! toolwire: a sidecar server that executes LLM tool calls.
//!
//! ```text
//! config/ + tools.d/ ─► config::load ─► registry::Registry (compiled schemas, backends)
//! POST /v1/execute ─► provider::detect/parse ─► [call::ToolCall] ─► executor ─► backend
//!                  ─► [call::ToolResult] ─► provider::format ─► { results, messages, assistant, finished }
//! GET /v1/schemas  ─► registry ─► provider::declare ─► provider-native `tools` array
//! ```
//!
//! # Layout
//! - [`call`]: the neutral call/result types every stage shares.
//! - [`provider`]: one module per wire format (parse, format, declare) and shape detection.

pub mod call;
pub mod provider;

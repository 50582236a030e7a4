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
//! - [`provider`]: one module per wire format (parse, format, declare), what several share
//!   (`provider::common`), shape detection, and the schema dialects ([`provider::schema`], one
//!   file per dialect).
//! - [`tool_name`]: the one tool-name rule, checked by the registry and by every declaration.

#![warn(clippy::print_stdout)]

pub mod api;
pub mod backend;
pub mod call;
pub mod check;
pub mod cli;
pub mod config;
pub mod executor;
pub mod health;
pub mod provider;
pub mod redact;
pub mod registry;
pub mod reload;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod template;
pub mod tool;
pub mod tool_name;
pub mod turn;

//! toolwire: a sidecar server that executes LLM tool calls.
//!
//! ```text
//! config/ + tools.d/ ─► config ─► registry (runtime tools) ─────────────┐
//! POST /v1/execute ─► turn ─► provider::detect/parse ─► [ToolCall] ─► executor ─► backend
//!                       ◄─ provider::format ◄─ [ToolResult] ◄──────────┘
//! GET /v1/schemas  ─► provider::catalog ─► provider-native `tools` array
//! ```
//!
//! # Layout
//! Data flows one way; every arrow points down this list (`make module-graph` checks it).
//! - [`config`]: the server config (embedded defaults → file → env) and tool files as written,
//!   `${env:}`/`${file:}` interpolation, TLS material, diagnostics with locations, lints.
//! - [`registry`], [`tool`], [`template`], [`tool_name`]: raw config → runtime tools (compiled
//!   schemas, argument rules, visible state paths, backends), lookup by name; `{placeholder}`
//!   templates; the one portable tool-name rule.
//! - [`reload`]: hot reload (file watch, SIGHUP) — atomic swap of the registry, with status.
//! - [`call`]: the neutral call/result types every stage shares.
//! - [`provider`]: one module per wire format (parse, format, declare) with what several share
//!   (`provider::common`), shape detection, the schema dialects ([`provider::schema`]), the
//!   declarations of a registry ([`provider::catalog`]) and streamed completions
//!   ([`provider::stream`]).
//! - [`turn`]: one agent turn — request/response types, prepare (provider, parse, checks), run
//!   the executor, format the answer; shared by the API and the CLI.
//! - [`executor`]: per call: validate → inject → replay → admit (limits, breakers) →
//!   retry{timeout{backend}} → bound the output; one result per call, in order.
//! - [`backend`]: one entry point ([`backend::Backends`]), one module per kind (HTTP, subprocess
//!   with its exec shim and reaper), egress policy, TLS clients, files.
//! - [`mcp`]: MCP servers as backends — the hub that keeps one live connection per `[[mcp]]`
//!   server (stdio children via the subprocess code, Streamable HTTP via the egress-guarded
//!   client), lists their tools before every registry build and runs their calls for
//!   [`backend`] (through the `backend::McpCaller` trait, so `backend` does not depend on it).
//! - [`store`]: the claim store behind replay and `Idempotency-Key` (in memory by default, or
//!   Redis shared by every replica).
//! - [`redact`]: masking of secrets (and their encoded forms) in outputs, errors and logs.
//! - [`mcp`]: toolwire's tools served over MCP (the `/mcp` route's handler, `toolwire mcp`),
//!   with the `rmcp` SDK kept behind it.
//! - [`api`]: the router, thin handlers, auth/body/shedding guards, streaming answers, errors.
//! - [`server`], [`shutdown`], [`telemetry`], [`health`]: serving with limits and drain (one
//!   single-threaded runtime per CPU serves each connection start to end: `server::workers`;
//!   a lightly loaded one polls instead of sleeping: `server::busy_poll`), signals, logs
//!   (batched per worker, `telemetry::log_writer`; timestamps, `telemetry::clock`) and metrics,
//!   the `toolwire health` probe.
//! - [`cli`], [`check`]: the command line (`main.rs` is the only place using `anyhow`).

#![warn(clippy::print_stdout)]

pub mod api;
pub mod backend;
pub mod call;
pub mod check;
pub mod cli;
pub mod config;
pub mod executor;
pub mod health;
pub mod mcp;
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

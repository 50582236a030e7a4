//! toolwire's integration tests: one test binary with one module per area, so the shared
//! harness (`common/`) and the crate are linked once instead of once per file. Run one area with
//! `cargo nextest run --test it -E 'test(/^backend_exec::/)'` or `cargo test --test it backend_exec::`.
//! Fixtures stay in `tests/fixtures/` (paths are relative to the package root, the tests' cwd).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    unreachable_pub,
    reason = "a test binary: its `pub` items are shared between its modules, not exported"
)]

mod common;

mod api_basic;
mod backend_exec;
mod backend_http;
mod cli;
mod config_loading;
mod escapees;
mod execute_exec;
mod execute_fixtures;
mod execute_http;
mod files;
mod fuzz_corpus;
mod golden;
mod k8s_swap;
mod mcp_backend;
mod mcp_server;
mod observability;
mod openapi_contract;
mod reliability;
mod reload;
mod replay;
mod security;
mod security_exec;
mod security_secrets;
mod security_tls;
mod store_redis;
mod stream_in;
mod streaming;
mod tracing_otlp;

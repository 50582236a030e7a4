//! Shared test harness. Each test binary uses a subset.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "shared test helpers: each test binary uses a subset, and nothing here is a public API"
)]

pub mod binary;
pub mod faults;
pub mod invariants;
pub mod logs;
pub mod mock_backend;
pub mod proc_watch;
pub mod procs;
pub mod served;
pub mod server;
pub mod tools;

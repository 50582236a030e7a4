//! Shared test harness. Each test binary uses a subset.
#![allow(dead_code)]

pub mod mock_backend;
pub mod procs;
pub mod server;

//! Shared test harness. Each test binary uses a subset.
#![allow(dead_code)]

pub mod mock_backend;
pub mod proc_watch;
pub mod procs;
pub mod server;
pub mod tools;

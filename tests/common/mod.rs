//! Shared test harness. Each test binary uses a subset.
#![allow(dead_code)]

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

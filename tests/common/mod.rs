//! Shared test harness. Each test binary uses a subset.
#![allow(dead_code)]

pub mod procs;
pub mod server;

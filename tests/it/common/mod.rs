//! Shared test harness of the one integration test binary (`tests/it/`): compiled once for
//! every module, which is why the tests are one binary and not one per file.
#![allow(dead_code)]

pub mod binary;
pub mod faultproc;
pub mod faults;
pub mod invariants;
pub mod logs;
pub mod mock_backend;
pub mod proc_watch;
pub mod procs;
pub mod redis;
pub mod server;
pub mod tls_backend;
pub mod tools;

//! Helpers shared by integration tests. Each test binary uses a subset, hence the allow.
#![allow(dead_code)]

pub mod mock_backend;

//! Placeholder: replaced by the real HTTP backend.

use super::{Attempt, BackendError, Output};
use crate::config::server::HttpClientConfig;
use crate::tool::HttpSpec;

/// Placeholder.
pub struct HttpBackend;

impl HttpBackend {
    /// Placeholder.
    pub fn new(cfg: &HttpClientConfig) -> Result<Self, BackendError> {
        let _ = cfg;
        Ok(HttpBackend)
    }

    /// Placeholder.
    pub async fn call(&self, spec: &HttpSpec, attempt: &Attempt<'_>) -> Result<Output, BackendError> {
        let _ = (spec, attempt);
        Err(BackendError::Connect("not built".into()))
    }
}

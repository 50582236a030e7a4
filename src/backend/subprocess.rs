//! Placeholder: replaced by the real subprocess backend.

use super::{Attempt, BackendError, Output};
use crate::tool::ExecSpec;

/// Placeholder.
pub async fn call(spec: &ExecSpec, attempt: &Attempt<'_>) -> Result<Output, BackendError> {
    let _ = (spec, attempt);
    Err(BackendError::Spawn("not built".into()))
}

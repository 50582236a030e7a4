//! Placeholder: replaced by the real backend.

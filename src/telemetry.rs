//! Tracing setup: `RUST_LOG` (or the config's `log`) filter, pretty or JSON lines on stderr.

use tracing_subscriber::EnvFilter;

use crate::config::server::LogFormat;

/// Installs the global subscriber. `RUST_LOG` wins over `filter` when set. Safe to call twice
/// (the second call is ignored), which tests rely on.
pub fn init(filter: &str, format: LogFormat) {
    let env_filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

//! Tracing setup: `RUST_LOG` (or the config's `log`) filter, pretty or JSON lines on stderr;
//! OpenTelemetry traces when the `OTEL_*` variables ask for them ([`traces`]).

pub mod traces;

use tracing_subscriber::EnvFilter;

use crate::config::server::LogFormat;

/// Installs the global subscriber. `RUST_LOG` wins over `filter` when set. Safe to call twice
/// (the second call is ignored), which tests rely on.
pub fn init(filter: &str, format: LogFormat) {
    let env_filter = env_filter(filter);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.fmt_fields(escaped_fields()).try_init(),
    };
}

/// [`init`], plus OpenTelemetry traces when the environment turns them on
/// ([`traces::decide`]); returns the pipeline to flush at shutdown. Call inside the tokio
/// runtime that will run the export. With traces off this is exactly [`init`]: the same
/// subscriber, no extra layer.
pub fn init_with_traces(filter: &str, format: LogFormat) -> Result<Option<traces::Tracing>, traces::TracesError> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::FilterExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let decision = traces::decide(|k| std::env::var(k).ok());
    if let traces::Decision::Off { why, warn } = decision {
        init(filter, format);
        if warn {
            tracing::warn!(reason = why, "OpenTelemetry traces are off.");
        } else {
            tracing::debug!(reason = why, "OpenTelemetry traces are off.");
        }
        return Ok(None);
    }
    let (otel, tracing) = traces::build()?;
    // The log layer never sees the trace spans (their fields are for the exporter only).
    let logs = env_filter(filter).and(tracing_subscriber::filter::filter_fn(|m| m.target() != traces::TARGET));
    let fmt = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .with_filter(logs)
            .boxed(),
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .fmt_fields(escaped_fields())
            .with_writer(std::io::stderr)
            .with_filter(logs)
            .boxed(),
    };
    if tracing_subscriber::registry().with(fmt).with(otel).try_init().is_ok() {
        traces::set_enabled();
        tracing::info!("OpenTelemetry traces are on (OTLP over HTTP).");
        Ok(Some(tracing))
    } else {
        // Another subscriber was installed first (tests): no layer, so no spans either.
        Ok(None)
    }
}

/// `RUST_LOG` if set and valid, else `filter`, else `info`.
fn env_filter(filter: &str) -> EnvFilter {
    EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(filter))
        .unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The pretty format's field formatter: like the default (`name=value`, the message bare), with
/// every control character, line or paragraph separator and bidi override escaped. Call ids,
/// names and backend messages can come from a model or a backend; unescaped, a `\n` in one
/// would start a forged log line and an ANSI sequence would rewrite the terminal. (JSON lines
/// escape by construction.)
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(
        |w: &mut tracing_subscriber::fmt::format::Writer<'_>,
         field: &tracing::field::Field,
         value: &dyn std::fmt::Debug| {
            let text = escape_log_text(&format!("{value:?}"));
            if field.name() == "message" {
                write!(w, "{text}")
            } else {
                write!(w, "{field}={text}")
            }
        },
    )
    .delimited(" ")
}

/// `text` with characters that could forge or hide log lines escaped (`\n`, `\u{1b}`, …).
pub fn escape_log_text(text: &str) -> String {
    let risky = |c: char| {
        c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(risky) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if risky(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_line_breaks_ansi_and_bidi() {
        assert_eq!(
            super::escape_log_text("a\nb\u{1b}[31mc\u{202e}"),
            "a\\nb\\u{1b}[31mc\\u{202e}"
        );
        assert_eq!(super::escape_log_text("plain é"), "plain é");
    }
}

/// Prometheus metrics. One global recorder per process (the first server installs it; later
/// servers in the same process, e.g. in tests, share it).
pub mod metrics {
    use std::sync::OnceLock;
    use std::time::Duration;

    use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

    /// Latency buckets in seconds: from a fast loopback call to a long tool deadline.
    const BUCKETS: &[f64] = &[
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ];

    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

    /// Installs the recorder on first use; `None` if another recorder was installed first.
    pub fn handle() -> Option<&'static PrometheusHandle> {
        HANDLE
            .get_or_init(|| {
                let builder = PrometheusBuilder::new().set_buckets(BUCKETS).ok()?;
                let handle = builder.install_recorder().ok()?;
                describe();
                Some(handle)
            })
            .as_ref()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render() -> String {
        handle().map(PrometheusHandle::render).unwrap_or_default()
    }

    fn describe() {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!(
            "toolwire_http_requests_total",
            "HTTP requests by route, method and status."
        );
        describe_histogram!(
            "toolwire_http_request_duration_seconds",
            Unit::Seconds,
            "HTTP request latency by route."
        );
        describe_counter!(
            "toolwire_tool_calls_total",
            "Tool calls by tool and outcome (ok or the error kind)."
        );
        describe_histogram!(
            "toolwire_tool_call_duration_seconds",
            Unit::Seconds,
            "Tool call latency by tool, all attempts included."
        );
        describe_counter!(
            "toolwire_tool_attempts_total",
            "Backend attempts by tool (retries included)."
        );
        describe_gauge!("toolwire_tool_calls_in_flight", "Tool calls running now.");
        describe_counter!(
            "toolwire_rejected_total",
            "Work refused: `shed` (503 overload) or `admission` (no concurrency slot)."
        );
        describe_gauge!(
            "toolwire_breaker_open",
            "1 while a backend's circuit breaker is open or half-open, else 0."
        );
        describe_counter!(
            "toolwire_reloads_total",
            "Tool set reloads by result (swapped, unchanged, rejected)."
        );
        describe_gauge!("toolwire_tools_loaded", "Tools in the active set.");
    }

    /// Records one finished HTTP request.
    pub fn http_request(route: &str, method: &str, status: u16, elapsed: Duration) {
        metrics::counter!("toolwire_http_requests_total", "route" => route.to_owned(), "method" => method.to_owned(), "status" => status.to_string()).increment(1);
        metrics::histogram!("toolwire_http_request_duration_seconds", "route" => route.to_owned())
            .record(elapsed.as_secs_f64());
    }

    /// Records one finished tool call.
    pub fn tool_call(tool: &str, outcome: &str, attempts: u32, elapsed: Duration) {
        metrics::counter!("toolwire_tool_calls_total", "tool" => tool.to_owned(), "outcome" => outcome.to_owned())
            .increment(1);
        metrics::counter!("toolwire_tool_attempts_total", "tool" => tool.to_owned()).increment(u64::from(attempts));
        metrics::histogram!("toolwire_tool_call_duration_seconds", "tool" => tool.to_owned())
            .record(elapsed.as_secs_f64());
    }

    /// Moves the in-flight gauge.
    pub fn in_flight(delta: f64) {
        metrics::gauge!("toolwire_tool_calls_in_flight").increment(delta);
    }

    /// Counts refused work.
    pub fn rejected(reason: &'static str) {
        metrics::counter!("toolwire_rejected_total", "reason" => reason).increment(1);
    }

    /// Sets a breaker's gauge.
    pub fn breaker(backend: &str, open: bool) {
        metrics::gauge!("toolwire_breaker_open", "backend" => backend.to_owned()).set(if open { 1.0 } else { 0.0 });
    }

    /// Counts a reload.
    pub fn reload(result: &'static str, tools: usize) {
        metrics::counter!("toolwire_reloads_total", "result" => result).increment(1);
        metrics::gauge!("toolwire_tools_loaded").set(tools as f64);
    }
}

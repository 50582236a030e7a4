//! Tracing setup: `RUST_LOG` (or the config's `log`) filter, pretty or JSON lines on stderr
//! (batched on serving workers: [`log_writer`]);
//! OpenTelemetry traces when the `OTEL_*` variables ask for them ([`traces`]).

pub mod clock;
pub mod log_writer;
pub mod traces;

use tracing_subscriber::EnvFilter;

use crate::config::server::LogFormat;

/// Installs the global subscriber. `RUST_LOG` wins over `filter` when set. Safe to call twice
/// (the second call is ignored), which tests rely on.
pub fn init(filter: &str, format: LogFormat) {
    let env_filter = env_filter(filter);
    let ansi = ansi();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_ansi(ansi)
        .with_timer(clock::CachedUtc)
        .with_writer(log_writer::Stderr);
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
            .with_ansi(ansi())
            .with_timer(clock::CachedUtc)
            .json()
            .flatten_event(true)
            .with_writer(log_writer::Stderr)
            .with_filter(logs)
            .boxed(),
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .with_ansi(ansi())
            .with_timer(clock::CachedUtc)
            .fmt_fields(escaped_fields())
            .with_writer(log_writer::Stderr)
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

/// `RUST_LOG` if set and valid, else `filter`, else `info`; `rmcp` at `warn` unless named.
fn env_filter(filter: &str) -> EnvFilter {
    let mut env_filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // The MCP SDK logs every message it receives at `info`, contents included: a server's
    // notification flood would become a log flood, and arguments would reach the logs. Only its
    // warnings and errors, unless the filter names `rmcp` itself.
    let named = std::env::var("RUST_LOG").unwrap_or_else(|_| filter.to_owned());
    if !named.contains("rmcp")
        && let Ok(directive) = "rmcp=warn".parse()
    {
        env_filter = env_filter.add_directive(directive);
    }
    env_filter
}

/// Colours only on a terminal: in a file or a collector's pipe the escape codes are noise, and
/// writing them costs time on every line.
fn ansi() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
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
            use std::fmt::Write as _;
            // Escaped while it is written: no string is built per field.
            if field.name() != "message" {
                write!(w, "{field}=")?;
            }
            write!(Escaping(w), "{value:?}")
        },
    )
    .delimited(" ")
}

/// Characters that could forge or hide log lines.
fn risky(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `text` may hold a [`risky`] character: a byte scan (which the compiler vectorises)
/// instead of decoding every character, for the usual text that holds none. Every risky
/// character's UTF-8 starts with a byte below 0x20, 0x7F, 0xC2 (U+0080–U+009F) or 0xE2
/// (U+2028–U+202E, U+2066–U+2069); other characters with those lead bytes (`©`, `€`) only
/// take the exact path.
fn may_be_risky(text: &str) -> bool {
    text.bytes().any(|b| b < 0x20 || b == 0x7f || b == 0xc2 || b == 0xe2)
}

/// A writer that escapes what [`escape_log_text`] escapes, on the way through.
struct Escaping<W>(W);

impl<W: std::fmt::Write> std::fmt::Write for Escaping<W> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        if !may_be_risky(text) {
            return self.0.write_str(text);
        }
        let mut rest = text;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| risky(c)) {
            self.0.write_str(&rest[..at])?;
            for e in c.escape_default() {
                self.0.write_char(e)?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// `text` with characters that could forge or hide log lines escaped (`\n`, `\u{1b}`, …).
pub fn escape_log_text(text: &str) -> String {
    if !may_be_risky(text) || !text.chars().any(risky) {
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

    /// The byte scan never lets a risky character through: checked for every Unicode scalar.
    #[test]
    fn the_fast_check_misses_no_risky_character() {
        let mut buf = [0u8; 4];
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            if super::risky(c) {
                assert!(super::may_be_risky(c.encode_utf8(&mut buf)), "{c:?}");
            }
        }
        assert!(!super::may_be_risky("plain text, é and ü"));
    }

    #[test]
    fn escaping_writer_matches_escape_log_text() {
        use std::fmt::Write as _;
        for text in [
            "a\nb\u{1b}[31mc\u{202e}",
            "plain é",
            "",
            "\r\n",
            "x\u{2028}y\u{2069}",
            "© € \u{85}",
        ] {
            let mut out = String::new();
            write!(super::Escaping(&mut out), "{text}").unwrap();
            assert_eq!(out, super::escape_log_text(text));
        }
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

    /// How often [`upkeep`] should run: the recorder keeps every histogram sample until then.
    pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);

    /// Folds the histogram samples recorded since the last upkeep (or scrape) into their
    /// buckets. The recorder keeps each sample until this runs or `/metrics` is scraped, so
    /// without it a server nobody scrapes grows by a few bytes per request, without bound.
    pub fn upkeep() {
        if let Some(h) = handle() {
            h.run_upkeep();
        }
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
        describe_counter!(
            "toolwire_store_bypassed_total",
            "Idempotent tool calls run without deduplication because the shared store was unavailable, by store."
        );
        describe_counter!(
            "toolwire_store_errors_total",
            "Shared store (Redis) commands that failed or timed out."
        );
        describe_counter!(
            "toolwire_busy_poll_spins_total",
            "Busy-polling spins of the serving workers by outcome: `caught` (a request started or ended during the spin) or `ran_out`."
        );
    }

    /// The counters of busy-polling spins (`caught`, `ran_out`), as handles a worker keeps:
    /// counting a spin is then one atomic add. Installs the recorder first, so the handles are
    /// live however early a worker asks.
    pub fn busy_poll_spins() -> (metrics::Counter, metrics::Counter) {
        let _ = handle();
        (
            metrics::counter!("toolwire_busy_poll_spins_total", "outcome" => "caught"),
            metrics::counter!("toolwire_busy_poll_spins_total", "outcome" => "ran_out"),
        )
    }

    /// Counts a call run without deduplication (the shared store failed).
    pub fn store_bypassed(store: &'static str) {
        metrics::counter!("toolwire_store_bypassed_total", "store" => store).increment(1);
    }

    /// Counts a failed shared-store command.
    pub fn store_error() {
        metrics::counter!("toolwire_store_errors_total").increment(1);
    }

    /// Records one finished HTTP request. Label values are built once per request (the route
    /// shared between both series, the method and common statuses static).
    pub fn http_request(route: &str, method: &'static str, status: u16, elapsed: Duration) {
        let route = metrics::SharedString::from(std::sync::Arc::<str>::from(route));
        metrics::counter!("toolwire_http_requests_total", "route" => route.clone(), "method" => method, "status" => status_label(status)).increment(1);
        metrics::histogram!("toolwire_http_request_duration_seconds", "route" => route).record(elapsed.as_secs_f64());
    }

    /// A status code as a label value, without building a string for the usual ones.
    fn status_label(status: u16) -> metrics::SharedString {
        let known = match status {
            200 => "200",
            400 => "400",
            401 => "401",
            404 => "404",
            405 => "405",
            408 => "408",
            409 => "409",
            413 => "413",
            415 => "415",
            422 => "422",
            500 => "500",
            503 => "503",
            _ => return status.to_string().into(),
        };
        known.into()
    }

    /// Records one finished tool call (the tool's name is copied once for the three series).
    pub fn tool_call(tool: &str, outcome: &'static str, attempts: u32, elapsed: Duration) {
        let tool = metrics::SharedString::from(std::sync::Arc::<str>::from(tool));
        metrics::counter!("toolwire_tool_calls_total", "tool" => tool.clone(), "outcome" => outcome).increment(1);
        metrics::counter!("toolwire_tool_attempts_total", "tool" => tool.clone()).increment(u64::from(attempts));
        metrics::histogram!("toolwire_tool_call_duration_seconds", "tool" => tool).record(elapsed.as_secs_f64());
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

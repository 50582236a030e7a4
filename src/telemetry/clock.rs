//! The log lines' timestamp, `2026-12-03T16:46:00.123456Z` (RFC 3339, UTC, microseconds):
//! exactly what `tracing-subscriber`'s default `SystemTime` timer writes, at a fraction of the
//! cost.
//!
//! Why: the default timer converts the time to a calendar date and runs it through the
//! formatting machinery on every line — ~2.3 k instructions, a tenth of what a log line costs
//! and ~2 % of a whole `/v1/execute` (`docs/bench.md`). Here each thread keeps the date and time
//! of the current second, formatted once per second, and a line only appends the microseconds.

use std::cell::RefCell;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// The timer of toolwire's log lines (`with_timer`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CachedUtc;

/// One thread's formatted current second.
struct Second {
    unix: u64,
    /// `YYYY-MM-DDTHH:MM:SS`.
    text: String,
}

thread_local! {
    static SECOND: RefCell<Option<Second>> = const { RefCell::new(None) };
}

impl FormatTime for CachedUtc {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write_stamp(w, SystemTime::now())
    }
}

/// Writes `at` as `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
pub fn write_stamp(w: &mut impl fmt::Write, at: SystemTime) -> fmt::Result {
    let Ok(since) = at.duration_since(UNIX_EPOCH) else {
        // Before 1970: a clock this wrong is not worth a cache.
        return write!(w, "{}", humantime::format_rfc3339_micros(at));
    };
    let unix = since.as_secs();
    let micros = since.subsec_micros();
    SECOND.with(|cell| {
        let Ok(mut cached) = cell.try_borrow_mut() else {
            // Re-entered (a log line written while formatting one): no cache.
            return write!(w, "{}", humantime::format_rfc3339_micros(at));
        };
        if cached.as_ref().is_none_or(|s| s.unix != unix) {
            *cached = Some(Second {
                unix,
                text: second_text(at),
            });
        }
        let text = cached.as_ref().map_or("", |s| s.text.as_str());
        w.write_str(text)?;
        w.write_str(".")?;
        let digits = six_digits(micros);
        w.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)?;
        w.write_str("Z")
    })
}

/// `YYYY-MM-DDTHH:MM:SS` of `at`'s second.
fn second_text(at: SystemTime) -> String {
    let mut text = humantime::format_rfc3339_seconds(at).to_string();
    // `…SSZ`: the zone letter is written after the fraction instead.
    text.pop();
    text
}

/// `n` (below a million) as exactly six ASCII decimal digits.
fn six_digits(n: u32) -> [u8; 6] {
    let mut out = [b'0'; 6];
    let mut n = n % 1_000_000;
    for slot in out.iter_mut().rev() {
        *slot = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::FormatTime as _;

    /// The same text as `tracing-subscriber`'s own timer, across second, day, month, leap-year
    /// and century boundaries, and from the cache (the same second twice).
    #[test]
    fn matches_the_default_timer() {
        let samples = [
            0,
            1,
            59,
            86_399,
            951_782_400,   // 2000-02-29
            1_709_164_799, // 2024-02-28T23:59:59
            1_764_720_000, // 2025-12-03
            1_796_256_000,
            4_102_444_799, // 2099-12-31T23:59:59
        ];
        for secs in samples {
            for micros in [0, 7, 999_999, 123_456] {
                let at = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros);
                let mut ours = String::new();
                super::write_stamp(&mut ours, at).unwrap();
                let mut again = String::new();
                super::write_stamp(&mut again, at).unwrap();
                let theirs = humantime::format_rfc3339_micros(at).to_string();
                assert_eq!(ours, theirs, "{secs}.{micros}");
                assert_eq!(again, theirs);
            }
        }
    }

    /// The timer as installed writes the current time, in the default timer's shape.
    #[test]
    fn the_timer_writes_now_in_the_default_shape() {
        let before = SystemTime::now();
        let mut ours = String::new();
        super::CachedUtc.format_time(&mut Writer::new(&mut ours)).unwrap();
        let mut theirs = String::new();
        tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut Writer::new(&mut theirs))
            .unwrap();
        assert_eq!(ours.len(), theirs.len(), "{ours} vs {theirs}");
        let at = humantime::parse_rfc3339(&ours).unwrap();
        let off = at.duration_since(before).unwrap_or_else(|e| e.duration());
        assert!(off < Duration::from_secs(5), "{ours} is not now");
    }
}

//! Fuzz target `parse_retry_after`: bytes as a `Retry-After` header value. Invariants: never a
//! panic; every answer is at most `MAX_RETRY_AFTER`; a plain number of seconds within the cap is
//! read exactly.

use std::time::{Duration, UNIX_EPOCH};

use toolwire::backend::http::{MAX_RETRY_AFTER, parse_retry_after};

pub fn run(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    // Fixed clocks keep runs reproducible: the epoch, and 2023-11-14T22:13:20Z.
    for now in [UNIX_EPOCH, UNIX_EPOCH + Duration::from_secs(1_700_000_000)] {
        let wait = parse_retry_after(value, now);
        if let Some(wait) = wait {
            assert!(wait <= MAX_RETRY_AFTER, "{value:?} → {wait:?}");
        }
        let trimmed = value.trim();
        if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
            let expected = trimmed
                .parse::<u64>()
                .ok()
                .map(Duration::from_secs)
                .filter(|d| *d <= MAX_RETRY_AFTER);
            assert_eq!(wait, expected, "{value:?}");
        }
    }
}

//! Circuit breakers, one per backend (an HTTP origin or a program).
//!
//! After `failures` consecutive infrastructure failures (connect errors, timeouts, broken
//! connections, 5xx, spawn failures) the breaker opens: calls fail fast with
//! `backend_unavailable` and a `retry_after_ms` until `open_for` has passed. Then one call is
//! let through as a probe (half-open): success closes the breaker, failure opens it again.
//! Client errors (4xx, invalid arguments, non-zero exits) say nothing about the backend's
//! health and are not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::backend::BackendError;

/// A breaker's state, as shown by `GET /v1/tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum BreakerView {
    Closed { consecutive_failures: u32 },
    Open { retry_after_ms: u64 },
    HalfOpen,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// A probe is in flight.
    HalfOpen,
}

/// All breakers of the server.
#[derive(Debug)]
pub struct Breakers {
    threshold: u32,
    open_for: Duration,
    states: Mutex<HashMap<String, State>>,
}

/// Permission to make one attempt. Dropping a probe without a verdict (the call was cancelled)
/// lets the next call probe instead.
#[derive(Debug)]
pub struct Admission {
    breakers: Arc<Breakers>,
    key: String,
    probe: bool,
    settled: bool,
}

impl Breakers {
    /// Breakers that open after `threshold` consecutive failures (0 disables them).
    pub fn new(threshold: u32, open_for: Duration) -> Arc<Self> {
        Arc::new(Breakers {
            threshold,
            open_for,
            states: Mutex::new(HashMap::new()),
        })
    }

    /// May an attempt go to `key`? `Err` carries how long until the next probe.
    pub fn admit(self: &Arc<Self>, key: &str) -> Result<Admission, Duration> {
        let admission = |probe| Admission {
            breakers: Arc::clone(self),
            key: key.to_owned(),
            probe,
            settled: false,
        };
        if self.threshold == 0 {
            return Ok(admission(false));
        }
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let state = states.entry(key.to_owned()).or_insert(State::Closed { failures: 0 });
        match *state {
            State::Closed { .. } => Ok(admission(false)),
            State::Open { until } => {
                let now = Instant::now();
                if now >= until {
                    *state = State::HalfOpen;
                    Ok(admission(true))
                } else {
                    Err(until - now)
                }
            }
            State::HalfOpen => Err(Duration::from_secs(1)),
        }
    }

    /// The view of every breaker that has seen traffic.
    pub fn view(&self, key: &str) -> Option<BreakerView> {
        let states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        states.get(key).map(|s| match *s {
            State::Closed { failures } => BreakerView::Closed {
                consecutive_failures: failures,
            },
            State::Open { until } => BreakerView::Open {
                retry_after_ms: u64::try_from(until.saturating_duration_since(Instant::now()).as_millis())
                    .unwrap_or(u64::MAX),
            },
            State::HalfOpen => BreakerView::HalfOpen,
        })
    }

    fn settle(&self, key: &str, failed: bool) {
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let state = states.entry(key.to_owned()).or_insert(State::Closed { failures: 0 });
        let next = match (*state, failed) {
            (_, false) => State::Closed { failures: 0 },
            (State::Closed { failures }, true) if failures + 1 < self.threshold => {
                State::Closed { failures: failures + 1 }
            }
            (_, true) => {
                tracing::warn!(
                    backend = key,
                    open_for_ms = self.open_for.as_millis() as u64,
                    "Circuit breaker opened."
                );
                State::Open {
                    until: Instant::now() + self.open_for,
                }
            }
        };
        crate::telemetry::metrics::breaker(key, !matches!(next, State::Closed { .. }));
        *state = next;
    }
}

impl Admission {
    /// Records the attempt's outcome.
    pub fn record(mut self, result: Result<(), &BackendError>) {
        self.settled = true;
        match result {
            Ok(()) => self.breakers.settle(&self.key, false),
            Err(e) if counts_as_failure(e) => self.breakers.settle(&self.key, true),
            // Not a health signal: a probe that ends this way still proves the backend answers.
            Err(_) => self.breakers.settle(&self.key, false),
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.probe && !self.settled {
            let mut states = self.breakers.states.lock().unwrap_or_else(PoisonError::into_inner);
            states.insert(self.key.clone(), State::Open { until: Instant::now() });
        }
    }
}

/// Failures that say the backend itself is unwell.
fn counts_as_failure(e: &BackendError) -> bool {
    match e {
        BackendError::Connect(_)
        | BackendError::Timeout { .. }
        | BackendError::Io(_)
        | BackendError::Spawn(_)
        | BackendError::Disconnected(_) => true,
        BackendError::Status { status, .. } => *status >= 500,
        BackendError::OutputTooLarge { .. }
        | BackendError::InvalidArgument(_)
        | BackendError::NonzeroExit { .. }
        | BackendError::Signaled { .. }
        | BackendError::InvalidOutput(_)
        | BackendError::Blocked(_)
        // A certificate problem is configuration, not health: counting it would turn a clear,
        // non-retryable `tls_error` into a retryable `backend_unavailable`.
        | BackendError::Tls(_)
        // The tool ran and answered: the server is healthy. A server that is down already
        // fails fast on its own, without the breaker.
        | BackendError::ToolReported(_)
        | BackendError::ServerDown { .. }
        | BackendError::Unavailable { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> BackendError {
        BackendError::Connect("refused".into())
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_n_failures_then_probes_once_and_closes_on_success() {
        let b = Breakers::new(3, Duration::from_secs(30));
        for _ in 0..3 {
            b.admit("x").unwrap().record(Err(&refused()));
        }
        let wait = b.admit("x").unwrap_err();
        assert_eq!(wait, Duration::from_secs(30));
        assert!(matches!(b.view("x"), Some(BreakerView::Open { .. })));
        tokio::time::advance(Duration::from_secs(30)).await;
        let probe = b.admit("x").unwrap();
        assert!(b.admit("x").is_err(), "only one probe at a time");
        probe.record(Ok(()));
        assert_eq!(
            b.view("x"),
            Some(BreakerView::Closed {
                consecutive_failures: 0
            })
        );
        assert!(b.admit("x").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probe_reopens_and_dropped_probe_frees_the_slot() {
        let b = Breakers::new(1, Duration::from_secs(10));
        b.admit("x").unwrap().record(Err(&refused()));
        tokio::time::advance(Duration::from_secs(10)).await;
        b.admit("x").unwrap().record(Err(&refused()));
        assert!(b.admit("x").is_err());
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(b.admit("x").unwrap());
        assert!(b.admit("x").is_ok(), "a cancelled probe must not wedge the breaker");
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_do_not_count() {
        let b = Breakers::new(2, Duration::from_secs(10));
        for _ in 0..5 {
            let e = BackendError::Status {
                status: 404,
                body_excerpt: String::new(),
                retry_after: None,
            };
            b.admit("x").unwrap().record(Err(&e));
        }
        assert!(b.admit("x").is_ok());
    }
}

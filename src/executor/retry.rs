//! Retries (`docs/execution.md#retries`): full-jitter exponential backoff, attempts capped,
//! `Retry-After` honoured when it fits the deadline, and no attempt or sleep that runs past the
//! deadline.
//!
//! The loop is generic over the attempt function so it can be tested with paused time and a
//! scripted backend. Attempt timeout inside the loop; call deadline outside it.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendError, Output};
use crate::call::{ErrorKind, ToolError};
use crate::tool::RetryPolicy;

/// Longest `Retry-After` the loop waits for; a longer one ends the call with `retry_after_ms`
/// so the agent can decide.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A source of uniform random numbers in `[0, 1)` for jitter; injectable so tests can pin it.
pub trait Jitter: Send + Sync {
    fn unit(&self) -> f64;
}

/// Thread-local random jitter.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomJitter;

impl Jitter for RandomJitter {
    fn unit(&self) -> f64 {
        rand::random::<f64>()
    }
}

/// A fixed value, for tests.
#[derive(Debug, Clone, Copy)]
pub struct FixedJitter(pub f64);

impl Jitter for FixedJitter {
    fn unit(&self) -> f64 {
        self.0
    }
}

/// The delay before retry number `retry` (0 for the first retry):
/// `random(0, min(max_backoff, backoff · 2^retry))`.
pub fn backoff_delay(policy: &RetryPolicy, retry: u32, jitter: &dyn Jitter) -> Duration {
    let exp = policy.backoff.saturating_mul(2u32.saturating_pow(retry.min(31)));
    let cap = exp.min(policy.max_backoff);
    cap.mul_f64(jitter.unit().clamp(0.0, 1.0))
}

/// Called before each backoff sleep with the attempt that failed, its error and the delay.
pub type OnRetry<'a> = &'a (dyn Fn(u32, &BackendError, Duration) + Sync);

/// Called after every attempt with its number, its error (`None`: it succeeded) and the delay
/// before the next attempt (`None`: it was the last). Trace events (`docs/tracing.md`).
pub type OnAttempt<'a> = &'a (dyn Fn(u32, Option<&BackendError>, Option<Duration>) + Sync);

/// What the loop needs to know about the call.
#[derive(Clone, Copy)]
pub struct RetryBudget<'a> {
    pub policy: &'a RetryPolicy,
    /// Per-attempt timeout.
    pub timeout: Duration,
    pub idempotent: bool,
    /// The call's deadline (already cut to the request's).
    pub deadline: Instant,
    /// Extra time an attempt may take after its timeout to stop cleanly (subprocess kill
    /// grace); the outer safety timer allows for it.
    pub stop_grace: Duration,
    /// Observer of failed attempts that will be retried (streaming `attempt_failed` events).
    pub on_retry: Option<OnRetry<'a>>,
    /// Observer of every attempt (trace events); `None` when traces are off.
    pub on_attempt: Option<OnAttempt<'a>>,
}

/// The outcome of the loop: the output or the final error, and attempts made.
#[derive(Debug)]
pub struct RetryOutcome {
    pub result: Result<Output, ToolError>,
    pub attempts: u32,
}

/// Runs `attempt(n, timeout)` until it succeeds, fails for good, or the budget is spent.
pub async fn run<F, Fut>(budget: RetryBudget<'_>, jitter: &dyn Jitter, mut attempt: F) -> RetryOutcome
where
    F: FnMut(u32, Duration) -> Fut,
    Fut: Future<Output = Result<Output, BackendError>>,
{
    let max = budget.policy.max_attempts.max(1);
    let mut n = 0;
    loop {
        n += 1;
        let remaining = budget.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return deadline_exceeded(n - 1);
        }
        let cut_by_deadline = remaining < budget.timeout;
        let attempt_timeout = budget.timeout.min(remaining);
        // The backend enforces `attempt_timeout` itself; this outer timer only guards against a
        // backend that fails to.
        let safety = attempt_timeout + budget.stop_grace + Duration::from_millis(500);
        let result = match tokio::time::timeout(safety, attempt(n, attempt_timeout)).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Timeout {
                timeout: attempt_timeout,
                sent: true,
                signal: None,
            }),
        };
        let seen = |err: Option<&BackendError>, next: Option<Duration>| {
            if let Some(on_attempt) = budget.on_attempt {
                on_attempt(n, err, next);
            }
        };
        let err = match result {
            Ok(out) => {
                seen(None, None);
                return RetryOutcome {
                    result: Ok(out),
                    attempts: n,
                };
            }
            Err(e) => e,
        };
        if matches!(err, BackendError::Timeout { .. }) && cut_by_deadline {
            seen(Some(&err), None);
            return deadline_exceeded(n);
        }
        if n >= max || !err.is_retryable(budget.idempotent) {
            seen(Some(&err), None);
            return RetryOutcome {
                result: Err(final_error(&err, n)),
                attempts: n,
            };
        }
        let remaining = budget.deadline.saturating_duration_since(Instant::now());
        let delay = match err.retry_after() {
            Some(after) if after > MAX_RETRY_AFTER || after >= remaining => {
                // The backend asks for more time than the call has: stop and tell the agent.
                seen(Some(&err), None);
                return RetryOutcome {
                    result: Err(final_error(&err, n)),
                    attempts: n,
                };
            }
            Some(after) => after,
            None => backoff_delay(budget.policy, n - 1, jitter),
        };
        if delay >= remaining {
            seen(Some(&err), None);
            return RetryOutcome {
                result: Err(final_error(&err, n)),
                attempts: n,
            };
        }
        tracing::debug!(attempt = n, delay_ms = delay.as_millis() as u64, error = %err, "Retrying tool call.");
        seen(Some(&err), Some(delay));
        if let Some(on_retry) = budget.on_retry {
            on_retry(n, &err, delay);
        }
        tokio::time::sleep(delay).await;
    }
}

fn final_error(err: &BackendError, attempts: u32) -> ToolError {
    let mut e = err.to_tool_error();
    if attempts > 1 {
        e.message = format!("{} (after {attempts} attempts)", e.message);
    }
    e
}

fn deadline_exceeded(attempts: u32) -> RetryOutcome {
    RetryOutcome {
        result: Err(ToolError::new(
            ErrorKind::DeadlineExceeded,
            format!(
                "The tool did not finish before its deadline ({attempts} attempts). Try again later or ask for less."
            ),
            true,
        )),
        attempts,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        }
    }

    fn budget(p: &RetryPolicy, deadline: Duration) -> RetryBudget<'_> {
        RetryBudget {
            policy: p,
            timeout: Duration::from_secs(1),
            idempotent: false,
            deadline: Instant::now() + deadline,
            stop_grace: Duration::ZERO,
            on_retry: None,
            on_attempt: None,
        }
    }

    fn unavailable() -> BackendError {
        BackendError::Status {
            status: 503,
            body_excerpt: String::new(),
            retry_after: None,
        }
    }

    #[test]
    fn full_jitter_delays_stay_in_bounds_and_average_half_the_cap() {
        let p = policy(5);
        for retry in 0..6u32 {
            let cap = (Duration::from_millis(100) * 2u32.pow(retry)).min(Duration::from_secs(1));
            let samples = 10_000;
            let mut total = Duration::ZERO;
            for _ in 0..samples {
                let d = backoff_delay(&p, retry, &RandomJitter);
                assert!(d <= cap, "retry {retry}: {d:?} > {cap:?}");
                total += d;
            }
            let mean = total.as_secs_f64() / f64::from(samples);
            let expected = cap.as_secs_f64() / 2.0;
            assert!(
                (mean - expected).abs() / expected < 0.05,
                "retry {retry}: mean {mean} vs {expected}"
            );
        }
        assert_eq!(backoff_delay(&p, 40, &FixedJitter(1.0)), Duration::from_secs(1));
        assert_eq!(backoff_delay(&p, 0, &FixedJitter(0.0)), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_503_with_backoff_then_succeeds() {
        let p = policy(3);
        let started = Instant::now();
        let times = Mutex::new(Vec::new());
        let out = run(budget(&p, Duration::from_secs(30)), &FixedJitter(1.0), |n, _| {
            times.lock().unwrap().push(started.elapsed());
            async move {
                if n < 3 {
                    Err(unavailable())
                } else {
                    Ok(Output {
                        value: json!("ok"),
                        truncated: false,
                        files: Vec::new(),
                    })
                }
            }
        })
        .await;
        assert_eq!(out.attempts, 3);
        assert!(out.result.is_ok());
        // Full jitter pinned at 1.0: 100 ms then 200 ms.
        assert_eq!(
            *times.lock().unwrap(),
            vec![Duration::ZERO, Duration::from_millis(100), Duration::from_millis(300)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_attempt_is_observed_once_with_its_backoff() {
        let p = policy(3);
        let seen = Mutex::new(Vec::new());
        let observe = |n: u32, err: Option<&BackendError>, next: Option<Duration>| {
            seen.lock().unwrap().push((n, err.is_some(), next));
        };
        let mut b = budget(&p, Duration::from_secs(30));
        b.on_attempt = Some(&observe);
        let out = run(b, &FixedJitter(1.0), |n, _| async move {
            if n < 3 {
                Err(unavailable())
            } else {
                Ok(Output::new(json!("ok"), false))
            }
        })
        .await;
        assert_eq!(out.attempts, 3);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                (1, true, Some(Duration::from_millis(100))),
                (2, true, Some(Duration::from_millis(200))),
                (3, false, None)
            ]
        );
        // A final failure is observed without a backoff.
        seen.lock().unwrap().clear();
        let mut b = budget(&p, Duration::from_secs(30));
        b.on_attempt = Some(&observe);
        let out = run(b, &FixedJitter(0.0), |_, _| async { Err(unavailable()) }).await;
        assert_eq!(out.attempts, 3);
        assert_eq!(seen.lock().unwrap().last(), Some(&(3, true, None)));
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_attempts_with_the_last_error() {
        let p = policy(2);
        let out = run(budget(&p, Duration::from_secs(30)), &FixedJitter(0.5), |_, _| async {
            Err(unavailable())
        })
        .await;
        assert_eq!(out.attempts, 2);
        let e = out.result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::BackendStatus);
        assert_eq!(e.status, Some(503));
    }

    #[tokio::test(start_paused = true)]
    async fn never_retries_client_errors_or_unsafe_failures() {
        let p = policy(5);
        let out = run(budget(&p, Duration::from_secs(30)), &FixedJitter(0.5), |_, _| async {
            Err(BackendError::Status {
                status: 400,
                body_excerpt: String::new(),
                retry_after: None,
            })
        })
        .await;
        assert_eq!(out.attempts, 1);
        let out = run(budget(&p, Duration::from_secs(30)), &FixedJitter(0.5), |_, _| async {
            Err(BackendError::Timeout {
                timeout: Duration::from_secs(1),
                sent: true,
                signal: None,
            })
        })
        .await;
        assert_eq!(
            out.attempts, 1,
            "a timeout after sending is retried only for idempotent tools"
        );
        let mut b = budget(&p, Duration::from_secs(30));
        b.idempotent = true;
        let out = run(b, &FixedJitter(0.5), |_, _| async {
            Err(BackendError::Timeout {
                timeout: Duration::from_secs(1),
                sent: true,
                signal: None,
            })
        })
        .await;
        assert_eq!(out.attempts, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn honours_retry_after_when_it_fits_and_stops_when_it_does_not() {
        let p = policy(3);
        let started = Instant::now();
        let out = run(
            budget(&p, Duration::from_secs(30)),
            &FixedJitter(0.0),
            |n, _| async move {
                if n == 1 {
                    Err(BackendError::Status {
                        status: 429,
                        body_excerpt: String::new(),
                        retry_after: Some(Duration::from_secs(2)),
                    })
                } else {
                    Ok(Output {
                        value: json!(1),
                        truncated: false,
                        files: Vec::new(),
                    })
                }
            },
        )
        .await;
        assert_eq!(out.attempts, 2);
        assert_eq!(started.elapsed(), Duration::from_secs(2));

        let started = Instant::now();
        let out = run(budget(&p, Duration::from_secs(5)), &FixedJitter(0.0), |_, _| async {
            Err(BackendError::Status {
                status: 429,
                body_excerpt: String::new(),
                retry_after: Some(Duration::from_secs(60)),
            })
        })
        .await;
        assert_eq!(out.attempts, 1);
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(out.result.unwrap_err().retry_after_ms, Some(60_000));
    }

    #[tokio::test(start_paused = true)]
    async fn attempt_timeouts_are_cut_to_the_deadline_and_never_overrun_it() {
        let p = policy(5);
        let started = Instant::now();
        let seen = Mutex::new(Vec::new());
        let out = run(budget(&p, Duration::from_millis(2500)), &FixedJitter(0.0), |_, t| {
            seen.lock().unwrap().push(t);
            async move {
                tokio::time::sleep(t).await;
                Err(BackendError::Connect("refused".into()))
            }
        })
        .await;
        assert!(started.elapsed() <= Duration::from_millis(2500));
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                Duration::from_secs(1),
                Duration::from_secs(1),
                Duration::from_millis(500)
            ]
        );
        assert_eq!(out.attempts, 3);
        // The last real failure is more useful to the model than "deadline exceeded".
        assert_eq!(out.result.unwrap_err().kind, ErrorKind::BackendUnreachable);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backoff_that_ends_past_the_deadline_is_not_slept() {
        let p = RetryPolicy {
            max_attempts: 5,
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(10),
        };
        let started = Instant::now();
        let out = run(budget(&p, Duration::from_secs(3)), &FixedJitter(1.0), |_, _| async {
            Err(unavailable())
        })
        .await;
        assert_eq!(out.attempts, 1);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}

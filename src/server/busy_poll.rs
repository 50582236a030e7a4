//! Busy polling on a lightly loaded serving worker: after a request starts or ends, a worker
//! that runs out of work keeps polling its sockets (tokio's I/O driver with a zero timeout) for
//! a short window instead of going to sleep in `epoll_wait`.
//!
//! Why: at low load every `/v1/execute` wakes a sleeping toolwire thread twice — for the
//! client's request and for the backend's answer — and on a virtual machine waking an idle
//! vCPU costs tens of microseconds each time (`docs/bench.md`). The backend's answer and a
//! keep-alive client's next request often arrive within ~100 µs, so a worker that polls for
//! that long picks them up without sleeping. Linux's `SO_BUSY_POLL` and user-space network
//! stacks do the same for the same reason.
//!
//! The price is CPU, so a spin is bounded three ways:
//! - it ends as soon as a request starts or ends on the worker (what it waited for came), and
//!   after `window` at most;
//! - it only happens while the worker serves at most `busy_poll.max_connections`
//!   connections: with more clients a worker seldom idles anyway, and when it does, the CPU a
//!   spin would burn is what the processes it waits for (the backends, the clients preparing
//!   their next request) need;
//! - it only happens while spins pay off: the worker remembers whether each of its last
//!   [`HISTORY`] spins saw activity before its window ran out, and stops spinning when fewer
//!   than half did (slow backends, a client that pauses between requests, a host so loaded
//!   that nothing arrives within the window), trying one spin in [`PROBE_EVERY`] to notice
//!   when they would pay off again.
//!
//! Each request start or end arms at most one spin; a spin that ends without new activity does
//! not start another, so an idle worker sleeps. `toolwire_busy_poll_spins_total{outcome}`
//! counts the spins that caught something and those that ran out. `busy_poll.window = "0s"` turns it off
//! (`docs/operations.md#busy-polling`).

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Poll, Waker};
use std::time::Instant;

use crate::config::server::BusyPollConfig;

/// How many recent spins decide whether the next one is worth it.
pub const HISTORY: u32 = 8;

/// While spins do not pay off, one armed spin in this many runs anyway (a probe).
pub const PROBE_EVERY: u32 = 16;

thread_local! {
    /// This worker's state; `None` on threads that do not busy-poll.
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    /// Bumped when a request starts or ends on this thread.
    static ACTIVITY: Cell<u64> = const { Cell::new(0) };
}

/// Whether recent spins paid off: a bit per spin, newest lowest, 1 = it saw activity. Empty
/// at first, which counts as paying off: a new worker spins until its spins show otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    bits: u32,
    /// Spins recorded so far, up to [`HISTORY`].
    len: u32,
    /// Arms declined since the last spin (for the probes).
    declined: u32,
}

impl Record {
    /// Whether the next armed spin should run; counts the declined ones for the probes.
    pub fn should_spin(&mut self) -> bool {
        let mask = (1u32 << HISTORY) - 1;
        let caught = (self.bits & mask).count_ones();
        let paying = self.len < HISTORY || caught * 2 >= HISTORY;
        if paying || self.declined + 1 >= PROBE_EVERY {
            self.declined = 0;
            true
        } else {
            self.declined += 1;
            false
        }
    }

    /// Records how a spin ended.
    pub fn record(&mut self, caught: bool) {
        self.bits = (self.bits << 1) | u32::from(caught);
        self.len = (self.len + 1).min(HISTORY);
    }
}

struct State {
    /// Spin only while this worker serves at most this many connections.
    max_connections: usize,
    /// This worker's open connections (the placement counter of `workers`).
    open: Arc<[AtomicUsize]>,
    index: usize,
    /// The activity count the last spin was armed for.
    armed_for: u64,
    /// Set by the park hook, taken by the spinner.
    kicked: bool,
    waker: Option<Waker>,
    record: Record,
    /// `toolwire_busy_poll_spins_total{outcome="caught"}` and `{outcome="ran_out"}`.
    caught: metrics::Counter,
    ran_out: metrics::Counter,
}

/// Marks a request's start when made and its end when dropped (answered or abandoned): each
/// arms one spin. One thread-local counter, so threads that do not busy-poll pay nothing worth
/// mentioning.
pub struct Activity(());

impl Activity {
    /// A request starts.
    pub fn start() -> Activity {
        bump();
        Activity(())
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        bump();
    }
}

fn bump() {
    ACTIVITY.with(|a| a.set(a.get().wrapping_add(1)));
}

fn activity() -> u64 {
    ACTIVITY.with(Cell::get)
}

/// Runs on the worker's thread: from now on its park hook may start spins, done by the task
/// this returns (spawn it on the worker's runtime). `None` when the window is zero.
pub fn install(
    settings: BusyPollConfig,
    open: Arc<[AtomicUsize]>,
    index: usize,
) -> Option<impl std::future::Future<Output = ()>> {
    let window = settings.window.0;
    if window.is_zero() {
        return None;
    }
    let (caught, ran_out) = crate::telemetry::metrics::busy_poll_spins();
    STATE.with(|s| {
        *s.borrow_mut() = Some(State {
            max_connections: settings.max_connections,
            open,
            index,
            armed_for: activity(),
            kicked: false,
            waker: None,
            record: Record::default(),
            caught,
            ran_out,
        });
    });
    Some(async move {
        loop {
            kicked().await;
            let armed_for = activity();
            let until = Instant::now() + window;
            let mut caught = false;
            while Instant::now() < until {
                // Deferred to the end of the scheduler's tick: with nothing else to run,
                // tokio polls the I/O driver with a zero timeout before resuming us.
                tokio::task::yield_now().await;
                if activity() != armed_for {
                    caught = true;
                    break;
                }
            }
            STATE.with(|s| {
                if let Ok(mut s) = s.try_borrow_mut()
                    && let Some(state) = s.as_mut()
                {
                    state.record.record(caught);
                    if caught { &state.caught } else { &state.ran_out }.increment(1);
                }
            });
        }
    })
}

/// Waits for the park hook to arm a spin.
async fn kicked() {
    poll_fn(|cx| {
        STATE.with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            };
            let Some(state) = s.as_mut() else {
                return Poll::Pending;
            };
            if state.kicked {
                state.kicked = false;
                Poll::Ready(())
            } else {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    })
    .await;
}

/// The worker's park hook part: arms a spin instead of sleeping when a request started or
/// ended since the last spin was armed, the worker is lightly loaded and spins pay off.
/// Waking the spinner here keeps tokio from parking (it checks its run queue after the hook).
pub fn before_park() {
    let waker = STATE.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return None;
        };
        let state = s.as_mut()?;
        let now = activity();
        if now == state.armed_for {
            return None;
        }
        state.armed_for = now;
        let open = state
            .open
            .get(state.index)
            .map_or(usize::MAX, |n| n.load(Ordering::Relaxed));
        if open > state.max_connections || !state.record.should_spin() {
            return None;
        }
        state.kicked = true;
        state.waker.take()
    });
    if let Some(w) = waker {
        w.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::{HISTORY, PROBE_EVERY, Record};

    #[test]
    fn spins_while_they_pay_off_and_probes_when_they_do_not() {
        let mut r = Record::default();
        // A new worker spins.
        for _ in 0..HISTORY {
            assert!(r.should_spin());
            r.record(false);
        }
        // None of the last spins saw anything: only one armed spin in PROBE_EVERY runs.
        let spun: Vec<bool> = (0..PROBE_EVERY * 2).map(|_| r.should_spin()).collect();
        assert_eq!(spun.iter().filter(|&&s| s).count(), 2, "{spun:?}");
        assert!(spun[usize::try_from(PROBE_EVERY - 1).unwrap()]);
        // Probes that catch activity bring spinning back once half the history pays off.
        for _ in 0..HISTORY / 2 {
            r.record(true);
        }
        assert!(r.should_spin());
        // One miss among them is tolerated...
        r.record(false);
        r.record(true);
        assert!(r.should_spin());
        // ...but a run of misses stops it again.
        for _ in 0..HISTORY / 2 + 1 {
            r.record(false);
        }
        assert!(!r.should_spin());
    }
}

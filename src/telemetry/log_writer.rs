//! Where log lines go: stderr, one `write` per line — except on serving workers
//! (`server::workers`), which collect their lines and write them together when the worker goes
//! idle (tokio's park hook), when [`BATCH_BYTES`] have gathered, or when the oldest waiting line
//! is [`BATCH_AGE`] old, whichever comes first.
//!
//! Why: with the default `info` filter every completion logs two lines (the tool call and the
//! request), and two `write` calls were a quarter of toolwire's system calls per request
//! (`docs/bench.md`). A worker's lines of one busy stretch now cost one. Lines stay whole and in
//! order per worker; a line waits at most until its worker is idle, the batch is full, or
//! [`BATCH_AGE`] has passed since the batch began (checked as lines arrive, so a busy worker
//! writes within that age plus one line). A process killed outright loses the lines of the
//! stretch in progress, as a buffered logger would.

use std::cell::RefCell;
use std::io;
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// A batch is written once it holds this much.
pub const BATCH_BYTES: usize = 64 * 1024;

/// A batch is written once its first line is this old (when the next line arrives).
pub const BATCH_AGE: Duration = Duration::from_millis(50);

thread_local! {
    /// The lines of this thread not yet written; `None` on threads that write each line at once.
    static BATCH: RefCell<Option<Batch>> = const { RefCell::new(None) };
}

/// Lines waiting to be written, and when the first of them arrived.
#[derive(Debug, Default)]
pub struct Batch {
    buf: Vec<u8>,
    since: Option<Instant>,
}

impl Batch {
    /// Adds one line (or part of one); true when the batch should now be written.
    pub fn add(&mut self, bytes: &[u8], now: Instant) -> bool {
        let since = *self.since.get_or_insert(now);
        self.buf.extend_from_slice(bytes);
        self.buf.len() >= BATCH_BYTES || now.saturating_duration_since(since) >= BATCH_AGE
    }

    /// Writes what is waiting to `out` and empties the batch (also when writing fails: a log
    /// line that cannot be written is dropped, as with an unbatched write).
    pub fn write_to(&mut self, out: &mut impl io::Write) {
        if !self.buf.is_empty() {
            let _ = out.write_all(&self.buf);
        }
        self.buf.clear();
        self.since = None;
    }
}

/// Makes this thread collect its log lines (a serving worker, from its start).
pub fn batch_this_thread() {
    BATCH.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = Some(Batch::default());
        }
    });
}

/// Writes this thread's waiting lines now (a worker about to sleep or stop).
pub fn flush_this_thread() {
    BATCH.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut()
            && let Some(batch) = b.as_mut()
        {
            batch.write_to(&mut io::stderr().lock());
        }
    });
}

/// The `tracing` writer: stderr, batched on the threads that asked for it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line
    }
}

/// The writer of one formatted event (`tracing-subscriber` writes each line with one
/// `write_all`).
#[derive(Debug)]
pub struct Line;

impl io::Write for Line {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let batched = BATCH.with(|b| match b.try_borrow_mut() {
            Ok(mut b) => match b.as_mut() {
                Some(batch) => {
                    if batch.add(bytes, Instant::now()) {
                        batch.write_to(&mut io::stderr().lock());
                    }
                    true
                }
                None => false,
            },
            Err(_) => false,
        });
        if !batched {
            io::stderr().lock().write_all(bytes)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_written_when_full_or_old_and_then_starts_over() {
        let start = Instant::now();
        let mut batch = Batch::default();
        let line = [b'x'; 100];
        assert!(!batch.add(&line, start));
        assert!(!batch.add(&line, start + BATCH_AGE / 2));
        // Old enough: the next line says so.
        assert!(batch.add(&line, start + BATCH_AGE));
        let mut out = Vec::new();
        batch.write_to(&mut out);
        assert_eq!(out.len(), 300);
        // Empty again, and its age starts with the next line.
        let later = start + BATCH_AGE * 10;
        assert!(!batch.add(&line, later));
        // Full: past BATCH_BYTES within the age.
        let big = vec![b'y'; BATCH_BYTES];
        assert!(batch.add(&big, later));
        let mut out = Vec::new();
        batch.write_to(&mut out);
        assert_eq!(out.len(), 100 + BATCH_BYTES);
        let mut out = Vec::new();
        batch.write_to(&mut out);
        assert!(out.is_empty());
    }
}

//! Serving workers: every client connection is served, start to end, by one of N threads, each
//! running its own single-threaded tokio runtime (thread per core).
//!
//! Why not one multi-thread runtime for everything: a request is a chain of short steps (read,
//! parse, send to the backend, wait, format, write) and under a work-stealing scheduler each
//! wake-up may land on another thread — a futex wake-up, a context switch, and memory freed on
//! a thread other than the one that allocated it. Out of process (`docs/bench.md`) that was the
//! largest item left in toolwire's CPU per completion after its own code. Here a connection,
//! the requests on it, their tool calls and the backend connections those use (each worker has
//! its own HTTP client pool: `backend::http::set_worker_slot`) stay on one thread.
//!
//! The trade-off is no work stealing between workers: a connection is placed on the worker with
//! the fewest open connections when it is accepted and stays there, so a request that burns CPU
//! (a huge completion) delays the other connections of its worker, not those of the others.
//! Tool calls mostly wait, so this is rarely felt; `workers` in the config sets the count
//! (`docs/operations.md#workers`).
//!
//! What stays on the caller's runtime: accepting (it hands each accepted socket to a worker),
//! the drain, and everything that is not a client connection (hot reload, the MCP hub's
//! connections, the reaper, metrics upkeep, trace export).

use std::net::TcpStream as StdTcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tower::ServiceExt as _;

/// One accepted connection on its way to a worker.
pub struct Job {
    /// Deregistered from the accepting runtime: the worker registers it with its own.
    pub stream: StdTcpStream,
    /// The connection's place under `limits.max_connections`, released when it closes.
    pub permit: OwnedSemaphorePermit,
    /// Lets the drain wait for this connection and tell it to finish.
    pub watcher: Watcher,
}

/// The running workers, owned by `serve`. Dropping it stops them once their connections have
/// been closed (each worker's runtime ends the connections still open when it stops).
pub struct Workers {
    queues: Vec<mpsc::UnboundedSender<Job>>,
    /// Open connections per worker, for placement.
    open: Arc<[AtomicUsize]>,
    /// Where the search for the least busy worker starts, so ties rotate.
    next: usize,
    stopped: Vec<oneshot::Receiver<()>>,
}

/// Decrements a worker's open-connection count when its connection task ends or is dropped.
struct OpenGuard {
    open: Arc<[AtomicUsize]>,
    index: usize,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        if let Some(n) = self.open.get(self.index) {
            n.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Workers {
    /// Starts `count` (at least one) worker threads serving `app`. Fails only when a thread or
    /// its runtime cannot be created.
    pub fn start(
        count: usize,
        app: &Router,
        header_timeout: Duration,
        busy_poll: &crate::config::server::BusyPollConfig,
    ) -> std::io::Result<Workers> {
        let count = count.max(1);
        let open: Arc<[AtomicUsize]> = (0..count).map(|_| AtomicUsize::new(0)).collect();
        let mut workers = Workers {
            queues: Vec::with_capacity(count),
            open,
            next: 0,
            stopped: Vec::with_capacity(count),
        };
        for index in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                // The worker's log lines of a busy stretch are written together when it idles.
                .on_thread_park(|| {
                    crate::telemetry::log_writer::flush_this_thread();
                    super::busy_poll::before_park();
                })
                .build()?;
            // Unbounded on purpose: every job holds a connection permit, so the queue can never
            // hold more than `limits.max_connections`.
            let (queue, jobs) = mpsc::unbounded_channel();
            let (stopped, on_stop) = oneshot::channel();
            let app = app.clone();
            let open = Arc::clone(&workers.open);
            let busy_poll = busy_poll.clone();
            std::thread::Builder::new()
                .name(format!("tw-worker-{index}"))
                .spawn(move || {
                    run(Worker {
                        index,
                        runtime,
                        jobs,
                        app,
                        header_timeout,
                        open,
                        busy_poll,
                        stopped,
                    });
                })?;
            workers.queues.push(queue);
            workers.stopped.push(on_stop);
        }
        Ok(workers)
    }

    /// Hands `job` to the worker with the fewest open connections. A worker that has stopped
    /// (it cannot, short of a bug) is skipped; with none left the job comes back.
    pub fn dispatch(&mut self, mut job: Job) -> Result<(), Job> {
        let count = self.queues.len();
        let start = self.next;
        self.next = (self.next + 1) % count.max(1);
        let mut order: Vec<usize> = (0..count).map(|i| (start + i) % count).collect();
        order.sort_by_key(|&i| self.open.get(i).map_or(usize::MAX, |n| n.load(Ordering::Relaxed)));
        for i in order {
            let (Some(queue), Some(open)) = (self.queues.get(i), self.open.get(i)) else {
                continue;
            };
            open.fetch_add(1, Ordering::Relaxed);
            match queue.send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(back)) => {
                    open.fetch_sub(1, Ordering::Relaxed);
                    job = back;
                }
            }
        }
        Err(job)
    }

    /// Stops the workers (after the drain): their queues close, each runtime ends what is left
    /// on it, and this waits up to `limit` for the threads to finish.
    pub async fn stop(self, limit: Duration) {
        let Workers { queues, stopped, .. } = self;
        drop(queues);
        let all = futures_util::future::join_all(stopped);
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!("Some serving workers did not stop in time; exiting anyway.");
        }
    }
}

/// What one worker thread runs with.
struct Worker {
    index: usize,
    runtime: tokio::runtime::Runtime,
    jobs: mpsc::UnboundedReceiver<Job>,
    app: Router,
    header_timeout: Duration,
    open: Arc<[AtomicUsize]>,
    busy_poll: crate::config::server::BusyPollConfig,
    stopped: oneshot::Sender<()>,
}

/// One worker thread: serves the connections it is given until its queue closes.
fn run(worker: Worker) {
    let Worker {
        index,
        runtime,
        mut jobs,
        app,
        header_timeout,
        open,
        busy_poll,
        stopped,
    } = worker;
    crate::backend::http::set_worker_slot(index);
    crate::telemetry::log_writer::batch_this_thread();
    let spinner = super::busy_poll::install(busy_poll, Arc::clone(&open), index);
    runtime.block_on(async move {
        if let Some(spinner) = spinner {
            tokio::spawn(spinner);
        }
        while let Some(Job {
            stream,
            permit,
            watcher,
        }) = jobs.recv().await
        {
            let guard = OpenGuard {
                open: Arc::clone(&open),
                index,
            };
            let stream = match TcpStream::from_std(stream) {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "Cannot take over an accepted connection.");
                    continue;
                }
            };
            let app = app.clone();
            tokio::spawn(async move {
                connection(stream, app, header_timeout, watcher).await;
                drop(permit);
                drop(guard);
            });
        }
    });
    // Ends the connections still open (the drain is over) before saying so.
    drop(runtime);
    crate::telemetry::log_writer::flush_this_thread();
    let _ = stopped.send(());
}

/// Serves one connection with hyper's HTTP/1.1 server (keep-alive, the header timeout) until
/// the client closes it or the drain tells it to finish; a connection ended while its client
/// was still sending is closed gently ([`super::linger`]).
async fn connection(stream: TcpStream, app: Router, header_timeout: Duration, watcher: Watcher) {
    let (stream, leftover) = super::linger::LingeringStream::new(stream);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let activity = super::busy_poll::Activity::start();
        let answer = app.clone().oneshot(req.map(Body::new));
        async move {
            let answer = answer.await;
            drop(activity);
            answer
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(error = %e, "Connection ended with an error.");
    }
    super::linger::close(&leftover).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::server::graceful::GracefulShutdown;
    use std::io::{Read as _, Write as _};

    /// Sends one keep-alive request on `conn` and returns the body of the answer (the handler
    /// answers with the name of the thread that served it).
    fn ask(conn: &mut StdTcpStream) -> String {
        conn.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed early");
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if body.len() >= len {
                    return body[..len].to_owned();
                }
            }
        }
    }

    /// Connections go to the least busy worker, and every request of a connection is served on
    /// that worker's thread; stopping the workers ends their threads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_connection_stays_on_the_least_busy_worker() {
        let app = Router::new().route(
            "/",
            axum::routing::get(|| async { std::thread::current().name().unwrap_or("?").to_owned() }),
        );
        let busy_poll = crate::config::server::BusyPollConfig {
            window: crate::config::duration::HumanDuration(Duration::from_micros(200)),
            max_connections: 2,
        };
        let mut workers = Workers::start(2, &app, Duration::from_secs(5), &busy_poll).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let slots = Arc::new(tokio::sync::Semaphore::new(8));
        let graceful = GracefulShutdown::new();
        let mut clients = Vec::new();
        for _ in 0..2 {
            let client = StdTcpStream::connect(addr).unwrap();
            let (server, _) = listener.accept().unwrap();
            server.set_nonblocking(true).unwrap();
            let job = Job {
                stream: server,
                permit: Arc::clone(&slots).try_acquire_owned().unwrap(),
                watcher: graceful.watcher(),
            };
            assert!(workers.dispatch(job).is_ok());
            clients.push(client);
        }
        let served: Vec<String> = tokio::task::spawn_blocking(move || {
            let mut served = Vec::new();
            for round in 0..3 {
                for (i, client) in clients.iter_mut().enumerate() {
                    let name = ask(client);
                    if round == 0 {
                        served.push(name);
                    } else {
                        assert_eq!(name, served[i], "a connection moved between workers");
                    }
                }
            }
            served
        })
        .await
        .unwrap();
        let mut names = served.clone();
        names.sort();
        assert_eq!(names, ["tw-worker-0", "tw-worker-1"], "{served:?}");
        // The clients are gone (dropped with the blocking task): the connections end, their
        // permits come back, and the workers stop.
        tokio::time::timeout(Duration::from_secs(5), graceful.shutdown())
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while slots.available_permits() < 8 || workers.open.iter().any(|n| n.load(Ordering::Relaxed) > 0) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            let all = workers.stopped.split_off(0);
            drop(workers.queues.split_off(0));
            for stopped in all {
                stopped.await.unwrap();
            }
        })
        .await
        .unwrap();
    }
}

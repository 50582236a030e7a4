//! Log capture for I5 ("no secret value and no argument payload in the logs"): one global
//! tracing subscriber per test binary writes every event (debug level and up) into a shared
//! buffer that tests search.

use std::io;
use std::sync::{Mutex, Once, PoisonError};

static BUF: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct BufWriter;

impl io::Write for BufWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        BUF.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber (once per process). Everything toolwire logs at debug
/// level or above, and what its libraries log at info or above, lands in the buffer.
pub fn capture() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info,toolwire=debug"))
            .with_ansi(false)
            .with_writer(|| BufWriter)
            .try_init();
    });
}

/// The buffer's length now (to look at what one test logged).
pub fn mark() -> usize {
    BUF.lock().unwrap_or_else(PoisonError::into_inner).len()
}

/// Everything logged since `from` (a [`mark`]).
pub fn since(from: usize) -> String {
    let buf = BUF.lock().unwrap_or_else(PoisonError::into_inner);
    String::from_utf8_lossy(buf.get(from..).unwrap_or_default()).into_owned()
}

/// Everything logged so far by this test binary.
pub fn all() -> String {
    since(0)
}

/// I5: none of `needles` appears anywhere in the captured logs.
pub fn assert_absent(needles: &[&str]) {
    let text = all();
    for n in needles.iter().filter(|n| !n.is_empty()) {
        if let Some(pos) = text.find(n) {
            let start = text[..pos].rfind('\n').map_or(0, |p| p + 1);
            let end = text[pos..].find('\n').map_or(text.len(), |p| pos + p);
            panic!("I5: the logs contain the value `{n}`:\n{}", &text[start..end]);
        }
    }
}

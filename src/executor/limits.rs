//! Per-tool concurrency caps (`concurrency = N` in a tool file).
//!
//! They live in the executor, not in the tool set, so a hot reload does not reset them: calls
//! still running on the previous set keep counting against the cap that new calls see. A
//! changed `N` takes effect for new calls at once (the old semaphore is dropped once its last
//! permit is released).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Semaphore;

/// The caps, by tool name.
#[derive(Default)]
pub struct ToolLimits {
    by_tool: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
}

impl ToolLimits {
    /// The semaphore of `tool` with `limit` slots (made on first use, replaced when the limit
    /// changes).
    pub fn get(&self, tool: &str, limit: usize) -> Arc<Semaphore> {
        let mut map = self.by_tool.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((n, sem)) = map.get(tool)
            && *n == limit
        {
            return Arc::clone(sem);
        }
        let sem = Arc::new(Semaphore::new(limit));
        map.insert(tool.to_owned(), (limit, Arc::clone(&sem)));
        sem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_tool_and_limit_share_one_semaphore() {
        let l = ToolLimits::default();
        let a = l.get("t", 2);
        let _p = Arc::clone(&a).try_acquire_owned().unwrap();
        assert_eq!(l.get("t", 2).available_permits(), 1, "a reload keeps the count");
        assert_eq!(l.get("t", 3).available_permits(), 3, "a new limit starts a new cap");
        assert_eq!(l.get("u", 1).available_permits(), 1);
    }
}

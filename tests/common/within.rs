//! A bound on a call that could block (lengths_input.rs, shared_plan_faults.rs): a reader that
//! opens a pipe twice, or a FIFO, waits forever for a writer that never comes.

use std::sync::mpsc;
use std::time::Duration;

/// `f`'s result, or a failed test if it takes longer than 20 s (the thread is left behind).
pub fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: still running after 20 s (a hang)"))
}

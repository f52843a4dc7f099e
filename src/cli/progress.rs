//! Progress of a long command, on stderr, for a person watching a terminal.
//!
//! Shown only where stderr is a terminal: a pipe or a file gets nothing, because a log would
//! fill with redrawn lines and scripts (and the tests) read stderr for errors alone. Shown only
//! once the command has run for a second, so that a quick one stays as quiet as any other. Each
//! update redraws one line (carriage return, then clear to its end), at most ten times a second,
//! and the line is cleared when the work ends, before the output or an error is written. It goes
//! straight to stderr rather than through main's writer: it is not the command's output, and must
//! be seen while the work goes on.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

/// How long a command runs before it shows its progress.
const QUIET_FOR: Duration = Duration::from_secs(1);
/// The least time between two redraws: often enough to read as moving, without a write to the
/// terminal for every step of fast work.
const REDRAW_EVERY: Duration = Duration::from_millis(100);

/// Return to the start of the line and clear it.
const CLEAR_LINE: &str = "\r\x1b[K";

pub struct Progress<W: Write> {
    /// Where to draw, or none (stderr is not a terminal).
    to: Option<W>,
    start: Instant,
    quiet_for: Duration,
    redraw_every: Duration,
    /// When the line on the terminal was drawn, if one is there (to clear at the end).
    drawn: Option<Instant>,
}

impl Progress<io::Stderr> {
    /// Progress on stderr, if it is a terminal.
    pub fn on_stderr() -> Self {
        let stderr = io::stderr();
        let to = stderr.is_terminal().then_some(stderr);
        Progress::new(to, QUIET_FOR, REDRAW_EVERY)
    }
}

impl<W: Write> Progress<W> {
    fn new(to: Option<W>, quiet_for: Duration, redraw_every: Duration) -> Self {
        Progress {
            to,
            start: Instant::now(),
            quiet_for,
            redraw_every,
            drawn: None,
        }
    }

    /// Says what the command is doing now, once it has run long enough; `what` is only
    /// formatted then.
    pub fn show(&mut self, what: impl FnOnce() -> String) {
        let Some(to) = &mut self.to else { return };
        let recent = self
            .drawn
            .is_some_and(|at| at.elapsed() < self.redraw_every);
        if self.start.elapsed() < self.quiet_for || recent {
            return;
        }
        // A failed write to stderr is ignored: progress is a courtesy, and stderr is where its
        // failure would be reported.
        let _ = write!(to, "{CLEAR_LINE}{}", what()).and_then(|()| to.flush());
        self.drawn = Some(Instant::now());
    }

    /// Clears the line, if one was drawn: the work is done.
    pub fn finish(&mut self) {
        if let (Some(to), Some(_)) = (&mut self.to, self.drawn.take()) {
            let _ = write!(to, "{CLEAR_LINE}").and_then(|()| to.flush());
        }
    }
}

impl<W: Write> Drop for Progress<W> {
    /// An error ends the work too: its message starts on a clear line.
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_redrawn_in_place_and_cleared_at_the_end() {
        let mut terminal = Vec::new();
        let mut progress = Progress::new(Some(&mut terminal), Duration::ZERO, Duration::ZERO);
        progress.show(|| "t_max 30 (1 of 2)".into());
        progress.show(|| "t_max 40 (2 of 2)".into());
        progress.finish();
        drop(progress);
        let text = String::from_utf8(terminal).unwrap();
        assert_eq!(
            text,
            "\r\x1b[Kt_max 30 (1 of 2)\r\x1b[Kt_max 40 (2 of 2)\r\x1b[K"
        );
    }

    #[test]
    fn nothing_is_drawn_before_its_time_or_anywhere_but_a_terminal() {
        let mut terminal = Vec::new();
        let hour = Duration::from_secs(3600);
        let mut progress = Progress::new(Some(&mut terminal), hour, Duration::ZERO);
        progress.show(|| unreachable!("formatted though not shown"));
        drop(progress);
        assert!(terminal.is_empty());
        let mut progress = Progress::<Vec<u8>>::new(None, Duration::ZERO, Duration::ZERO);
        progress.show(|| unreachable!("formatted without a terminal"));
        // Drawn once, then not again until the redraw interval has passed.
        let mut progress = Progress::new(Some(&mut terminal), Duration::ZERO, hour);
        progress.show(|| "first".into());
        progress.show(|| unreachable!("redrawn too soon"));
        drop(progress);
        assert_eq!(terminal, b"\r\x1b[Kfirst\r\x1b[K");
    }

    #[test]
    fn dropping_clears_a_drawn_line() {
        let mut terminal = Vec::new();
        let mut progress = Progress::new(Some(&mut terminal), Duration::ZERO, Duration::ZERO);
        progress.show(|| "working".into());
        drop(progress);
        assert_eq!(terminal, b"\r\x1b[Kworking\r\x1b[K");
    }
}

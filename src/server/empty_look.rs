//! A periodic look that found nothing need not read again until a watched commit: whatever
//! could give it something (a queued run, a run started, work left to settle) is committed
//! as a watched write, which moves the store's commit counter (`Store::commit_count`). An
//! idle server's timers then wake without reading the store: on a virtual machine each read
//! after a quiet spell touches memory gone cold, which cost 1–2 ms of CPU a look
//! (docs/PERFORMANCE.md, thirty-sixth round).
//!
//! Architecture Invariant: the emptiness a look records depends on the stored rows alone,
//! never on the clock (a queued run coming due, a claim expiring): no queued row at all, no
//! running row at all, no unsettled work. And the count is taken before the look's read
//! begins: a commit that read missed became visible after the read began, so the counter
//! moved after the count was taken.

/// The commit count under which a look last found nothing; `None` when it found something
/// or has not looked yet.
#[derive(Debug, Default)]
pub struct EmptyLook {
    empty_at: Option<u64>,
}

impl EmptyLook {
    /// Whether the last look found nothing and no watched commit came since (`count` is the
    /// counter now): a new look would find nothing either.
    pub fn still_empty(&self, count: u64) -> bool {
        self.empty_at == Some(count)
    }

    /// The outcome of a look whose read began after `count` was taken.
    pub fn record(&mut self, count: u64, empty: bool) {
        self.empty_at = empty.then_some(count);
    }
}

#[cfg(test)]
mod tests {
    use super::EmptyLook;

    #[test]
    fn an_empty_look_holds_until_the_next_commit_and_never_before_a_first_look() {
        let mut look = EmptyLook::default();
        assert!(!look.still_empty(0), "nothing is known before the first look");
        look.record(7, true);
        assert!(look.still_empty(7));
        assert!(!look.still_empty(8), "a commit since may have brought something");
    }

    #[test]
    fn a_look_that_found_something_is_never_skipped() {
        let mut look = EmptyLook::default();
        look.record(7, true);
        look.record(7, false);
        assert!(!look.still_empty(7));
        look.record(9, true);
        assert!(look.still_empty(9));
        assert!(!look.still_empty(7), "an older count is not this one");
    }
}

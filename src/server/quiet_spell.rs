//! When a quiet server gives back its cache memory (`memory::release`): once per quiet spell,
//! after the spell lasted `release_after`. The scheduler looks at a tick, and a whole run can
//! start and end between two ticks (a 10-step run takes ~10 ms, a tick comes at most every
//! 500 ms); such a run left its watched commits on the store's counter
//! (`Store::commit_count`). So a look that finds the server quiet but the counter moved
//! starts the spell again: runs arriving a second apart never pay for cold caches (the
//! writer re-reading ~35 pages and preparing its statements again), which a look at the
//! runner count alone let happen (docs/PERFORMANCE.md, thirty-seventh round).
//!
//! Architecture Invariant: memory is released at most once per spell, and only after a look
//! that found the server quiet with the counter where the spell's first look left it at
//! least `release_after` earlier.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct QuietSpell {
    release_after: Duration,
    /// When the current spell began and the commit count then; `None` while busy.
    began: Option<(Instant, u64)>,
    released: bool,
}

impl QuietSpell {
    pub fn new(release_after: Duration) -> Self {
        Self {
            release_after,
            began: None,
            released: false,
        }
    }

    /// One look: whether the server is `quiet` (nothing queued, no runner) and the commit
    /// count `now`. True when the caller should release memory now.
    pub fn look(&mut self, quiet: bool, commits: u64, now: Instant) -> bool {
        match self.began {
            Some((since, at)) if quiet && at == commits => {
                let due = !self.released && now.saturating_duration_since(since) >= self.release_after;
                self.released |= due;
                due
            }
            // A commit since the spell began: whatever it was, the spell starts again here.
            _ if quiet => {
                self.began = Some((now, commits));
                self.released = false;
                false
            }
            _ => {
                self.began = None;
                self.released = false;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QuietSpell;
    use std::time::{Duration, Instant};

    const AFTER: Duration = Duration::from_secs(2);

    #[test]
    fn a_spell_without_commits_releases_once_after_its_length() {
        let (mut spell, start) = (QuietSpell::new(AFTER), Instant::now());
        assert!(!spell.look(true, 5, start), "a first quiet look only begins the spell");
        assert!(!spell.look(true, 5, start + Duration::from_millis(1_999)));
        assert!(spell.look(true, 5, start + AFTER));
        assert!(!spell.look(true, 5, start + AFTER * 10), "once per spell");
    }

    #[test]
    fn runs_between_looks_keep_the_memory_though_every_look_finds_the_server_quiet() {
        let (mut spell, start) = (QuietSpell::new(AFTER), Instant::now());
        // A run every 600 ms, each over before the next look: the counter moves each time.
        for look in 0..20u32 {
            let now = start + Duration::from_millis(600) * look;
            assert!(
                !spell.look(true, u64::from(look), now),
                "look {look} released during runs"
            );
        }
        let last = start + Duration::from_millis(600) * 19;
        assert!(!spell.look(true, 19, last + Duration::from_millis(1_999)));
        assert!(spell.look(true, 19, last + AFTER), "the spell after the last run");
    }

    #[test]
    fn a_busy_look_ends_the_spell_and_a_new_one_releases_again() {
        let (mut spell, start) = (QuietSpell::new(AFTER), Instant::now());
        spell.look(true, 1, start);
        assert!(spell.look(true, 1, start + AFTER));
        assert!(!spell.look(false, 1, start + AFTER * 2), "busy: nothing to release");
        assert!(!spell.look(true, 1, start + AFTER * 3), "a new spell begins");
        assert!(spell.look(true, 1, start + AFTER * 4));
    }
}

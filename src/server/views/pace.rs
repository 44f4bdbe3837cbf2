//! How often a live feed rebuilds: at once after a change, up to a burst; under a longer
//! stream of changes at a steady rate, the changes in between coalescing into the next view.
//!
//! Why a burst: a short run's whole life (admission, ready, a few batches of results, its
//! end) is a handful of commits within a few ms. A fixed interval after each rebuild put
//! every change after the subscription's first view up to one interval late — a 20 ms run
//! was seen ending ~50 ms after it started. A run that changes all the time still costs its
//! feed at most one rebuild per interval once its burst is spent.
//!
//! A look that found nothing new (another run committed) spends no rebuild; it is spaced by
//! a gap that starts small (a run whose own commits interleave with others' is seen at once)
//! and doubles with each empty look up to the interval, so a quiet run's feed beside busy
//! ones looks at most once per interval, as it always did, and a rebuild makes it small
//! again. With no commits at all a feed waits for one and looks at once (the gap has passed).
//!
//! A rebuild is followed by no gap: the next commit is looked at as soon as it lands, within
//! the burst. Why: a short run's last commits come less than a gap apart (its last results,
//! its end), and a gap after each rebuild held its end back by up to the gap (a `--follow`
//! saw an idle server's 10-step run end ~1.3 ms later). A look after a rebuild that finds
//! another run's commit costs one empty look, and then the gap applies.

use std::time::Duration;

use tokio::time::Instant;

/// A rebuild budget: `burst_max` back to back, refilled one per `interval` (a generic cell
/// rate: `due` is when the next rebuild would be due on a steady schedule).
#[derive(Debug)]
pub struct Pace {
    interval: Duration,
    /// How far ahead of now the schedule may run: `burst_max - 1` intervals.
    tolerance: Duration,
    check_gap_min: Duration,
    /// The gap after the next empty look: doubles per empty look, up to `interval`.
    check_gap: Duration,
    due: Instant,
}

impl Pace {
    pub fn new(interval_ms: u64, burst_max: u32, check_gap_ms: u64) -> Self {
        assert!(
            interval_ms > 0 && burst_max >= 1,
            "a pace needs an interval and a burst of at least one"
        );
        assert!(
            check_gap_ms <= interval_ms,
            "a check is never spaced wider than a rebuild"
        );
        let interval = Duration::from_millis(interval_ms);
        Self {
            interval,
            tolerance: interval * (burst_max - 1),
            check_gap_min: Duration::from_millis(check_gap_ms),
            check_gap: Duration::from_millis(check_gap_ms),
            due: Instant::now(),
        }
    }

    /// Record the look that started at `looked_at` (`rebuilt`: it built and published a view),
    /// and return when the next look may start.
    pub fn next_after(&mut self, looked_at: Instant, rebuilt: bool) -> Instant {
        let gap = if rebuilt {
            self.due = self.due.max(looked_at) + self.interval;
            self.check_gap = self.check_gap_min;
            Duration::ZERO
        } else {
            let gap = self.check_gap;
            self.check_gap = (gap * 2).min(self.interval);
            gap
        };
        let budget_allows = self.due.checked_sub(self.tolerance).unwrap_or(looked_at);
        budget_allows.max(looked_at + gap)
    }

    /// Wait until the next look after the one that started at `looked_at` may start.
    pub async fn wait_after(&mut self, looked_at: Instant, rebuilt: bool) {
        tokio::time::sleep_until(self.next_after(looked_at, rebuilt)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL_MS: u64 = 50;
    const BURST_MAX: u32 = 4;
    const CHECK_GAP_MS: u64 = 2;

    fn ms(duration: Duration) -> u64 {
        duration.as_millis() as u64
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_is_rebuilt_at_once_then_one_per_interval() {
        let start = Instant::now();
        let mut pace = Pace::new(INTERVAL_MS, BURST_MAX, CHECK_GAP_MS);
        let mut offsets = Vec::new();
        for _ in 0..BURST_MAX + 3 {
            let looked_at = Instant::now();
            offsets.push(ms(looked_at - start));
            pace.wait_after(looked_at, true).await;
        }
        // The burst goes out back to back; after it, one rebuild per interval.
        assert_eq!(offsets, vec![0, 0, 0, 0, 50, 100, 150]);
    }

    #[tokio::test(start_paused = true)]
    async fn empty_looks_back_off_to_the_interval_and_spend_no_rebuild() {
        let mut pace = Pace::new(INTERVAL_MS, BURST_MAX, CHECK_GAP_MS);
        let mut gaps = Vec::new();
        for _ in 0..8 {
            let looked_at = Instant::now();
            pace.wait_after(looked_at, false).await;
            gaps.push(ms(Instant::now() - looked_at));
        }
        // A quiet run's feed beside busy ones: at most one look per interval after a few.
        assert_eq!(gaps, vec![2, 4, 8, 16, 32, 50, 50, 50]);
        // The budget stayed whole, and a rebuild makes the gap small again: a whole burst
        // follows at once.
        let before_burst = Instant::now();
        for _ in 1..BURST_MAX {
            pace.wait_after(Instant::now(), true).await;
        }
        assert_eq!(ms(Instant::now() - before_burst), 0);
        let looked_at = Instant::now();
        assert_eq!(
            pace.next_after(looked_at, false),
            looked_at + Duration::from_millis(CHECK_GAP_MS),
            "after a rebuild an empty look is spaced by the smallest gap again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_waits_and_refills_after_a_quiet_spell() {
        let start = Instant::now();
        let mut pace = Pace::new(INTERVAL_MS, BURST_MAX, CHECK_GAP_MS);
        let mut next = start;
        for _ in 0..BURST_MAX {
            next = pace.next_after(start, true);
        }
        // Spent: the next rebuild waits for one interval's refill, not only a check gap.
        assert_eq!(next, start + Duration::from_millis(INTERVAL_MS));
        // Quiet for a whole burst's worth of intervals: the next change is rebuilt at once again.
        tokio::time::advance(Duration::from_millis(INTERVAL_MS * u64::from(BURST_MAX))).await;
        let later = Instant::now();
        assert_eq!(pace.next_after(later, true), later);
    }

    #[test]
    #[should_panic(expected = "a burst of at least one")]
    fn a_pace_without_a_burst_is_refused() {
        let _ = Pace::new(INTERVAL_MS, 0, CHECK_GAP_MS);
    }
}

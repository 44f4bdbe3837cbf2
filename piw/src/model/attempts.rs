//! Every attempt of the selected run that piw has seen: the view's newest window plus the
//! `view.page` pages read on demand, in attempt order and without duplicates. The node
//! states drawn on the graph come from here (the newest attempt of each node up to the
//! timeline cursor), computed once per change rather than once per frame.

use std::collections::HashMap;

use super::view::Attempt;

#[derive(Debug, Default, Clone)]
pub struct Attempts {
    /// Sorted by `seq`, unique.
    items: Vec<Attempt>,
    /// Attempts the run has in all (the view's `history.total`).
    pub total: i64,
    /// Where the next forward page from the start continues (`None` before the first).
    pub next_after: Option<i64>,
    /// Paging from the start reached the view's window: nothing is missing.
    pub joined: bool,
}

impl Attempts {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn items(&self) -> &[Attempt] {
        &self.items
    }

    pub fn get(&self, index: usize) -> Option<&Attempt> {
        self.items.get(index)
    }

    /// Merge attempts (a newer copy of the same `seq` replaces the older one): the batch is
    /// sorted on its own, then merged in one pass, so a page costs O(held + page).
    pub fn merge(&mut self, attempts: impl IntoIterator<Item = Attempt>) {
        let mut incoming: Vec<Attempt> = attempts.into_iter().collect();
        if incoming.is_empty() {
            return;
        }
        incoming.sort_by_key(|a| a.seq);
        // Within the batch the last copy of a seq wins.
        incoming.dedup_by(|later, earlier| {
            let same = later.seq == earlier.seq;
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });
        if self.items.last().is_none_or(|last| last.seq < incoming[0].seq) {
            self.items.append(&mut incoming);
            return;
        }
        let held = std::mem::take(&mut self.items);
        self.items = merge_sorted(held, incoming);
    }

    /// Older attempts exist that are not loaded yet.
    pub fn has_gap(&self) -> bool {
        !self.joined && (self.items.len() as i64) < self.total
    }

    /// The newest attempt of each node path among the first `upto` attempts.
    pub fn node_states(&self, upto: usize) -> HashMap<String, Attempt> {
        // Newest first, so each node's attempt is cloned once, not once per visit.
        let mut states: HashMap<String, Attempt> = HashMap::new();
        for attempt in self.items[..upto.min(self.items.len())].iter().rev() {
            if !states.contains_key(&attempt.node_path) {
                states.insert(attempt.node_path.clone(), attempt.clone());
            }
        }
        states
    }
}

/// Two lists sorted by seq, one; on equal seqs the `newer` copy is kept.
fn merge_sorted(held: Vec<Attempt>, newer: Vec<Attempt>) -> Vec<Attempt> {
    let mut merged = Vec::with_capacity(held.len() + newer.len());
    let mut held = held.into_iter().peekable();
    let mut newer = newer.into_iter().peekable();
    loop {
        let order = match (held.peek(), newer.peek()) {
            (None, None) => return merged,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(old), Some(new)) => old.seq.cmp(&new.seq),
        };
        let next = match order {
            std::cmp::Ordering::Less => held.next(),
            std::cmp::Ordering::Greater => newer.next(),
            std::cmp::Ordering::Equal => {
                held.next();
                newer.next()
            }
        };
        merged.extend(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(seq: i64, path: &str, status: &str) -> Attempt {
        Attempt {
            seq,
            node_path: path.into(),
            status: status.into(),
            ..Attempt::default()
        }
    }

    #[test]
    fn merging_keeps_order_and_replaces_the_same_attempt() {
        let mut attempts = Attempts::default();
        attempts.merge([attempt(5, "b", "running"), attempt(9, "c", "running")]);
        attempts.merge([attempt(1, "a", "completed"), attempt(5, "b", "completed")]);
        let seqs: Vec<_> = attempts.items().iter().map(|a| a.seq).collect();
        assert_eq!(seqs, vec![1, 5, 9]);
        assert_eq!(attempts.items()[1].status, "completed");
        // Several older attempts at once, some already held.
        attempts.merge([
            attempt(3, "x", "completed"),
            attempt(2, "y", "completed"),
            attempt(1, "a", "failed"),
        ]);
        let seqs: Vec<_> = attempts.items().iter().map(|a| a.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 5, 9]);
        assert_eq!(attempts.items()[0].status, "failed");
        let states = attempts.node_states(2);
        assert_eq!(states.len(), 2);
        assert!(!states.contains_key("x"));
    }
}

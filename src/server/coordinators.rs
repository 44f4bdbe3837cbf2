//! Coordinators: which client connection may send workflow messages into an origin session
//! and report its branch and turns (docs/SESSIONS.md "Coordinators"). One active coordinator
//! per session, under a process-local epoch that only grows while the server lives; a new
//! coordinator fences the old one, and a connection's epochs end when it closes.
//!
//! Architecture Invariant: imports only `shared` (its lock helper); holds no durable state (a restarted server
//! starts with no coordinators, and each extension claims again after it reconnects). Session
//! IDs are kept only as map keys, never logged.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use super::shared::lock;

/// Sessions with an active coordinator at once, at most (one per open Pi session).
pub const COORDINATED_SESSIONS_MAX: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holder {
    connection: u64,
    epoch: u64,
}

/// Why an epoch may not act for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Another connection claimed the session since (or this epoch was never issued).
    Replaced,
    /// No coordinator holds the session.
    NoCoordinator,
}

pub struct Coordinators {
    holders: Mutex<HashMap<String, Holder>>,
    next_epoch: Mutex<u64>,
    /// Bumped at every claim and release, so views rendered per subscriber notice.
    changes: watch::Sender<u64>,
}

impl Default for Coordinators {
    fn default() -> Self {
        Self {
            holders: Mutex::new(HashMap::new()),
            next_epoch: Mutex::new(0),
            changes: watch::channel(0).0,
        }
    }
}

impl Coordinators {
    /// Make `connection` the coordinator of `session` under a new epoch (fencing any other);
    /// `None` when the server already coordinates its bound of sessions.
    pub fn claim(&self, session: &str, connection: u64) -> Option<u64> {
        let mut holders = lock(&self.holders);
        if !holders.contains_key(session) && holders.len() >= COORDINATED_SESSIONS_MAX {
            return None;
        }
        let epoch = {
            let mut next = lock(&self.next_epoch);
            *next += 1;
            *next
        };
        holders.insert(session.to_string(), Holder { connection, epoch });
        drop(holders);
        self.changes.send_modify(|changes| *changes += 1);
        Some(epoch)
    }

    /// The active epoch of `session`, if a coordinator holds it.
    pub fn active_epoch(&self, session: &str) -> Option<u64> {
        lock(&self.holders).get(session).map(|holder| holder.epoch)
    }

    /// `epoch` may act for `session` now.
    pub fn check(&self, session: &str, epoch: u64) -> Result<(), Fenced> {
        match lock(&self.holders).get(session) {
            Some(holder) if holder.epoch == epoch => Ok(()),
            Some(_) => Err(Fenced::Replaced),
            None => Err(Fenced::NoCoordinator),
        }
    }

    /// The connection closed: its epochs end (an open turn does not).
    pub fn release_connection(&self, connection: u64) {
        let mut holders = lock(&self.holders);
        let before = holders.len();
        holders.retain(|_, holder| holder.connection != connection);
        let released = holders.len() != before;
        drop(holders);
        if released {
            self.changes.send_modify(|changes| *changes += 1);
        }
    }

    /// Changes of any session's coordinator (a counter).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_coordinator_fences_the_old_one_and_a_closed_connection_releases() {
        let coordinators = Coordinators::default();
        let first = coordinators.claim("s", 1).expect("claim");
        assert_eq!(coordinators.check("s", first), Ok(()));
        let second = coordinators.claim("s", 2).expect("claim again");
        assert!(second > first, "epochs only grow");
        assert_eq!(coordinators.check("s", first), Err(Fenced::Replaced));
        assert_eq!(coordinators.check("s", second), Ok(()));
        coordinators.release_connection(1);
        assert_eq!(
            coordinators.check("s", second),
            Ok(()),
            "the fenced connection releases nothing"
        );
        coordinators.release_connection(2);
        assert_eq!(coordinators.check("s", second), Err(Fenced::NoCoordinator));
        assert_eq!(coordinators.active_epoch("s"), None);
    }
}

//! Fencing by epoch and generation: a message is admitted only when it carries exactly the
//! stamp its owner issued last. An older server epoch or an older child generation is
//! stale; a newer one was never issued and is refused too.

use serde::{Deserialize, Serialize};

/// What every message from a supervised child carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// The epoch of the owner (e.g. the server epoch) that started the child.
    pub epoch: u64,
    /// The child's generation (e.g. the claim generation of a run).
    pub generation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("stale epoch {got} (current {current}): the message comes from before a restart of its owner")]
    StaleEpoch { got: u64, current: u64 },
    #[error("stale generation {got} (current {current}): a newer child replaced the sender")]
    StaleGeneration { got: u64, current: u64 },
    #[error("stamp {got:?} was never issued (current {current:?})")]
    NeverIssued { got: Stamp, current: Stamp },
}

/// The owner's view of the one stamp it currently admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    current: Stamp,
}

impl Fence {
    pub fn new(epoch: u64) -> Self {
        Self {
            current: Stamp { epoch, generation: 0 },
        }
    }

    /// The fence of an owner that knows the one stamp it issued (e.g. a child started with
    /// the claim generation the store granted): everything else is refused.
    pub fn issued(current: Stamp) -> Self {
        Self { current }
    }

    pub fn current(&self) -> Stamp {
        self.current
    }

    /// Issue the stamp of a new child generation; everything older becomes stale.
    pub fn next_generation(&mut self) -> Stamp {
        self.current.generation += 1;
        self.current
    }

    /// Check a stamp before reading anything else of the message.
    pub fn admit(&self, got: Stamp) -> Result<(), Refused> {
        let current = self.current;
        if got.epoch < current.epoch {
            return Err(Refused::StaleEpoch {
                got: got.epoch,
                current: current.epoch,
            });
        }
        if got.epoch == current.epoch && got.generation < current.generation {
            return Err(Refused::StaleGeneration {
                got: got.generation,
                current: current.generation,
            });
        }
        if got != current {
            return Err(Refused::NeverIssued { got, current });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_stamp_is_admitted() {
        let mut fence = Fence::new(3);
        let first = fence.next_generation();
        assert_eq!(fence.admit(first), Ok(()));
        let second = fence.next_generation();
        assert_eq!(fence.admit(first), Err(Refused::StaleGeneration { got: 1, current: 2 }));
        assert_eq!(fence.admit(second), Ok(()));
        assert_eq!(
            fence.admit(Stamp {
                epoch: 2,
                generation: 2
            }),
            Err(Refused::StaleEpoch { got: 2, current: 3 })
        );
        assert!(matches!(
            fence.admit(Stamp {
                epoch: 3,
                generation: 9
            }),
            Err(Refused::NeverIssued { .. })
        ));
        assert!(matches!(
            fence.admit(Stamp {
                epoch: 4,
                generation: 2
            }),
            Err(Refused::NeverIssued { .. })
        ));
    }
}

//! The `display` object: one effective status from the closed set, the activity, and the
//! controls a renderer may offer. The spec's six ordering rules live here once; renderers
//! never infer status from durable rows.

use serde::Serialize;

/// The closed `display.status` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DisplayStatus {
    Queued,
    Running,
    Waiting,
    Paused,
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    Ambiguous,
}

impl DisplayStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Ambiguous => "ambiguous",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::TimedOut | Self::Cancelled)
    }
}

/// What a renderer may offer; command handlers still check the exact state again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Control {
    Pause,
    Resume,
    Cancel,
    Restart,
    /// Answer an ordinary checkpoint.
    Answer,
    /// Answer a protected decision.
    HumanAnswer,
    /// Submit an agent step's output.
    Submit,
    /// Update a pending agent step.
    Update,
    /// Review an external effect whose outcome is unknown.
    Review,
}

/// Supervised worker activity, reported independently of the status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    /// `worker` while a runner epoch is starting or ready, else `none`.
    pub kind: &'static str,
    /// `starting`, `ready` or `unresponsive` (not answering the server's pings) for a worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
}

impl Activity {
    pub fn none() -> Self {
        Self {
            kind: "none",
            state: None,
            since: None,
        }
    }
}

/// The durable facts the rules read (the same for a run view and a run-list item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisplayFacts<'a> {
    /// `runs.status`.
    pub run_status: &'a str,
    /// `run_queue.status`.
    pub queue_status: &'a str,
    pub paused: bool,
    /// The pending request's kind (`agent`, `assistant`, `checkpoint`, `decision`).
    pub pending_kind: Option<&'a str>,
    pub ambiguous_effects: i64,
    /// A runner epoch of this run is starting or ready.
    pub worker_active: bool,
    /// An exact origin-session model turn of this run is open.
    pub origin_turn: bool,
}

/// The effective status by the spec's ordering rules, first match wins.
pub fn display_status(facts: &DisplayFacts<'_>) -> DisplayStatus {
    // 1. A durable terminal result keeps its label.
    if let Some(terminal) = terminal_status(facts.run_status) {
        return terminal;
    }
    // 2. An unresolved external effect needs review.
    if facts.ambiguous_effects > 0 {
        return DisplayStatus::Ambiguous;
    }
    // 3. A durable pause, even while its worker stops.
    if facts.paused {
        return DisplayStatus::Paused;
    }
    // 4. A pending request — shown running while the exact origin-session turn that works
    //    on it is open (presentation only: the run stays waiting durably).
    if facts.pending_kind.is_some() && !facts.origin_turn {
        return DisplayStatus::Waiting;
    }
    // 5. Active execution: a claimed run, a live worker or an open origin turn.
    if facts.queue_status == "running" || facts.worker_active || facts.origin_turn {
        return DisplayStatus::Running;
    }
    // 6. Parked resumable work, or admitted work that has not started.
    DisplayStatus::Queued
}

fn terminal_status(run_status: &str) -> Option<DisplayStatus> {
    match run_status {
        "completed" => Some(DisplayStatus::Completed),
        "failed" => Some(DisplayStatus::Failed),
        "timed_out" => Some(DisplayStatus::TimedOut),
        "cancelled" => Some(DisplayStatus::Cancelled),
        _ => None,
    }
}

/// The controls of a status (sorted, no duplicates).
pub fn controls(status: DisplayStatus, facts: &DisplayFacts<'_>) -> Vec<Control> {
    let mut controls = match status {
        s if s.is_terminal() => vec![Control::Restart],
        DisplayStatus::Ambiguous => vec![Control::Cancel],
        DisplayStatus::Paused => vec![Control::Resume, Control::Cancel],
        // Parked for review (its runner crashed, made no progress, or ran out of memory):
        // only an explicit resume moves it.
        DisplayStatus::Queued if facts.queue_status == "parked" => vec![Control::Resume, Control::Cancel],
        DisplayStatus::Waiting => {
            let mut waiting = vec![Control::Pause, Control::Cancel];
            waiting.extend(answer_controls(facts.pending_kind.unwrap_or_default()));
            waiting
        }
        _ => vec![Control::Pause, Control::Cancel],
    };
    // A review needs the run without a live claim (parked, ended, or queued before its
    // runner): while a runner holds it, `review` would only be refused. An ended run's
    // unresolved effect keeps the action (spec display rule 1): the operator records what
    // the external system shows.
    let claimed = matches!(facts.queue_status, "starting" | "running");
    if facts.ambiguous_effects > 0 && !claimed {
        controls.push(Control::Review);
    }
    controls.sort();
    controls.dedup();
    controls
}

/// The response action a pending request's kind permits; a visible-response request
/// (`assistant`) has none.
fn answer_controls(kind: &str) -> &'static [Control] {
    match kind {
        "agent" => &[Control::Submit, Control::Update],
        "checkpoint" => &[Control::Answer],
        "decision" => &[Control::HumanAnswer],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> DisplayFacts<'static> {
        DisplayFacts {
            run_status: "running",
            queue_status: "running",
            paused: false,
            pending_kind: None,
            ambiguous_effects: 0,
            worker_active: true,
            origin_turn: false,
        }
    }

    #[test]
    fn a_terminal_result_keeps_its_label_and_still_offers_review() {
        for (status, expected) in [
            ("completed", DisplayStatus::Completed),
            ("failed", DisplayStatus::Failed),
            ("timed_out", DisplayStatus::TimedOut),
            ("cancelled", DisplayStatus::Cancelled),
        ] {
            let f = DisplayFacts {
                run_status: status,
                queue_status: "done",
                paused: true,
                pending_kind: Some("agent"),
                ambiguous_effects: 1,
                worker_active: true,
                origin_turn: false,
            };
            assert_eq!(display_status(&f), expected);
            assert_eq!(controls(expected, &f), vec![Control::Restart, Control::Review]);
        }
    }

    #[test]
    fn an_ambiguous_effect_outranks_pause_and_waiting() {
        let f = DisplayFacts {
            paused: true,
            pending_kind: Some("checkpoint"),
            ambiguous_effects: 2,
            queue_status: "parked",
            ..facts()
        };
        assert_eq!(display_status(&f), DisplayStatus::Ambiguous);
        assert_eq!(
            controls(DisplayStatus::Ambiguous, &f),
            vec![Control::Cancel, Control::Review]
        );
    }

    #[test]
    fn a_waiting_run_shows_running_during_its_exact_origin_turn_and_a_pause_still_wins() {
        let waiting = DisplayFacts {
            run_status: "waiting",
            queue_status: "parked",
            pending_kind: Some("agent"),
            worker_active: false,
            ..facts()
        };
        assert_eq!(display_status(&waiting), DisplayStatus::Waiting);
        let turn = DisplayFacts {
            origin_turn: true,
            ..waiting
        };
        assert_eq!(display_status(&turn), DisplayStatus::Running);
        let paused = DisplayFacts { paused: true, ..turn };
        assert_eq!(display_status(&paused), DisplayStatus::Paused);
    }

    #[test]
    fn review_is_offered_only_without_a_live_claim() {
        let live = DisplayFacts {
            ambiguous_effects: 1,
            ..facts()
        };
        assert_eq!(display_status(&live), DisplayStatus::Ambiguous);
        assert_eq!(controls(DisplayStatus::Ambiguous, &live), vec![Control::Cancel]);
        let parked = DisplayFacts {
            queue_status: "parked",
            worker_active: false,
            ..live
        };
        assert_eq!(
            controls(DisplayStatus::Ambiguous, &parked),
            vec![Control::Cancel, Control::Review]
        );
        let reviewed = DisplayFacts {
            ambiguous_effects: 0,
            ..parked
        };
        assert_eq!(display_status(&reviewed), DisplayStatus::Queued);
        assert_eq!(
            controls(DisplayStatus::Queued, &reviewed),
            vec![Control::Resume, Control::Cancel]
        );
    }

    #[test]
    fn a_pause_outranks_a_pending_request_and_a_live_worker() {
        let f = DisplayFacts {
            paused: true,
            pending_kind: Some("agent"),
            ..facts()
        };
        assert_eq!(display_status(&f), DisplayStatus::Paused);
        assert_eq!(
            controls(DisplayStatus::Paused, &f),
            vec![Control::Resume, Control::Cancel]
        );
    }

    #[test]
    fn a_pending_request_waits_with_the_action_of_its_kind() {
        for (kind, answer) in [
            ("agent", vec![Control::Submit, Control::Update]),
            ("checkpoint", vec![Control::Answer]),
            ("decision", vec![Control::HumanAnswer]),
            ("assistant", vec![]),
        ] {
            let f = DisplayFacts {
                run_status: "waiting",
                queue_status: "parked",
                pending_kind: Some(kind),
                worker_active: false,
                ..facts()
            };
            assert_eq!(display_status(&f), DisplayStatus::Waiting);
            let mut expected = vec![Control::Pause, Control::Cancel];
            expected.extend(answer);
            expected.sort();
            assert_eq!(controls(DisplayStatus::Waiting, &f), expected, "{kind}");
        }
    }

    #[test]
    fn execution_is_running_and_parked_or_admitted_work_is_queued() {
        assert_eq!(display_status(&facts()), DisplayStatus::Running);
        let starting = DisplayFacts {
            queue_status: "starting",
            worker_active: true,
            ..facts()
        };
        assert_eq!(display_status(&starting), DisplayStatus::Running);
        for queue in ["queued", "parked", "starting"] {
            let f = DisplayFacts {
                run_status: "queued",
                queue_status: queue,
                worker_active: false,
                ..facts()
            };
            assert_eq!(display_status(&f), DisplayStatus::Queued, "{queue}");
            // Only work parked for review waits for an explicit resume.
            let resumable = controls(DisplayStatus::Queued, &f).contains(&Control::Resume);
            assert_eq!(resumable, queue == "parked", "{queue}");
        }
    }

    #[test]
    fn work_parked_for_review_offers_resume_and_admitted_work_does_not() {
        let parked = DisplayFacts {
            queue_status: "parked",
            worker_active: false,
            ..facts()
        };
        assert_eq!(display_status(&parked), DisplayStatus::Queued);
        let mut expected = vec![Control::Resume, Control::Cancel];
        expected.sort();
        assert_eq!(controls(DisplayStatus::Queued, &parked), expected);
        let admitted = DisplayFacts {
            queue_status: "queued",
            worker_active: false,
            ..facts()
        };
        assert!(!controls(DisplayStatus::Queued, &admitted).contains(&Control::Resume));
    }

    #[test]
    fn paused_is_never_inferred_from_a_parked_queue_or_missing_activity() {
        let f = DisplayFacts {
            run_status: "queued",
            queue_status: "parked",
            paused: false,
            pending_kind: None,
            ambiguous_effects: 0,
            worker_active: false,
            origin_turn: false,
        };
        assert_ne!(display_status(&f), DisplayStatus::Paused);
    }
}

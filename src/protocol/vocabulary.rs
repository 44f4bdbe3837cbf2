//! Closed sets of wire names: operations, response outcomes and event kinds.
//!
//! Each set is declared once; the macro derives the enum, its serde names, `ALL` (in wire-schema
//! order) and the string conversions, so the Rust names and `protocol/client.v1.schema.json`
//! cannot drift apart silently (a test compares them).

use crate::wire_enum::wire_enum;

wire_enum! {
    /// A client request operation (`request.operation`).
    pub enum Operation {
        /// Start a run (the client chooses the run ID).
        RunStart = "run.start",
        /// Pause a run.
        RunPause = "run.pause",
        /// Resume a paused run.
        RunResume = "run.resume",
        /// Cancel a run.
        RunCancel = "run.cancel",
        /// Restart a terminal run at its exact revision.
        RunRestart = "run.restart",
        /// Change run settings.
        RunChangeSettings = "run.changeSettings",
        /// Read one run's status.
        RunStatus = "run.status",
        /// List runs.
        RunList = "run.list",
        /// List the discoverable workflows of a project (project, then global), paged.
        WorkflowList = "workflow.list",
        /// List a run's effects for review (ambiguous ones first).
        EffectList = "effect.list",
        /// Settle an ambiguous effect by an operator's review.
        EffectRecover = "effect.recover",
        /// Answer an ordinary checkpoint.
        CheckpointAnswer = "checkpoint.answer",
        /// Answer a protected decision.
        DecisionAnswer = "decision.answer",
        /// Submit an agent interaction's output.
        InteractionSubmit = "interaction.submit",
        /// Report visible assistant-reply evidence for an interaction.
        InteractionAssistant = "interaction.assistant",
        /// Update a pending interaction.
        InteractionUpdate = "interaction.update",
        /// Queue a follow-up message.
        FollowUpQueue = "followUp.queue",
        /// Remove a queued follow-up message.
        FollowUpRemove = "followUp.remove",
        /// Report the origin session's active branch.
        WorkflowMessageReportBranch = "workflowMessage.reportBranch",
        /// Report a model-turn start or end.
        WorkflowTurnReport = "workflowTurn.report",
        /// Clear the retained terminal run view of a session.
        SessionViewClearTerminal = "sessionView.clearTerminal",
        /// Record a batch of session events.
        SessionRecord = "session.record",
        /// Read channel status.
        ChannelStatus = "channel.status",
        /// Reload channel configuration.
        ChannelReload = "channel.reload",
        /// Explicitly recover a channel message.
        ChannelRecover = "channel.recover",
        /// List resource managers.
        ResourceManagerList = "resourceManager.list",
        /// Read one resource manager.
        ResourceManagerGet = "resourceManager.get",
        /// Apply a resolved resource manager.
        ResourceManagerApply = "resourceManager.apply",
        /// Reconcile resource managers.
        ResourceManagerReconcile = "resourceManager.reconcile",
        /// Delete a resource manager.
        ResourceManagerDelete = "resourceManager.delete",
        /// Read server status.
        ServerStatus = "server.status",
        /// Stop the server.
        ServerStop = "server.stop",
        /// Subscribe to the run list.
        ViewRunsWatch = "view.runs.watch",
        /// Read one run-list page.
        ViewRunsPage = "view.runs.page",
        /// Read one run view.
        ViewRunGet = "view.run.get",
        /// Subscribe to one run view.
        ViewRunWatch = "view.run.watch",
        /// Unsubscribe from one run view.
        ViewRunUnwatch = "view.run.unwatch",
        /// Read one run-history page.
        ViewPage = "view.page",
        /// Read a chunk of referenced content.
        ViewContent = "view.content",
        /// Subscribe to an origin-session view.
        ViewSessionWatch = "view.session.watch",
        /// Move an origin-session view window.
        ViewSessionWindow = "view.session.window",
        /// Remove any subscription.
        ViewUnwatch = "view.unwatch",
        /// Read state-database status.
        StateStatus = "state.status",
        /// Verify the state database.
        StateVerify = "state.verify",
        /// Back up the state database.
        StateBackup = "state.backup",
        /// Prune the state database.
        StatePrune = "state.prune",
    }
}

impl Operation {
    /// Whether the operation may change durable or server-side state, and so needs an idempotency
    /// key and a committed receipt before its response.
    ///
    /// Views and subscriptions (`view.*`), status reads (`*.status`), `run.list`,
    /// `workflow.list`, `effect.list`, `resourceManager.list`, `resourceManager.get` and
    /// `state.verify` only read. Every other operation, including `server.stop` and
    /// `channel.reload`, changes something.
    #[must_use]
    pub const fn is_state_changing(self) -> bool {
        !matches!(
            self,
            Self::RunStatus
                | Self::RunList
                | Self::WorkflowList
                | Self::EffectList
                | Self::ChannelStatus
                | Self::ResourceManagerList
                | Self::ResourceManagerGet
                | Self::ServerStatus
                | Self::ViewRunsWatch
                | Self::ViewRunsPage
                | Self::ViewRunGet
                | Self::ViewRunWatch
                | Self::ViewRunUnwatch
                | Self::ViewPage
                | Self::ViewContent
                | Self::ViewSessionWatch
                | Self::ViewSessionWindow
                | Self::ViewUnwatch
                | Self::StateStatus
                | Self::StateVerify
        )
    }
}

wire_enum! {
    /// The closed set of command outcomes (`response.outcome`).
    pub enum Outcome {
        /// The command was applied and its receipt committed.
        Accepted = "accepted",
        /// An exact retry: the stored receipt of the earlier attempt is returned.
        Adopted = "adopted",
        /// The command was refused; state is unchanged.
        Rejected = "rejected",
        /// The revision, request ID or idempotency key conflicts with stored state.
        Conflict = "conflict",
        /// The addressed run or resource does not exist.
        NotFound = "notFound",
        /// The caller no longer holds the claim it acted under.
        ClaimLost = "claimLost",
        /// The server cannot serve the request now.
        Unavailable = "unavailable",
    }
}

wire_enum! {
    /// The closed set of subscription event kinds (`event.event`).
    pub enum EventKind {
        /// A revisioned run-list snapshot.
        Runs = "runs",
        /// A run-view snapshot.
        RunSnapshot = "run_snapshot",
        /// A run-view patch against a retained revision.
        RunPatch = "run_patch",
        /// One run-history page.
        RunPage = "run_page",
        /// An origin-session view snapshot.
        SessionSnapshot = "session_snapshot",
        /// The subscription can no longer be served.
        Unavailable = "unavailable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn wire_names_are_unique_and_round_trip() {
        fn check<T: Copy + Eq + std::fmt::Debug + serde::Serialize>(
            all: &[T],
            as_str: fn(T) -> &'static str,
            from_wire: fn(&str) -> Option<T>,
        ) {
            let names: HashSet<_> = all.iter().map(|&value| as_str(value)).collect();
            assert_eq!(names.len(), all.len());
            for &value in all {
                assert_eq!(from_wire(as_str(value)), Some(value));
                let json = serde_json::to_value(value).expect("serializes");
                assert_eq!(json.as_str(), Some(as_str(value)));
            }
            assert_eq!(from_wire(""), None);
        }
        check(Operation::ALL, Operation::as_str, Operation::from_wire);
        check(Outcome::ALL, Outcome::as_str, Outcome::from_wire);
        check(EventKind::ALL, EventKind::as_str, EventKind::from_wire);
        assert_eq!(Operation::ALL.len(), 46);
    }

    #[test]
    fn reads_are_not_state_changing() {
        for operation in Operation::ALL {
            let name = operation.as_str();
            let read = name.starts_with("view.")
                || name.ends_with(".status")
                || matches!(
                    name,
                    "run.list"
                        | "workflow.list"
                        | "effect.list"
                        | "resourceManager.list"
                        | "resourceManager.get"
                        | "state.verify"
                );
            assert_eq!(operation.is_state_changing(), !read, "{name}");
        }
    }
}

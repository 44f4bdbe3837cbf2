//! The front door's dispatch: one handler per served operation. Every other operation is
//! refused with a clear `unsupportedOperation` error until its issue lands.
//!
//! Architecture Invariant: operations never own a process or a subscription; they read and
//! write the store, and reach a live runner or the resolver through their subtrees' handles.

use super::context::OpsContext;
use super::run_controls::run_control;
use super::{
    channels, decisions, effects, follow_ups, run_commands, sessions, settings, state, status, submissions, updates,
    views, workflows,
};
use crate::protocol::{Operation, Request};
use crate::server::answers::{Handled, handled, rejected};
use crate::server::runners::mailbox::RunControl;

pub async fn handle_request(ctx: &OpsContext, request: Request) -> Handled {
    let result = match request.operation {
        Operation::ServerStatus => status::server_status(ctx, &request).await,
        Operation::ServerStop => status::server_stop(ctx, &request).await,
        Operation::RunPause => run_control(ctx, &request, RunControl::Pause).await,
        Operation::RunResume => run_control(ctx, &request, RunControl::Resume).await,
        Operation::RunCancel => run_control(ctx, &request, RunControl::Cancel).await,
        Operation::RunStart => run_commands::run_start(ctx, &request).await,
        Operation::RunRestart => run_commands::run_restart(ctx, &request).await,
        Operation::CheckpointAnswer => run_commands::checkpoint_answer(ctx, &request).await,
        Operation::InteractionSubmit => submissions::interaction_submit(ctx, &request).await,
        Operation::DecisionAnswer => decisions::decision_answer(ctx, &request).await,
        Operation::InteractionAssistant => submissions::interaction_assistant(ctx, &request).await,
        Operation::InteractionUpdate => updates::interaction_update(ctx, &request).await,
        Operation::FollowUpQueue => follow_ups::queue(ctx, &request).await,
        Operation::FollowUpRemove => follow_ups::remove(ctx, &request).await,
        Operation::RunChangeSettings => settings::change_settings(ctx, &request).await,
        Operation::RunStatus => run_commands::run_status(ctx, &request).await,
        Operation::RunList => run_commands::run_list(ctx, &request).await,
        Operation::WorkflowList => workflows::workflow_list(ctx, &request).await,
        Operation::EffectList => effects::effect_list(ctx, &request).await,
        Operation::ViewSessionWindow => sessions::view_session_window(ctx, &request).await,
        Operation::WorkflowMessageReportBranch => sessions::report_branch(ctx, &request).await,
        Operation::WorkflowTurnReport => sessions::report_turn(ctx, &request).await,
        Operation::SessionViewClearTerminal => sessions::clear_terminal(ctx, &request).await,
        Operation::EffectRecover => effects::effect_recover(ctx, &request).await,
        Operation::ViewRunGet => views::view_run_get(ctx, &request).await,
        Operation::ViewPage => views::view_page(ctx, &request).await,
        Operation::ViewContent => views::view_content(ctx, &request).await,
        Operation::ViewRunsPage => views::view_runs_page(ctx, &request).await,
        Operation::StateStatus => state::state_status(ctx, &request).await,
        Operation::StateVerify => state::state_verify(ctx, &request).await,
        Operation::StateBackup => state::state_backup(ctx, &request).await,
        Operation::StatePrune => state::state_prune(ctx, &request).await,
        Operation::ChannelStatus => channels::channel_status(ctx, &request).await,
        Operation::ChannelReload => channels::channel_reload(ctx, &request).await,
        // A recovered attempt is picked up by its adapter, which every commit wakes.
        Operation::ChannelRecover => channels::channel_recover(ctx, &request).await,
        other => Err(rejected(
            "unsupportedOperation",
            &format!("{} is not available in this server version yet", other.as_str()),
        )),
    };
    handled(&request, result)
}

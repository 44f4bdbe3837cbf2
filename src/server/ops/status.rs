//! `server.status` (the spec's counts, and optionally the live supervision tree) and
//! `server.stop`. Nothing private: no actor, session or run IDs, no paths, payloads or
//! tokens; the tree holds names, states, restart counts, generations, epochs and the pids of
//! the processes the tree owns.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use supervisors::{SupervisorMsg, TreeSnapshot};

use super::context::OpsContext;
use crate::protocol::{Outcome, Request};
use crate::server::answers::{Answer, answer_of, command_request, rejected, to_object};
use crate::server::blocking;
use crate::server::shared::StopReason;
use crate::store::commands::{self, Accepted};
use crate::store::verify;

const TREE_CALL_TIMEOUT_MS: u64 = 2_000;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    pub state: &'static str,
    pub epoch: i64,
    /// The socket as checked now: `available` (the file the listener bound), `missing`,
    /// `replaced` (another file at its path), or `starting` (not bound yet).
    pub socket: &'static str,
    pub uptime_ms: u64,
    /// How old the environment children inherit is: the server keeps the one it was started
    /// with (restart it to pick up a changed one).
    pub environment_age_ms: u64,
    pub clients: usize,
    pub active_runners: usize,
    #[serde(flatten)]
    pub counts: verify::StateCounts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeSnapshot>,
}

pub async fn server_status(ctx: &OpsContext, request: &Request) -> Answer {
    let with_tree = request.payload.get("tree").and_then(Value::as_bool).unwrap_or(false);
    let status = collect(ctx, with_tree)
        .await
        .map_err(|err| rejected("unavailable", &format!("status could not be read: {err}")))?;
    Ok((Outcome::Accepted, to_object(&status)?, None))
}

/// Stop after answering; the receipt commits first so a retry adopts it.
pub async fn server_stop(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let epoch = ctx.shared.epoch;
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |_| {
            Ok(Accepted {
                revision: None,
                receipt: json!({"stopping": true, "epoch": epoch}),
            })
        })
    })
    .await;
    if stored.as_ref().is_err_and(crate::store::StoreError::is_disk_full) {
        // Stopping needs no disk: a full one only cannot keep the receipt (a repeated stop
        // then finds no server, so there is nothing to adopt).
        tracing::warn!("the disk is full: server.stop was not recorded; stopping anyway");
        let receipt = to_object(&json!({"stopping": true, "epoch": epoch}))?;
        return Ok((Outcome::Accepted, receipt, Some(StopReason::Requested)));
    }
    let (outcome, receipt, _) = answer_of(stored)?;
    Ok((outcome, receipt, Some(StopReason::Requested)))
}

async fn collect(ctx: &OpsContext, with_tree: bool) -> anyhow::Result<ServerStatus> {
    let now = ctx.store.now_ms();
    let counts = blocking::read(&ctx.store, move |conn| verify::state_counts(conn, now)).await?;
    let tree = if with_tree { tree(ctx).await } else { None };
    Ok(ServerStatus {
        state: if ctx.shared.stop_requested().is_some() {
            "stopping"
        } else {
            "running"
        },
        epoch: ctx.shared.epoch,
        socket: socket_state(ctx),
        uptime_ms: ctx.shared.started.elapsed().as_millis() as u64,
        environment_age_ms: ctx.shared.started.elapsed().as_millis() as u64,
        clients: ctx.shared.connections(),
        active_runners: ctx.runners.live(),
        counts,
        tree,
    })
}

fn socket_state(ctx: &OpsContext) -> &'static str {
    let Some((path, bound)) = ctx.shared.socket() else {
        return "starting";
    };
    match crate::server::ownership::file_identity(&path) {
        Some(identity) if identity == bound => "available",
        Some(_) => "replaced",
        None => "missing",
    }
}

async fn tree(ctx: &OpsContext) -> Option<TreeSnapshot> {
    let root = ctx.shared.root()?;
    match root
        .call(
            SupervisorMsg::Snapshot,
            Some(Duration::from_millis(TREE_CALL_TIMEOUT_MS)),
        )
        .await
    {
        Ok(ractor::rpc::CallResult::Success(snapshot)) => Some(snapshot),
        _ => None,
    }
}

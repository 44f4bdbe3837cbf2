//! `server.status`: the spec's counts, and optionally the live supervision tree. Nothing
//! private: no actor, session or run IDs, no paths, payloads or tokens.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use supervisors::{SupervisorMsg, TreeSnapshot};

use super::blocking;
use super::context::ServerContext;
use crate::store::verify;

const TREE_CALL_TIMEOUT_MS: u64 = 2_000;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    pub state: &'static str,
    pub epoch: i64,
    pub socket: &'static str,
    pub uptime_ms: u64,
    pub clients: usize,
    pub active_runners: usize,
    #[serde(flatten)]
    pub counts: verify::StateCounts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeSnapshot>,
}

pub async fn collect(ctx: &Arc<ServerContext>, with_tree: bool) -> anyhow::Result<ServerStatus> {
    let now = ctx.store.now_ms();
    let counts = blocking::read(&ctx.store, move |conn| verify::state_counts(conn, now)).await?;
    let tree = if with_tree { tree(ctx).await } else { None };
    Ok(ServerStatus {
        state: if ctx.stop_requested().is_some() {
            "stopping"
        } else {
            "running"
        },
        epoch: ctx.epoch,
        socket: "available",
        uptime_ms: ctx.started.elapsed().as_millis() as u64,
        clients: ctx.connections.load(Ordering::SeqCst),
        active_runners: ctx.runners.load(Ordering::SeqCst),
        counts,
        tree,
    })
}

async fn tree(ctx: &Arc<ServerContext>) -> Option<TreeSnapshot> {
    let root = ctx.root.get()?;
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

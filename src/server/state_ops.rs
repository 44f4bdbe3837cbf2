//! State maintenance reads through the server: `state.status` (counts, schema identity) and
//! `state.verify` (integrity, foreign keys, lifecycle invariants; never repairs). The CLI
//! uses these instead of opening the live database.

use std::sync::Arc;

use serde_json::json;

use super::blocking;
use super::context::ServerContext;
use super::handlers::{Answer, rejected, to_object};
use crate::protocol::{Outcome, Request};
use crate::store::{schema, verify};

/// `state.status`: run, claim, interaction and effect counts (no IDs, paths or payloads).
pub async fn state_status(ctx: &Arc<ServerContext>, _request: &Request) -> Answer {
    let now = ctx.store.now_ms();
    let counts = blocking::read(&ctx.store, move |conn| verify::state_counts(conn, now))
        .await
        .map_err(|err| rejected("unavailable", &format!("the state could not be read: {err}")))?;
    let mut receipt = to_object(&counts)?;
    receipt.insert(
        "schema".into(),
        json!({"name": schema::SCHEMA_NAME, "version": schema::SCHEMA_VERSION, "digest": schema::schema_digest()}),
    );
    Ok((Outcome::Accepted, receipt, None))
}

/// `state.verify`: the report, in one read snapshot.
pub async fn state_verify(ctx: &Arc<ServerContext>, _request: &Request) -> Answer {
    let report = blocking::read(&ctx.store, verify::verify)
        .await
        .map_err(|err| rejected("unavailable", &format!("the state could not be verified: {err}")))?;
    Ok((Outcome::Accepted, to_object(&report)?, None))
}

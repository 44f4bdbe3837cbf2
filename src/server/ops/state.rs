//! State maintenance through the server: `state.status` (counts, schema identity),
//! `state.verify` (integrity, foreign keys, lifecycle invariants; never repairs),
//! `state.backup` (a verified copy) and `state.prune` (expired run trees, backup first). The
//! CLI uses these instead of opening the live database.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::{Outcome, Request, ResponseError};
use crate::server::answers::{Answer, command_request, commit_receipt, rejected, stored_answer, to_object};
use crate::server::blocking;
use crate::store::{retention, schema, verify};

type Refusal = (Outcome, ResponseError);

/// `state.status`: run, claim, interaction and effect counts (no IDs, paths or payloads).
pub async fn state_status(ctx: &OpsContext, _request: &Request) -> Answer {
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
pub async fn state_verify(ctx: &OpsContext, _request: &Request) -> Answer {
    let report = blocking::read(&ctx.store, verify::verify)
        .await
        .map_err(|err| rejected("unavailable", &format!("the state could not be verified: {err}")))?;
    Ok((Outcome::Accepted, to_object(&report)?, None))
}

/// Paths a backup may name (absolute, bounded).
const BACKUP_PATH_BYTES_MAX: usize = 1024;

/// `state.backup` (`path`: a new absolute file): a verified copy of the database. The copy
/// is made before the receipt commits; a retry with the same key adopts the receipt and
/// makes no second copy.
pub async fn state_backup(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    if let Some(stored) = stored_answer(&ctx.store, &command).await? {
        return Ok(stored);
    }
    let dest = backup_path(&request.payload, "path")?;
    let report = make_backup(ctx, dest.clone()).await?;
    let receipt = json!({"path": dest.display().to_string(), "backup": report});
    commit_receipt(&ctx.store, command, receipt).await
}

/// `state.prune`: terminal root-run trees older than `olderThanDays` (default 30) that
/// nothing protects. Without `apply` it only reports them; with `apply: true` it first writes
/// a verified backup to `backupPath` (a new absolute file), then deletes the trees one
/// transaction each (each checked again) and collects unreferenced blobs.
pub async fn state_prune(ctx: &OpsContext, request: &Request) -> Answer {
    let payload = &request.payload;
    let days = payload
        .get("olderThanDays")
        .map(|days| {
            days.as_i64()
                .filter(|d| (1..=retention::RETENTION_DAYS_MAX).contains(d))
        })
        .unwrap_or(Some(retention::RETENTION_DAYS_DEFAULT))
        .ok_or_else(|| {
            rejected(
                "invalidRequest",
                &format!("olderThanDays must be 1 to {}", retention::RETENTION_DAYS_MAX),
            )
        })?;
    let cutoff_ms = ctx.store.now_ms() - days * retention::DAY_MS;
    if payload.get("apply").and_then(Value::as_bool) != Some(true) {
        let trees = expired(ctx, cutoff_ms).await?;
        let receipt = json!({"applied": false, "olderThanDays": days, "trees": trees.len(),
                             "runs": trees.iter().map(|tree| tree.runs).sum::<i64>()});
        return Ok((Outcome::Accepted, to_object(&receipt)?, None));
    }
    let command = command_request(request)?;
    if let Some(stored) = stored_answer(&ctx.store, &command).await? {
        return Ok(stored);
    }
    let dest = backup_path(payload, "backupPath")?;
    let backup = make_backup(ctx, dest.clone()).await?;
    let (trees, runs, blobs) = prune_trees(ctx, cutoff_ms).await?;
    let receipt = json!({"applied": true, "olderThanDays": days, "trees": trees, "runs": runs,
                         "blobsCollected": blobs, "backupPath": dest.display().to_string(), "backup": backup});
    commit_receipt(&ctx.store, command, receipt).await
}

async fn expired(ctx: &OpsContext, cutoff_ms: i64) -> Result<Vec<retention::ExpiredTree>, Refusal> {
    blocking::read(&ctx.store, move |conn| {
        retention::expired_trees(conn, cutoff_ms, retention::TREES_PER_SELECTION_MAX)
    })
    .await
    .map_err(|err| rejected("unavailable", &format!("the state could not be read: {err}")))
}

/// Delete expired trees in rounds (each tree its own transaction); blobs are collected only
/// when no runner is live (a live runner's run state is a blob only it names).
async fn prune_trees(ctx: &OpsContext, cutoff_ms: i64) -> Result<(usize, i64, usize), Refusal> {
    let (mut trees, mut runs) = (0, 0);
    loop {
        let round = expired(ctx, cutoff_ms).await?;
        let mut deleted_any = false;
        for tree in round {
            let root = tree.root_run_id.clone();
            let deleted = blocking::write(&ctx.store, move |tx| retention::delete_tree(tx, &root, cutoff_ms))
                .await
                .map_err(|err| rejected("unavailable", &format!("a run tree could not be deleted: {err}")))?;
            if deleted {
                trees += 1;
                runs += tree.runs;
                deleted_any = true;
            }
        }
        if !deleted_any {
            break;
        }
    }
    let blobs = match ctx.runners.live() {
        0 => blocking::write(&ctx.store, retention::collect_unreferenced_blobs)
            .await
            .map_err(|err| rejected("unavailable", &format!("blobs could not be collected: {err}")))?,
        _ => 0,
    };
    Ok((trees, runs, blobs))
}

fn backup_path(payload: &crate::protocol::JsonObject, key: &str) -> Result<PathBuf, Refusal> {
    let text = payload.get(key).and_then(Value::as_str).unwrap_or_default();
    let path = PathBuf::from(text);
    if text.is_empty() || text.len() > BACKUP_PATH_BYTES_MAX || !path.is_absolute() {
        return Err(rejected(
            "invalidRequest",
            &format!("{key} must be an absolute path of a new file (at most {BACKUP_PATH_BYTES_MAX} bytes)"),
        ));
    }
    Ok(path)
}

async fn make_backup(ctx: &OpsContext, dest: PathBuf) -> Result<retention::BackupReport, Refusal> {
    let live = ctx.store.path().to_path_buf();
    tokio::task::spawn_blocking(move || retention::backup_to(&live, &dest))
        .await
        .map_err(|_| rejected("unavailable", "the backup task stopped; retry"))?
        .map_err(|err| rejected("backupFailed", &format!("the backup failed: {err}")))
}

//! Run settings (aggregate): the declaration a run starts with, its numbered versions, and
//! client changes (`run.changeSettings`). A settings change is not a run transition: the
//! run's revision does not move, so a live runner is not fenced by it; the runner learns the
//! new version when it next starts a node (see `docs/RUNNER-PROTOCOL.md`).
//!
//! Architecture Invariant: a version, once numbered, never changes; an attempt records the
//! number of the version it saw, and that number always names a stored version of its run.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::blobs::{put_json, read_json};
use super::error::{StoreError, StoreResult};
use super::runs::read_run;
use super::writer::WriteTx;
use crate::settings::{Declaration, PATCH_BYTES_MAX, PatchOp, SETTINGS_BYTES_MAX, SettingsError};
use crate::wire_enum::wire_enum;

/// A declaration blob: the initial value plus at most DECLARED_PATHS_MAX small grants.
const DECLARATION_BYTES_MAX: usize = SETTINGS_BYTES_MAX + 128 * 1024;
/// Changes listed on one settings page.
pub const CHANGES_PAGE_MAX: usize = 200;

wire_enum! {
    /// Who made a settings version.
    pub enum SettingsActor {
        /// The workflow's declaration (change 0).
        Workflow = "workflow",
        /// Change 0 of a restart: the current settings of the run it restarts.
        Inherited = "inherited",
        /// A person, through the CLI or `piw`.
        Human = "human",
        /// The run's origin Pi session.
        Session = "session",
    }
}

/// One numbered version of a run's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingsVersion {
    pub change_number: i64,
    pub value: Value,
}

/// Record a new run's declared settings as change 0.
pub fn declare(tx: &WriteTx<'_>, run_id: &str, declared: &Value) -> StoreResult<()> {
    let declaration = Declaration::parse(declared)?;
    let declaration_hash = put_json(tx, declared, DECLARATION_BYTES_MAX)?;
    let settings_hash = put_json(tx, &declaration.initial, SETTINGS_BYTES_MAX)?;
    insert_start(tx, run_id, &declaration_hash, &settings_hash, SettingsActor::Workflow)
}

/// A run made from another (a restart) starts from that run's current settings.
pub fn inherit(tx: &WriteTx<'_>, parent_run_id: &str, run_id: &str) -> StoreResult<()> {
    let parent = tx
        .conn()
        .prepare_cached(
            "SELECT s.declaration_hash, c.settings_hash FROM run_settings s
             JOIN run_setting_changes c ON c.run_id = s.run_id AND c.change_number = s.change_number
             WHERE s.run_id = ?1",
        )?
        .query_row([parent_run_id], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })
        .optional()?;
    match parent {
        Some((declaration_hash, settings_hash)) => {
            insert_start(tx, run_id, &declaration_hash, &settings_hash, SettingsActor::Inherited)
        }
        None => Ok(()),
    }
}

fn insert_start(
    tx: &WriteTx<'_>,
    run_id: &str,
    declaration_hash: &str,
    settings_hash: &str,
    actor: SettingsActor,
) -> StoreResult<()> {
    let now = tx.now_ms();
    tx.conn()
        .prepare_cached(
            "INSERT INTO run_settings (run_id, declaration_hash, change_number, updated_at) VALUES (?1, ?2, 0, ?3)",
        )?
        .execute(params![run_id, declaration_hash, now])?;
    insert_version(tx, run_id, 0, actor, None, settings_hash)
}

fn insert_version(
    tx: &WriteTx<'_>,
    run_id: &str,
    change_number: i64,
    actor: SettingsActor,
    patch_hash: Option<&str>,
    settings_hash: &str,
) -> StoreResult<()> {
    tx.conn()
        .prepare_cached(
            "INSERT INTO run_setting_changes (run_id, change_number, actor, patch_hash, settings_hash, changed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            run_id,
            change_number,
            actor.as_str(),
            patch_hash,
            settings_hash,
            tx.now_ms()
        ])?;
    Ok(())
}

/// A client's change to a run's settings.
pub struct Change<'a> {
    pub run_id: &'a str,
    /// The patch as sent (stored for the record) and parsed.
    pub patch_json: &'a Value,
    pub patch: &'a [PatchOp],
    /// Compare-and-set: refused unless the current change number is this one.
    pub expected_change_number: Option<i64>,
    pub actor: SettingsActor,
}

/// `run.changeSettings`: check the change against the declaration and the current version,
/// and store the next version. Refused, with nothing written, for a terminal run, a run
/// without declared settings, a stale `expected_change_number` or a denied operation.
pub fn change(tx: &WriteTx<'_>, change: &Change<'_>) -> StoreResult<SettingsVersion> {
    assert!(
        matches!(change.actor, SettingsActor::Human | SettingsActor::Session),
        "change 0 alone comes from the workflow or the restarted run"
    );
    let run = read_run(tx, change.run_id)?;
    if run.status.is_terminal() {
        return Err(SettingsError::RunEnded {
            status: run.status.to_string(),
        }
        .into());
    }
    let (declaration_hash, current) = current_row(tx.conn(), change.run_id)?.ok_or(SettingsError::NotDeclared)?;
    if let Some(expected) = change
        .expected_change_number
        .filter(|expected| *expected != current.change_number)
    {
        return Err(StoreError::SettingsChanged {
            run_id: change.run_id.to_string(),
            expected,
            current: current.change_number,
        });
    }
    let declared = stored_json(tx.conn(), &declaration_hash, "settings declaration")?;
    let changed = Declaration::parse(&declared)?.change(&current.value, change.patch)?;
    let patch_hash = put_json(tx, change.patch_json, PATCH_BYTES_MAX)?;
    let settings_hash = put_json(tx, &changed, SETTINGS_BYTES_MAX)?;
    let next = current.change_number + 1;
    insert_version(tx, change.run_id, next, change.actor, Some(&patch_hash), &settings_hash)?;
    tx.conn()
        .prepare_cached("UPDATE run_settings SET change_number = ?1, updated_at = ?2 WHERE run_id = ?3")?
        .execute(params![next, tx.now_ms(), change.run_id])?;
    // The change number grew by one.
    super::presentation::changed(tx, change.run_id, 1)?;
    Ok(SettingsVersion {
        change_number: next,
        value: changed,
    })
}

/// The declaration hash and current version of a run's settings; `None` when it has none.
fn current_row(conn: &Connection, run_id: &str) -> StoreResult<Option<(String, SettingsVersion)>> {
    let Some((declaration_hash, number)) = conn
        .prepare_cached("SELECT declaration_hash, change_number FROM run_settings WHERE run_id = ?1")?
        .query_row([run_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))
        .optional()?
    else {
        return Ok(None);
    };
    let version = version(conn, run_id, number)?.expect("run_settings names a stored version");
    Ok(Some((declaration_hash, version)))
}

/// The current change number of a run's settings (`None`: it declares none). Cheap: one row.
pub fn current_number(conn: &Connection, run_id: &str) -> StoreResult<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT change_number FROM run_settings WHERE run_id = ?1")?
        .query_row([run_id], |row| row.get(0))
        .optional()?)
}

/// The current version of a run's settings (`None`: it declares none).
pub fn current(conn: &Connection, run_id: &str) -> StoreResult<Option<SettingsVersion>> {
    Ok(current_row(conn, run_id)?.map(|(_, version)| version))
}

/// One numbered version of a run's settings.
pub fn version(conn: &Connection, run_id: &str, change_number: i64) -> StoreResult<Option<SettingsVersion>> {
    let hash: Option<String> = conn
        .prepare_cached("SELECT settings_hash FROM run_setting_changes WHERE run_id = ?1 AND change_number = ?2")?
        .query_row(params![run_id, change_number], |row| row.get(0))
        .optional()?;
    let Some(hash) = hash else { return Ok(None) };
    Ok(Some(SettingsVersion {
        change_number,
        value: stored_json(conn, &hash, "settings version")?,
    }))
}

fn stored_json(conn: &Connection, hash: &str, what: &'static str) -> StoreResult<Value> {
    read_json(conn, hash)?.ok_or_else(|| StoreError::InvalidInput {
        what,
        detail: "its stored content is missing; run `pi-workflows state verify`".to_string(),
    })
}

/// An attempt's settings version must be a stored version of its run, and exist exactly
/// when the run declares settings.
pub fn check_attempt_version(conn: &Connection, run_id: &str, change_number: Option<i64>) -> StoreResult<()> {
    check_version_of(current_number(conn, run_id)?, change_number)
}

/// `check_attempt_version` against the run's `current` version read once (a batch of attempts).
pub fn check_version_of(current: Option<i64>, change_number: Option<i64>) -> StoreResult<()> {
    let fits = match (current, change_number) {
        (None, None) => true,
        (Some(current), Some(number)) => (0..=current).contains(&number),
        _ => false,
    };
    if fits {
        return Ok(());
    }
    Err(StoreError::InvalidInput {
        what: "settingsChangeNumber",
        detail: match current {
            None => "this run declares no settings; send no settingsChangeNumber".to_string(),
            Some(current) => format!("must name a settings version of this run (0 to {current})"),
        },
    })
}

/// What the settings page shows: grants, the current version, the newest changes.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingsPage {
    pub paths: Value,
    pub current: SettingsVersion,
    /// Newest first: `(change_number, actor, changed_at)`.
    pub changes: Vec<(i64, String, i64)>,
}

/// The settings page of a run (`None`: it declares none). `before` pages back through changes.
pub fn page(conn: &Connection, run_id: &str, before: Option<i64>, limit: usize) -> StoreResult<Option<SettingsPage>> {
    let Some((declaration_hash, current)) = current_row(conn, run_id)? else {
        return Ok(None);
    };
    let declared = stored_json(conn, &declaration_hash, "settings declaration")?;
    let paths = Declaration::parse(&declared)?.paths_json();
    let limit = limit.clamp(1, CHANGES_PAGE_MAX) as i64;
    let changes = conn
        .prepare_cached(
            "SELECT change_number, actor, changed_at FROM run_setting_changes
             WHERE run_id = ?1 AND change_number < ?2 ORDER BY change_number DESC LIMIT ?3",
        )?
        .query_map(params![run_id, before.unwrap_or(i64::MAX), limit], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(SettingsPage {
        paths,
        current,
        changes,
    }))
}

//! `run.changeSettings` (`payload.patch`: a JSON Patch; `expectedChangeNumber?`; `actor?`:
//! `human` (default) or `session`) and the settings page (`view.page` with `kind:
//! "settings"`). A change commits with its receipt and answers its change number; a live
//! runner gives the new version to the nodes it starts next.

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::{JsonObject, Outcome, Request};
use crate::server::answers::{Answer, answer_of, command_request, rejected, run_id_of};
use crate::server::answers::{page_limit, read_refusal};
use crate::server::blocking;
use crate::settings::{SettingsError, parse_patch};
use crate::store::StoreError;
use crate::store::commands::{self, Accepted};
use crate::store::settings::{self, CHANGES_PAGE_MAX, Change, SettingsActor};

/// Changes on one settings page unless the client asks for fewer.
const CHANGES_PAGE_DEFAULT: usize = 50;

/// `run.changeSettings`: check the patch against the workflow's declaration and store the
/// run's next settings version.
pub async fn change_settings(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let payload = &request.payload;
    let patch_json = payload.get("patch").cloned().unwrap_or(Value::Null);
    let patch = parse_patch(&patch_json).map_err(|err| rejected(err.code(), &err.to_string()))?;
    let expected_change_number = match payload.get("expectedChangeNumber") {
        None => None,
        Some(number) => Some(
            number
                .as_i64()
                .filter(|number| *number >= 0)
                .ok_or_else(|| rejected("invalidRequest", "expectedChangeNumber must be a non-negative integer"))?,
        ),
    };
    let actor = match payload.get("actor").and_then(Value::as_str) {
        None | Some("human") => SettingsActor::Human,
        Some("session") => SettingsActor::Session,
        Some(_) => return Err(rejected("invalidRequest", "actor must be human or session")),
    };
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let change = Change {
                run_id: &run_id,
                patch_json: &patch_json,
                patch: &patch,
                expected_change_number,
                actor,
            };
            let version = settings::change(tx, &change)?;
            Ok(Accepted {
                revision: None,
                receipt: json!({ "runId": run_id, "changeNumber": version.change_number }),
            })
        })
    })
    .await;
    answer_of(stored)
}

/// `view.page` with `kind: "settings"`: the declared paths, the current version and its
/// value, and the newest changes (`before`: page back through older change numbers).
pub async fn settings_page(ctx: &OpsContext, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let payload = &request.payload;
    let before = payload.get("before").and_then(Value::as_i64);
    let limit = page_limit(payload, CHANGES_PAGE_DEFAULT, CHANGES_PAGE_MAX)?;
    let owned = run_id.clone();
    let page = blocking::read(&ctx.store, move |conn| {
        crate::store::run_view::run_facts(conn, &owned)?;
        settings::page(conn, &owned, before, limit)
    })
    .await
    .map_err(|err| match err {
        err @ StoreError::RunNotFound { .. } => read_refusal(err),
        other => rejected("unavailable", &format!("the settings could not be read: {other}")),
    })?;
    let Some(page) = page else {
        let missing = SettingsError::NotDeclared;
        return Err(rejected(missing.code(), &missing.to_string()));
    };
    let changes: Vec<Value> = page
        .changes
        .iter()
        .map(|(number, actor, at)| json!({ "changeNumber": number, "actor": actor, "changedAt": at }))
        .collect();
    let mut receipt = JsonObject::new();
    receipt.insert("runId".into(), json!(run_id));
    receipt.insert("kind".into(), json!("settings"));
    receipt.insert("changeNumber".into(), json!(page.current.change_number));
    receipt.insert("settings".into(), page.current.value);
    receipt.insert("paths".into(), page.paths);
    if changes.len() == limit
        && let Some((oldest, _, _)) = page.changes.last().filter(|(number, _, _)| *number > 0)
    {
        receipt.insert("nextBefore".into(), json!(oldest));
    }
    receipt.insert("changes".into(), Value::Array(changes));
    Ok((Outcome::Accepted, receipt, None))
}

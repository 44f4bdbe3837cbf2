//! The origin-session view (`pi-workflows.session-view.v1`, docs/SESSIONS.md): one
//! consistent read (one snapshot) of a session's active run, retained terminal run, message window and open
//! turn, built once per change and shared by its subscribers; each subscriber then adds what
//! only its own coordinator epoch may see (`coordinator`, `nextEligible`).
//!
//! Architecture Invariant: reads only (building a run view stores the content it names, as
//! every view does); never decides eligibility itself — the store's facts do.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::cache::{self, Views};
use crate::server::blocking;
use crate::store::StoreResult;
use crate::store::run_view;
use crate::store::session_view::{self, SessionFacts};

pub const SESSION_VIEW_SCHEMA: &str = "pi-workflows.session-view.v1";

/// A built session view: the shared document and, in order, the messages the active
/// coordinator may send now.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionView {
    /// Changes exactly when anything in `document` or `eligible` changes.
    pub digest: String,
    pub document: Arc<Value>,
    pub eligible: Vec<String>,
}

/// Build the view of `session_id` now: the session's facts and the runs it shows are read
/// in one snapshot, so the open turn and a run shown running by that turn never disagree.
pub async fn build_session_view(views: &Views, session_id: &str) -> StoreResult<SessionView> {
    let owned = session_id.to_string();
    let now_ms = views.store.now_ms();
    let (facts, active, retained) = blocking::read(&views.store, move |conn| {
        let facts = session_view::read_session(conn, &owned, now_ms)?;
        let read = |run_id: Option<&String>| run_id.map(|run_id| cache::read_run_view(conn, run_id)).transpose();
        let active = read(facts.active_run_id.as_ref())?;
        let retained = read(facts.retained_terminal_run_id.as_ref())?;
        Ok((facts, active, retained))
    })
    .await?;
    let active = run_summary(views, facts.active_run_id.as_deref(), active).await?;
    let retained = run_summary(views, facts.retained_terminal_run_id.as_deref(), retained).await?;
    Ok(assemble(&facts, active, retained))
}

/// What a session view is built from, in one cheap read: the session's facts digest and the
/// presentation revisions of the runs it shows. A feed builds the (costlier) view only when
/// this changed, so a commit elsewhere in the server costs a watched session one small read.
pub async fn session_key(views: &Views, session_id: &str) -> StoreResult<String> {
    let owned = session_id.to_string();
    let now_ms = views.store.now_ms();
    blocking::read(&views.store, move |conn| {
        let facts = session_view::read_session(conn, &owned, now_ms)?;
        let revision = |run_id: Option<&str>| match run_id {
            Some(run_id) => run_view::presentation_revision(conn, run_id),
            None => Ok(None),
        };
        let active = revision(facts.active_run_id.as_deref())?;
        let retained = revision(facts.retained_terminal_run_id.as_deref())?;
        Ok(format!("{}/{active:?}/{retained:?}", facts.digest))
    })
    .await
}

/// A run as a session view shows it: its identity and the server's `display`, as the run
/// view has it (renderers never derive a status).
async fn run_summary(views: &Views, run_id: Option<&str>, read: Option<cache::RunViewRead>) -> StoreResult<Value> {
    let (Some(run_id), Some(read)) = (run_id, read) else {
        return Ok(Value::Null);
    };
    let view = cache::finish_run_view(views, run_id, read, &mut HashSet::new()).await?;
    let document = &view.document;
    Ok(json!({
        "runId": run_id,
        "workflowName": document.pointer("/workflow/name").cloned().unwrap_or(Value::Null),
        "revision": view.revision,
        "display": document.get("display").cloned().unwrap_or(Value::Null),
    }))
}

fn assemble(facts: &SessionFacts, active: Value, retained: Value) -> SessionView {
    let eligible: Vec<String> = facts
        .messages
        .iter()
        .filter(|message| message.eligible)
        .map(|message| message.workflow_message_id.clone())
        .collect();
    let document = json!({
        "schema": SESSION_VIEW_SCHEMA,
        "activeRun": active,
        "retainedTerminal": retained,
        "messages": facts.messages,
        "messageCount": facts.message_count,
        "truncated": facts.truncated,
        "openTurn": facts.open_turn,
    });
    let digest = crate::digest::sha256_hex(&crate::protocol::value_to_canonical_vec(&json!([document, eligible])));
    SessionView {
        digest,
        document: Arc::new(document),
        eligible,
    }
}

/// The view one subscriber sees: `coordinator` says whether its epoch is the active one, and
/// only the active epoch sees `nextEligible`.
pub fn render_for(view: &SessionView, epoch: Option<u64>, active_epoch: Option<u64>) -> Value {
    let mut document = (*view.document).clone();
    let object = document.as_object_mut().expect("a session view is an object");
    let active = epoch.is_some() && epoch == active_epoch;
    object.insert(
        "coordinator".into(),
        match epoch {
            Some(epoch) => json!({"epoch": epoch, "active": active}),
            None => Value::Null,
        },
    );
    let next = view.eligible.first().filter(|_| active).cloned();
    object.insert("nextEligible".into(), json!(next));
    document
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(eligible: &[&str]) -> SessionView {
        SessionView {
            digest: String::new(),
            document: Arc::new(json!({"schema": SESSION_VIEW_SCHEMA, "messages": []})),
            eligible: eligible.iter().map(|id| id.to_string()).collect(),
        }
    }

    #[test]
    fn only_the_active_epoch_sees_the_next_eligible_message() {
        let built = view(&["msg-a-2", "msg-a-3"]);
        let active = render_for(&built, Some(7), Some(7));
        assert_eq!(active["nextEligible"], "msg-a-2");
        assert_eq!(active["coordinator"], json!({"epoch": 7, "active": true}));
        let fenced = render_for(&built, Some(6), Some(7));
        assert_eq!(fenced["nextEligible"], Value::Null);
        assert_eq!(fenced["coordinator"]["active"], false);
        let watcher = render_for(&built, None, Some(7));
        assert_eq!(watcher["nextEligible"], Value::Null);
        assert_eq!(watcher["coordinator"], Value::Null);
        let none = render_for(&view(&[]), Some(7), Some(7));
        assert_eq!(none["nextEligible"], Value::Null);
    }
}

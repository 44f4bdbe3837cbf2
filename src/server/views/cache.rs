//! Building live views: a run view is read in one snapshot, built by `crate::view`, and the
//! generated content it references (a long reason) is stored in `run_view_content` before
//! anyone is sent the view; stored facts it references (the definition, attempt values) are
//! read in place by `view.content`, so a view of an ordinary run writes nothing. The parsed
//! definitions are cached by digest (a run's definition never changes).
//!
//! Architecture Invariant: view reads never create receipts and never change run state;
//! the only write here stores generated content a view is about to name.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::protocol::JsonObject;
use crate::server::blocking;
use crate::store::run_view;
use crate::store::{Store, StoreError, StoreResult, blobs};
use crate::view::document::{self, DEFINITION_MEDIA_TYPE, Definition, HISTORY_WINDOW, Reason, RunView, RunViewInput};
use crate::view::list;

/// A page's items are cut at this many encoded bytes (and at its item limit).
pub const PAGE_BYTES_MAX: usize = 256 * 1024;
/// Definitions kept for views, as views show them (a run's definition never changes).
const DEFINITIONS_CACHED_MAX: usize = 32;

/// The views' handle: the store they read and what they show of definitions, by digest
/// (the canonical bytes are not kept: a view names their size only).
pub struct Views {
    pub store: Arc<Store>,
    definitions: Mutex<HashMap<String, Arc<Definition>>>,
}

impl Views {
    pub fn new(store: Arc<Store>) -> Arc<Self> {
        Arc::new(Self {
            store,
            definitions: Mutex::new(HashMap::new()),
        })
    }

    fn definition(&self, digest: &str) -> Option<Arc<Definition>> {
        self.lock().get(digest).cloned()
    }

    fn keep_definition(&self, digest: &str, definition: Arc<Definition>) {
        let mut definitions = self.lock();
        if definitions.len() >= DEFINITIONS_CACHED_MAX {
            definitions.clear();
        }
        definitions.insert(digest.to_string(), definition);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Definition>>> {
        self.definitions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Build the run view of `run_id` now, with its referenced content stored. (A feed reads and
/// finishes its views itself, remembering the content it stored.)
pub async fn build_run_view(views: &Views, run_id: &str) -> StoreResult<RunView> {
    let owned = run_id.to_string();
    let read = blocking::read(&views.store, move |conn| read_run_view(conn, &owned)).await?;
    finish_run_view(views, run_id, read, &mut HashSet::new()).await
}

/// What a run view is built from, read inside the caller's snapshot (so a view that shows
/// a run beside other facts — the session view — shows them as of one moment).
pub struct RunViewRead {
    facts: run_view::RunViewFacts,
    reason: Option<Reason>,
}

pub fn read_run_view(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<RunViewRead> {
    let facts = run_view::run_view_facts(conn, run_id, HISTORY_WINDOW)?;
    finish_read(conn, facts)
}

/// [`read_run_view`] of a run whose presentation revision the caller read in this same
/// transaction (a feed's look).
pub fn read_run_view_at(conn: &rusqlite::Connection, run_id: &str, revision: i64) -> StoreResult<RunViewRead> {
    let facts = run_view::run_view_facts_at(conn, run_id, HISTORY_WINDOW, Some(revision))?;
    finish_read(conn, facts)
}

fn finish_read(conn: &rusqlite::Connection, facts: run_view::RunViewFacts) -> StoreResult<RunViewRead> {
    let reason = reason_of(conn, &facts.run)?;
    Ok(RunViewRead { facts, reason })
}

/// Build the document of a read run view and store the content it names.
pub async fn finish_run_view(
    views: &Views,
    run_id: &str,
    read: RunViewRead,
    stored: &mut HashSet<String>,
) -> StoreResult<RunView> {
    let definition = definition(views, &read.facts.run.definition_digest).await?;
    let view = document::run_view(&RunViewInput {
        facts: &read.facts,
        definition: definition.as_deref(),
        reason: read.reason,
    });
    store_contents(views, run_id, &view, stored).await?;
    Ok(view)
}

/// What a view shows of a run's definition (read and derived once per digest; `None` if it was not stored).
async fn definition(views: &Views, digest: &str) -> StoreResult<Option<Arc<Definition>>> {
    if let Some(definition) = views.definition(digest) {
        return Ok(Some(definition));
    }
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest).to_string();
    if !crate::digest::is_sha256_hex(&hex) {
        return Ok(None);
    }
    let bytes = blocking::read(&views.store, move |conn| {
        match blobs::blob_ref(conn, &hex, DEFINITION_MEDIA_TYPE) {
            Ok(reference) => blobs::read_blob_verified(conn, &reference).map(Some),
            Err(StoreError::Blob(blobs::BlobError::NotFound { .. })) => Ok(None),
            Err(err) => Err(err),
        }
    })
    .await?;
    let Some(canonical) = bytes else {
        return Ok(None);
    };
    let value: Value = serde_json::from_slice(&canonical).map_err(|err| StoreError::InvalidInput {
        what: "stored definition",
        detail: err.to_string(),
    })?;
    let definition = Arc::new(Definition::new(&canonical, &value));
    views.keep_definition(digest, Arc::clone(&definition));
    Ok(Some(definition))
}

/// Why a run needs action: its stored error, or the code it parked or failed with.
fn reason_of(conn: &rusqlite::Connection, run: &run_view::RunFacts) -> StoreResult<Option<Reason>> {
    if let Some(hash) = run
        .error_hash
        .as_deref()
        .filter(|hash| crate::digest::is_sha256_hex(hash))
        && let Some(error) = blobs::read_json(conn, hash)?
    {
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        return Ok(Some(Reason {
            code: Some(text("code"))
                .filter(|code| !code.is_empty())
                .unwrap_or_else(|| "failed".into()),
            message: text("message"),
        }));
    }
    Ok(run.detail.as_ref().map(|detail| Reason {
        code: detail.clone(),
        message: describe_detail(detail).to_string(),
    }))
}

/// What a stored park or failure code asks of the user.
fn describe_detail(code: &str) -> &'static str {
    match code {
        "workflowSourceChanged" => {
            "the workflow's source changed since the run started; restore it and resume, or restart the run"
        }
        "effectAmbiguous" => {
            "an external effect may or may not have happened; inspect it, record what happened with \
             `pi-workflows run review`, then resume"
        }
        "effectReviewed" => "its uncertain effects were reviewed; resume to continue",
        "runnerNoProgress" => "the runner stopped making progress; resume to try again",
        "runnerOutOfMemory" => {
            "the runner used more memory than its bound (PI_WORKFLOWS_RUNNER_MEMORY_MB) and was stopped; \
             raise the bound and restart the server, or fix the step, then resume"
        }
        "workerCrashed" => "the runner crashed after saving progress; resume to continue from there",
        _ => "see the run's events for details",
    }
}

/// Store the content a view references that `stored` does not know yet, in one write
/// (already stored content is left as is: the insert ignores a present row).
async fn store_contents(views: &Views, run_id: &str, view: &RunView, stored: &mut HashSet<String>) -> StoreResult<()> {
    let unknown: Vec<_> = view
        .contents
        .iter()
        .filter(|content| !stored.contains(&content.digest_hex()))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        let owned = run_id.to_string();
        // Derived content, rebuilt from the run's facts whenever it is missing; no watcher
        // reads it, so storing it wakes none (this feed included).
        blocking::write_unwatched(&views.store, move |tx| {
            for content in &unknown {
                run_view::put_view_content(tx, &owned, content.media_type, &content.bytes)?;
            }
            Ok(())
        })
        .await?;
    }
    stored.extend(view.contents.iter().map(|content| content.digest_hex()));
    Ok(())
}

/// The run-list page as a receipt or event payload.
pub async fn runs_page(views: &Views, before: Option<(i64, String)>, limit: usize) -> StoreResult<JsonObject> {
    let facts = blocking::read(&views.store, move |conn| {
        run_view::runs_page(conn, before.as_ref().map(|(at, id)| (*at, id.as_str())), limit)
    })
    .await?;
    let (items, full) = within_budget(facts.iter().map(list::list_item), limit);
    let mut page = JsonObject::new();
    page.insert("schema".into(), json!(list::RUN_LIST_SCHEMA));
    if (full || items.len() == limit)
        && let Some(last) = facts.get(items.len().saturating_sub(1))
    {
        page.insert(
            "nextBefore".into(),
            json!({ "createdAt": last.run.created_at, "runId": last.run.run_id }),
        );
    }
    page.insert("items".into(), Value::Array(items));
    Ok(page)
}

/// Items up to `limit` and [`PAGE_BYTES_MAX`] encoded bytes; true when the budget cut it.
pub fn within_budget(items: impl Iterator<Item = Value>, limit: usize) -> (Vec<Value>, bool) {
    let mut kept = Vec::new();
    let mut bytes = 0;
    for item in items.take(limit) {
        bytes += item.to_string().len() + 1;
        if bytes > PAGE_BYTES_MAX && !kept.is_empty() {
            return (kept, true);
        }
        kept.push(item);
    }
    (kept, false)
}

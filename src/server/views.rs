//! Building live views for clients: `view.run.get`, `view.page`, `view.content` and
//! `view.runs.page`. A view is read in one snapshot, built by `crate::view`, and its
//! referenced content is stored in `run_view_content` before the view is sent.
//!
//! Architecture Invariant: view reads never create receipts and never change run state;
//! the only write here stores generated content a view is about to name.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{Value, json};

use super::blocking;
use super::context::ServerContext;
use super::handlers::{Answer, rejected, run_id_of};
use crate::protocol::{JsonObject, Outcome, Request, ResponseError};
use crate::store::run_view::{self, ATTEMPTS_PAGE_MAX, CONTENT_CHUNK_BYTES_MAX, ContentRef, RUNS_PAGE_MAX};
use crate::store::{StoreError, StoreResult, blobs};
use crate::view::document::{self, DEFINITION_MEDIA_TYPE, Definition, HISTORY_WINDOW, Reason, RunView, RunViewInput};
use crate::view::list;

/// A page's items are cut at this many encoded bytes (and at its item limit).
pub const PAGE_BYTES_MAX: usize = 256 * 1024;
/// Parsed definitions kept for views (a run's definition never changes).
const DEFINITIONS_CACHED_MAX: usize = 32;
/// Default page sizes.
const ATTEMPTS_PAGE_DEFAULT: usize = 100;
const RUNS_PAGE_DEFAULT: usize = 50;

/// View state the server shares: parsed definitions by digest.
#[derive(Default)]
pub struct ViewCache {
    definitions: Mutex<HashMap<String, Arc<Definition>>>,
}

impl ViewCache {
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

/// Build the run view of `run_id` now, with its referenced content stored.
pub async fn build_run_view(ctx: &Arc<ServerContext>, run_id: &str) -> StoreResult<RunView> {
    build_run_view_storing(ctx, run_id, &mut HashSet::new()).await
}

/// `build_run_view` for a feed: `stored` remembers the content digests known to be stored
/// already, so a rebuild does not look them up again.
pub async fn build_run_view_storing(
    ctx: &Arc<ServerContext>,
    run_id: &str,
    stored: &mut HashSet<String>,
) -> StoreResult<RunView> {
    let owned = run_id.to_string();
    let (facts, reason) = blocking::read(&ctx.store, move |conn| {
        let facts = run_view::run_view_facts(conn, &owned, HISTORY_WINDOW)?;
        let reason = reason_of(conn, &facts.run)?;
        Ok((facts, reason))
    })
    .await?;
    let definition = definition(ctx, &facts.run.definition_digest).await?;
    let view = document::run_view(&RunViewInput {
        facts: &facts,
        definition: definition.as_deref(),
        reason,
    });
    store_contents(ctx, run_id, &view, stored).await?;
    Ok(view)
}

/// A run's parsed definition snapshot (read once per digest; `None` if it was not stored).
async fn definition(ctx: &Arc<ServerContext>, digest: &str) -> StoreResult<Option<Arc<Definition>>> {
    if let Some(definition) = ctx.views.definition(digest) {
        return Ok(Some(definition));
    }
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest).to_string();
    if !crate::digest::is_sha256_hex(&hex) {
        return Ok(None);
    }
    let bytes = blocking::read(&ctx.store, move |conn| {
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
    let definition = Arc::new(Definition { canonical, value });
    ctx.views.keep_definition(digest, Arc::clone(&definition));
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
        "effectAmbiguous" => "an external effect may or may not have happened; review it before resuming",
        "runnerNoProgress" => "the runner stopped making progress; resume to try again",
        _ => "see the run's events for details",
    }
}

/// Store the content a view references (already stored content is left as is).
async fn store_contents(
    ctx: &Arc<ServerContext>,
    run_id: &str,
    view: &RunView,
    stored: &mut HashSet<String>,
) -> StoreResult<()> {
    let mut missing = Vec::new();
    for content in view
        .contents
        .iter()
        .filter(|content| !stored.contains(&content.digest_hex()))
    {
        let (owned, digest, media) = (run_id.to_string(), content.digest_hex(), content.media_type);
        let present = blocking::read(&ctx.store, move |conn| {
            run_view::view_content_ref(conn, &owned, &digest, media)
        })
        .await?
        .is_some();
        if !present {
            missing.push(content.clone());
        }
    }
    if !missing.is_empty() {
        let owned = run_id.to_string();
        blocking::write(&ctx.store, move |tx| {
            for content in &missing {
                run_view::put_view_content(tx, &owned, content.media_type, &content.bytes)?;
            }
            Ok(())
        })
        .await?;
    }
    stored.extend(view.contents.iter().map(|content| content.digest_hex()));
    Ok(())
}

/// `view.run.get`: the run's current view.
pub async fn view_run_get(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let view = build_run_view(ctx, &run_id).await.map_err(read_refusal)?;
    let mut receipt = JsonObject::new();
    receipt.insert("view".into(), view.document);
    Ok((Outcome::Accepted, receipt, None))
}

/// `view.page`: one page of a run's attempt history (`kind: "attempts"`, `after`, `limit`),
/// or its settings (`kind: "settings"`, in `settings`).
pub async fn view_page(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let payload = &request.payload;
    match payload.get("kind").and_then(Value::as_str).unwrap_or("attempts") {
        "attempts" => {}
        "settings" => return super::settings::settings_page(ctx, request).await,
        _ => return Err(rejected("invalidRequest", "view.page kinds: attempts, settings")),
    }
    let after = payload.get("after").and_then(Value::as_i64);
    let limit = page_limit(payload, ATTEMPTS_PAGE_DEFAULT, ATTEMPTS_PAGE_MAX)?;
    let owned = run_id.clone();
    let (revision, attempts) = blocking::read(&ctx.store, move |conn| {
        let revision = run_view::presentation_revision(conn, &owned)?
            .ok_or_else(|| StoreError::RunNotFound { run_id: owned.clone() })?;
        Ok((revision, run_view::attempts_page(conn, &owned, after, limit)?))
    })
    .await
    .map_err(read_refusal)?;
    let (items, full) = within_budget(attempts.iter().map(document::attempt_item), limit);
    let next = (full || items.len() == limit)
        .then(|| attempts.get(items.len().saturating_sub(1)).map(|attempt| attempt.seq))
        .flatten();
    let mut receipt = JsonObject::new();
    receipt.insert("runId".into(), json!(run_id));
    receipt.insert("revision".into(), json!(revision));
    receipt.insert("items".into(), Value::Array(items));
    if let Some(next) = next {
        receipt.insert("nextAfter".into(), json!(next));
    }
    Ok((Outcome::Accepted, receipt, None))
}

/// `view.runs.page`: runs newest first (`before`: the last item's cursor, `limit`).
pub async fn view_runs_page(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let limit = page_limit(&request.payload, RUNS_PAGE_DEFAULT, RUNS_PAGE_MAX)?;
    let before = match request.payload.get("before") {
        None => None,
        Some(cursor) => Some(parse_runs_cursor(cursor)?),
    };
    let page = runs_page(ctx, before, limit).await.map_err(read_refusal)?;
    Ok((Outcome::Accepted, page, None))
}

/// The run-list page as a receipt or event payload.
pub async fn runs_page(
    ctx: &Arc<ServerContext>,
    before: Option<(i64, String)>,
    limit: usize,
) -> StoreResult<JsonObject> {
    let facts = blocking::read(&ctx.store, move |conn| {
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

fn parse_runs_cursor(cursor: &Value) -> Result<(i64, String), (Outcome, ResponseError)> {
    let created_at = cursor.get("createdAt").and_then(Value::as_i64);
    let run_id = cursor.get("runId").and_then(Value::as_str);
    match (created_at, run_id) {
        (Some(at), Some(id)) if !id.is_empty() && id.len() <= 256 => Ok((at, id.to_string())),
        _ => Err(rejected(
            "invalidRequest",
            "before must be the nextBefore object of the previous page",
        )),
    }
}

pub(super) fn page_limit(payload: &JsonObject, default: usize, max: usize) -> Result<usize, (Outcome, ResponseError)> {
    match payload.get("limit") {
        None => Ok(default),
        Some(limit) => match limit.as_u64() {
            Some(limit) if (1..=max as u64).contains(&limit) => Ok(limit as usize),
            _ => Err(rejected("invalidRequest", &format!("limit must be 1 to {max}"))),
        },
    }
}

/// Items up to `limit` and [`PAGE_BYTES_MAX`] encoded bytes; true when the budget cut it.
fn within_budget(items: impl Iterator<Item = Value>, limit: usize) -> (Vec<Value>, bool) {
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

/// `view.content`: one chunk of content a view advertised (`digest`, `mediaType`,
/// `offset`, `length` ≤ 512 KiB). The client verifies the assembled bytes.
pub async fn view_content(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let payload = &request.payload;
    let digest = payload.get("digest").and_then(Value::as_str).unwrap_or_default();
    let hex = digest.strip_prefix("sha256:").unwrap_or_default().to_string();
    let media_type = payload
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !crate::digest::is_sha256_hex(&hex) || media_type.is_empty() || media_type.len() > blobs::MEDIA_TYPE_BYTES_MAX {
        return Err(rejected(
            "invalidRequest",
            "view.content needs digest (sha256:<hex>) and mediaType",
        ));
    }
    let offset = payload.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
    let length = payload
        .get("length")
        .and_then(Value::as_u64)
        .unwrap_or(CONTENT_CHUNK_BYTES_MAX as u64) as usize;
    if length == 0 || length > CONTENT_CHUNK_BYTES_MAX {
        return Err(rejected(
            "badRange",
            &format!("length must be 1 to {CONTENT_CHUNK_BYTES_MAX}"),
        ));
    }
    let owned = run_id.clone();
    let read = blocking::read(&ctx.store, move |conn| {
        let Some(reference) = run_view::view_content_ref(conn, &owned, &hex, &media_type)? else {
            return Ok(None);
        };
        if offset > reference.byte_length {
            return Ok(Some((reference, None)));
        }
        let chunk = run_view::read_view_content(conn, &reference, &owned, offset, length)?;
        Ok(Some((reference, chunk)))
    })
    .await
    .map_err(read_refusal)?;
    let (reference, chunk) = match read {
        None => return Err(unavailable_content()),
        Some((_, None)) => return Err(rejected("badRange", "offset is past the end of the content")),
        Some((reference, Some(chunk))) => (reference, chunk),
    };
    Ok((Outcome::Accepted, content_receipt(&reference, offset, &chunk), None))
}

fn content_receipt(reference: &ContentRef, offset: usize, chunk: &[u8]) -> JsonObject {
    let mut receipt = JsonObject::new();
    receipt.insert("digest".into(), json!(format!("sha256:{}", reference.digest)));
    receipt.insert("mediaType".into(), json!(reference.media_type));
    receipt.insert("byteLength".into(), json!(reference.byte_length));
    receipt.insert("offset".into(), json!(offset));
    receipt.insert(
        "data".into(),
        json!(base64::engine::general_purpose::STANDARD.encode(chunk)),
    );
    receipt
}

fn unavailable_content() -> (Outcome, ResponseError) {
    (
        Outcome::NotFound,
        ResponseError::new(
            "contentUnavailable",
            "no such content for this run; read the run view again for current references",
        )
        .expect("a valid error"),
    )
}

pub(super) fn read_refusal(err: StoreError) -> (Outcome, ResponseError) {
    match err {
        StoreError::RunNotFound { run_id } => (
            Outcome::NotFound,
            ResponseError::new(
                "notFound",
                &format!("no run {run_id}; list runs with `pi-workflows runs`"),
            )
            .unwrap_or_else(|_| rejected("notFound", "no such run").1),
        ),
        other => rejected("unavailable", &format!("the view could not be read: {other}")),
    }
}

//! The view reads of the front door: `view.run.get`, `view.page`, `view.content` and
//! `view.runs.page`.
//!
//! Architecture Invariant: view reads never create receipts and never change run state.

use base64::Engine as _;
use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::{JsonObject, Outcome, Request, ResponseError};
use crate::server::answers::{Answer, page_limit, read_refusal, rejected, run_id_of};
use crate::server::blocking;
use crate::server::views::cache::{build_run_view, runs_page, within_budget};
use crate::store::run_view::{
    self, ATTEMPTS_PAGE_MAX, CONTENT_CHUNK_BYTES_MAX, ContentRead, ContentRef, RUNS_PAGE_MAX, UPDATES_PAGE_MAX,
};
use crate::store::{StoreError, blobs};
use crate::view::document;

/// Default page sizes.
const ATTEMPTS_PAGE_DEFAULT: usize = 100;
const RUNS_PAGE_DEFAULT: usize = 50;
const UPDATES_PAGE_DEFAULT: usize = 100;

/// `view.run.get`: the run's current view.
pub async fn view_run_get(ctx: &OpsContext, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let view = build_run_view(&ctx.views, &run_id).await.map_err(read_refusal)?;
    let mut receipt = JsonObject::new();
    receipt.insert("view".into(), view.document);
    Ok((Outcome::Accepted, receipt, None))
}

/// `view.page`: one page of a run's attempt history (`kind: "attempts"`, `after`, `limit`),
/// its settings (`kind: "settings"`, in `settings`), or a request's step updates
/// (`kind: "updates"`).
pub async fn view_page(ctx: &OpsContext, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let payload = &request.payload;
    match payload.get("kind").and_then(Value::as_str).unwrap_or("attempts") {
        "attempts" => {}
        "settings" => return super::settings::settings_page(ctx, request).await,
        "updates" => return updates_page(ctx, request).await,
        _ => {
            return Err(rejected(
                "invalidRequest",
                "view.page kinds: attempts, settings, updates",
            ));
        }
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

/// `view.page` kind `updates`: a request's step updates beyond the view's newest 20
/// (`requestId`, `before`: an update seq, `limit`), newest first; `nextBefore` continues.
async fn updates_page(ctx: &OpsContext, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let payload = &request.payload;
    let request_id = match payload.get("requestId").and_then(Value::as_str) {
        Some(id) if !id.is_empty() && id.len() <= 256 => id.to_string(),
        _ => return Err(rejected("invalidRequest", "view.page kind updates needs requestId")),
    };
    let before = payload.get("before").and_then(Value::as_i64);
    let limit = page_limit(payload, UPDATES_PAGE_DEFAULT, UPDATES_PAGE_MAX)?;
    let (owned, named) = (run_id.clone(), request_id.clone());
    let updates = blocking::read(&ctx.store, move |conn| {
        run_view::run_facts(conn, &owned)?;
        run_view::updates_page(conn, &owned, &named, before, limit)
    })
    .await
    .map_err(read_refusal)?
    .ok_or_else(|| rejected("invalidRequest", "requestId names no request of this run"))?;
    let next = (updates.len() == limit)
        .then(|| updates.last().map(|update| update.seq))
        .flatten();
    let mut receipt = JsonObject::new();
    receipt.insert("runId".into(), json!(run_id));
    receipt.insert("kind".into(), json!("updates"));
    receipt.insert("requestId".into(), json!(request_id));
    let items = updates.iter().map(document::update_object).collect();
    receipt.insert("items".into(), Value::Array(items));
    if let Some(next) = next {
        receipt.insert("nextBefore".into(), json!(next));
    }
    Ok((Outcome::Accepted, receipt, None))
}

/// `view.runs.page`: runs newest first (`before`: the last item's cursor, `limit`).
pub async fn view_runs_page(ctx: &OpsContext, request: &Request) -> Answer {
    let limit = page_limit(&request.payload, RUNS_PAGE_DEFAULT, RUNS_PAGE_MAX)?;
    let before = match request.payload.get("before") {
        None => None,
        Some(cursor) => Some(parse_runs_cursor(cursor)?),
    };
    let page = runs_page(&ctx.views, before, limit).await.map_err(read_refusal)?;
    Ok((Outcome::Accepted, page, None))
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

/// `view.content`: one chunk of content a view advertised (`digest`, `mediaType`,
/// `offset`, `length` ≤ 512 KiB): generated view content, or the output or error of one of
/// the run's own attempts (`outputRef` / `errorRef`). The client verifies the assembled bytes.
pub async fn view_content(ctx: &OpsContext, request: &Request) -> Answer {
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
    // The media type says whether this may be a stored fact of the run (docs/VIEWS.md).
    let value = document::run_value_of(&media_type);
    let read = blocking::read(&ctx.store, move |conn| {
        run_view::read_content(conn, &owned, &hex, &media_type, value, offset, length)
    })
    .await
    .map_err(read_refusal)?;
    let (reference, chunk) = match read {
        ContentRead::Unavailable => return Err(unavailable_content()),
        ContentRead::PastEnd => return Err(rejected("badRange", "offset is past the end of the content")),
        ContentRead::Chunk { reference, bytes } => (reference, bytes),
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

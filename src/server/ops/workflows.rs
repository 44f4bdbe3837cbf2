//! `workflow.list`: one page of the workflows discoverable for a project (its
//! `.pi/workflows/`, then the global `$PI_CODING_AGENT_DIR/workflows/`; a project file hides
//! a global one of the same name), each with its title or why it does not load. A read: no
//! receipt.
//!
//! The server never loads workflow code itself: a resolver child discovers, pages and loads
//! (`workflow-list.ts`), and its answer is checked here like any client payload before a
//! client sees it. Paths go to the client (the user's own files), never into a log.

use serde_json::{Value, json};

use super::context::OpsContext;
use super::run_commands::WORKFLOW_TARGET_BYTES_MAX;
use crate::protocol::{JsonObject, Outcome, Request};
use crate::server::answers::{Answer, page_limit, rejected};
use crate::server::resolvers::mailbox::ResolveFailure;

/// Workflows on one page by default and at most (as the resolver's `LIST_LIMIT_MAX`; prior
/// art lists at most 50).
pub const WORKFLOW_LIST_DEFAULT: usize = 50;
pub const WORKFLOW_LIST_MAX: usize = 50;
/// The largest `offset` accepted: far above what discovery reads (1,000 entries per
/// directory), so any real page is reachable and a number is still a bounded one.
pub const WORKFLOW_LIST_OFFSET_MAX: u64 = 1_000_000;
/// A listed name is a file stem: at most a file name's 255 bytes.
const LISTED_NAME_BYTES_MAX: usize = 255;
/// A listed path (a workflow file, a directory looked in): at most `PATH_MAX`.
const LISTED_PATH_BYTES_MAX: usize = 4096;
/// A workflow title, in characters (as `WORKFLOW_TITLE_CHARS_MAX` in `define.ts`).
pub const WORKFLOW_TITLE_CHARS_MAX: usize = 200;
/// A load error's code and message, in bytes (the message as `LOAD_ERROR_MESSAGE_BYTES_MAX`
/// in `workflow-list.ts`).
const LOAD_ERROR_CODE_BYTES_MAX: usize = 128;
pub const LOAD_ERROR_MESSAGE_BYTES_MAX: usize = 300;

/// `workflow.list`: `projectPath` (absolute), `offset?` (default 0), `limit?` (1 to 50,
/// default 50). Answers `{workflows, total, offset, nextOffset?, truncated, directories}`.
pub async fn workflow_list(ctx: &OpsContext, request: &Request) -> Answer {
    let payload = &request.payload;
    let project = payload
        .get("projectPath")
        .and_then(Value::as_str)
        .filter(|project| project.starts_with('/') && project.len() <= WORKFLOW_TARGET_BYTES_MAX)
        .ok_or_else(|| {
            rejected(
                "invalidRequest",
                "workflow.list needs projectPath: the absolute path of the project directory",
            )
        })?;
    let offset = match payload.get("offset") {
        None => 0,
        Some(offset) => offset
            .as_u64()
            .filter(|offset| *offset <= WORKFLOW_LIST_OFFSET_MAX)
            .ok_or_else(|| {
                rejected(
                    "invalidRequest",
                    &format!("offset must be a whole number from 0 to {WORKFLOW_LIST_OFFSET_MAX}"),
                )
            })?,
    };
    let limit = page_limit(payload, WORKFLOW_LIST_DEFAULT, WORKFLOW_LIST_MAX)?;
    let answer = ctx
        .resolvers
        .list(project, offset, limit)
        .await
        .map_err(|failure| match failure {
            ResolveFailure::Workflow { code, message } => rejected(&code, &message),
            ResolveFailure::TimedOut { seconds } => rejected(
                "listTimeout",
                &format!(
                    "listing the workflows did not finish within {seconds} s (a workflow directory on a slow or hung \
                     file system?); retry, or list a smaller page with limit"
                ),
            ),
            ResolveFailure::Busy => rejected(
                "resolverBusy",
                "every workflow resolver is busy loading other workflows; retry in a moment",
            ),
            ResolveFailure::Unavailable(why) => rejected(
                "resolverUnavailable",
                &format!("the workflows could not be listed: {why}; check Node 20 and the pi-workflows package"),
            ),
        })?;
    let page = checked_page(&answer, offset, limit).map_err(|why| {
        rejected(
            "resolverUnavailable",
            &format!("the resolver answered a malformed workflow list ({why}); report this as a bug"),
        )
    })?;
    Ok((Outcome::Accepted, page, None))
}

/// The resolver's page rebuilt from checked fields only; `nextOffset` is derived here, so a
/// client paging by it always advances and stops.
fn checked_page(answer: &JsonObject, offset: u64, limit: usize) -> Result<JsonObject, &'static str> {
    let listed = answer
        .get("workflows")
        .and_then(Value::as_array)
        .ok_or("no workflows")?;
    if listed.len() > limit {
        return Err("more workflows than the limit");
    }
    let workflows = listed.iter().map(checked_entry).collect::<Result<Vec<_>, _>>()?;
    let total = answer.get("total").and_then(Value::as_u64).ok_or("no total")?;
    if answer.get("offset").and_then(Value::as_u64) != Some(offset) {
        return Err("another offset");
    }
    let end = offset + workflows.len() as u64;
    if end > total.max(offset) || (workflows.is_empty() && offset < total) {
        return Err("a page that does not match its total");
    }
    let truncated = answer.get("truncated").and_then(Value::as_bool).ok_or("no truncated")?;
    let directories = answer.get("directories").ok_or("no directories")?;
    let directory = |scope: &str| {
        directories
            .get(scope)
            .and_then(Value::as_str)
            .filter(|path| path.starts_with('/') && path.len() <= LISTED_PATH_BYTES_MAX)
            .ok_or("a bad directory")
    };
    let mut page = JsonObject::new();
    page.insert("workflows".into(), Value::Array(workflows));
    page.insert("total".into(), json!(total));
    page.insert("offset".into(), json!(offset));
    if end < total {
        page.insert("nextOffset".into(), json!(end));
    }
    page.insert("truncated".into(), json!(truncated));
    page.insert(
        "directories".into(),
        json!({"project": directory("project")?, "global": directory("global")?}),
    );
    Ok(page)
}

fn checked_entry(entry: &Value) -> Result<Value, &'static str> {
    let text = |key: &str| entry.get(key).and_then(Value::as_str);
    let name = text("name")
        .filter(|name| !name.is_empty() && name.len() <= LISTED_NAME_BYTES_MAX)
        .ok_or("a bad name")?;
    let scope = text("scope")
        .filter(|scope| matches!(*scope, "project" | "global"))
        .ok_or("a bad scope")?;
    let path = text("path")
        .filter(|path| path.starts_with('/') && path.len() <= LISTED_PATH_BYTES_MAX)
        .ok_or("a bad path")?;
    let mut checked = json!({"name": name, "scope": scope, "path": path});
    if let Some(title) = entry.get("title") {
        let title = title.as_str().filter(|title| is_title(title)).ok_or("a bad title")?;
        checked["title"] = json!(title);
    }
    if let Some(error) = entry.get("loadError") {
        let field = |key: &str, bytes_max: usize| {
            error
                .get(key)
                .and_then(Value::as_str)
                .filter(|text| text.len() <= bytes_max)
        };
        let code = field("code", LOAD_ERROR_CODE_BYTES_MAX)
            .filter(|code| !code.is_empty())
            .ok_or("a bad loadError code")?;
        let message = field("message", LOAD_ERROR_MESSAGE_BYTES_MAX).ok_or("a bad loadError message")?;
        checked["loadError"] = json!({"code": code, "message": message});
    }
    Ok(checked)
}

/// A workflow title as `defineWorkflow` accepts it: not blank, at most 200 characters, one
/// line of printable text.
pub fn is_title(title: &str) -> bool {
    !title.trim().is_empty()
        && title.chars().count() <= WORKFLOW_TITLE_CHARS_MAX
        && !title
            .chars()
            .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(value: Value) -> JsonObject {
        value.as_object().expect("an object").clone()
    }

    fn page(workflows: Value, total: u64, offset: u64) -> JsonObject {
        answer(json!({
            "workflows": workflows, "total": total, "offset": offset, "truncated": false,
            "directories": {"project": "/p/.pi/workflows", "global": "/g/workflows"},
        }))
    }

    #[test]
    fn a_page_is_rebuilt_from_checked_fields_with_a_derived_next_offset() {
        let entry = json!({"name": "greet", "scope": "project", "path": "/p/.pi/workflows/greet.workflow.ts",
            "title": "Say hello", "extra": "dropped"});
        let checked = checked_page(&page(json!([entry]), 3, 1), 1, 1).expect("valid");
        assert_eq!(checked["nextOffset"], 2);
        assert_eq!(checked["workflows"][0]["title"], "Say hello");
        assert!(checked["workflows"][0].get("extra").is_none());
        let last = checked_page(&page(json!([entry]), 2, 1), 1, 1).expect("valid");
        assert!(last.get("nextOffset").is_none());
        // Past the end: an empty page, no next one.
        assert!(
            checked_page(&page(json!([]), 2, 5), 5, 50)
                .expect("valid")
                .get("nextOffset")
                .is_none()
        );
    }

    #[test]
    fn malformed_pages_are_refused() {
        let good = json!({"name": "a", "scope": "global", "path": "/g/workflows/a.workflow.js"});
        // More than the limit, a page that would not advance, another offset.
        assert!(checked_page(&page(json!([good, good]), 5, 0), 0, 1).is_err());
        assert!(checked_page(&page(json!([]), 5, 0), 0, 50).is_err());
        assert!(checked_page(&page(json!([good]), 5, 0), 1, 50).is_err());
        for bad in [
            json!({"name": "", "scope": "global", "path": "/g/a"}),
            json!({"name": "a", "scope": "builtin", "path": "/g/a"}),
            json!({"name": "a", "scope": "global", "path": "relative"}),
            json!({"name": "a", "scope": "global", "path": "/g/a", "title": "two\nlines"}),
            json!({"name": "a", "scope": "global", "path": "/g/a", "title": "x".repeat(201)}),
            json!({"name": "a", "scope": "global", "path": "/g/a", "loadError": {"code": "", "message": "m"}}),
            json!({"name": "a", "scope": "global", "path": "/g/a", "loadError": {"code": "c", "message": "m".repeat(301)}}),
        ] {
            assert!(checked_page(&page(json!([bad]), 1, 0), 0, 50).is_err(), "{bad}");
        }
    }

    #[test]
    fn titles_are_one_printable_line_of_at_most_200_characters() {
        assert!(is_title("Release gate"));
        assert!(is_title(&"é".repeat(200)));
        assert!(!is_title(&"é".repeat(201)));
        assert!(!is_title("   "));
        assert!(!is_title("bell\u{7}"));
        assert!(!is_title("a\u{2028}b"));
    }
}

//! `pi-workflows workflows`: the workflows `run start <name>` can find for a project — its
//! `.pi/workflows/`, then the global ones (a project file hides a global one of the same
//! name) — one page at a time, with each workflow's title or the code of why it does not
//! load. Through the server's `workflow.list` (the server starts on demand; a resolver child
//! loads the workflows, never the CLI or the server).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::workflow::{accepted, connect};
use crate::printable::printable;
use crate::protocol::{JsonObject, Operation};
use crate::server::ops::workflows::{WORKFLOW_LIST_MAX, WORKFLOW_LIST_OFFSET_MAX};

/// The widest NAME column; longer names are cut (the whole name is in `--json`).
const NAME_COLUMN_CHARS_MAX: usize = 40;
/// Entries discovery reads per workflow directory (`DIRECTORY_ENTRIES_MAX` in `discovery.ts`).
const DIRECTORY_ENTRIES_READ: usize = 1_000;

#[derive(Debug, Args)]
pub struct WorkflowsArgs {
    /// The project whose `.pi/workflows/` is listed (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Skip this many workflows: the `--offset` a previous page named as its next page.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=WORKFLOW_LIST_OFFSET_MAX))]
    pub offset: u64,
    /// Workflows per page (1 to 50).
    #[arg(long, value_name = "N", default_value_t = WORKFLOW_LIST_MAX as u64,
          value_parser = clap::value_parser!(u64).range(1..=WORKFLOW_LIST_MAX as u64))]
    pub limit: u64,
    /// Print the page as one JSON document, with each workflow's path and load error.
    #[arg(long)]
    pub json: bool,
}

pub fn list(state_dir: &std::path::Path, args: WorkflowsArgs) -> anyhow::Result<ExitCode> {
    let project = match args.project {
        Some(dir) => dir,
        None => std::env::current_dir().context("the current directory is not readable")?,
    };
    let project = project.canonicalize().with_context(|| {
        format!(
            "the project directory {} does not exist; name one with --project DIR",
            project.display()
        )
    })?;
    let mut payload = JsonObject::new();
    payload.insert(
        "projectPath".into(),
        Value::String(project.to_string_lossy().into_owned()),
    );
    payload.insert("offset".into(), Value::from(args.offset));
    payload.insert("limit".into(), Value::from(args.limit));
    let mut client = connect(state_dir)?;
    let response = client.request(Operation::WorkflowList, payload)?;
    let page = accepted(&response)?;
    if args.json {
        println!("{}", serde_json::to_string(page)?);
    } else {
        print!("{}", table(page));
    }
    Ok(ExitCode::SUCCESS)
}

/// The human page: NAME / SCOPE / TITLE rows and a footer saying where the next page starts.
fn table(page: &JsonObject) -> String {
    let number = |key: &str| page.get(key).and_then(Value::as_u64);
    let (total, offset) = (number("total").unwrap_or(0), number("offset").unwrap_or(0));
    let workflows: &[Value] = page
        .get("workflows")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let mut out = String::new();
    if workflows.is_empty() {
        if total == 0 {
            let directory = |scope: &str| page["directories"][scope].as_str().unwrap_or("?").to_string();
            out.push_str(&format!(
                "no workflows found in {} or {}; add one as <name>.workflow.ts in either (it default-exports \
                 defineWorkflow(...))\n",
                printable(&directory("project")),
                printable(&directory("global"))
            ));
        } else {
            out.push_str(&format!(
                "no workflows from offset {offset}: there are {total}; start again with --offset 0\n"
            ));
        }
        return out;
    }
    let names: Vec<String> = workflows
        .iter()
        .map(|workflow| {
            cut(
                &printable(workflow["name"].as_str().unwrap_or("?")),
                NAME_COLUMN_CHARS_MAX,
            )
        })
        .collect();
    let width = names.iter().map(|name| name.chars().count()).max().unwrap_or(0).max(4);
    out.push_str(&format!("{:<width$}  {:<7}  TITLE\n", "NAME", "SCOPE"));
    let mut broken = false;
    for (workflow, name) in workflows.iter().zip(&names) {
        let title = match (workflow["loadError"]["code"].as_str(), workflow["title"].as_str()) {
            (Some(code), _) => {
                broken = true;
                format!("(fails to load: {})", printable(code))
            }
            (None, Some(title)) => printable(title).into_owned(),
            (None, None) => "-".to_string(),
        };
        let scope = workflow["scope"].as_str().unwrap_or("?");
        out.push_str(&format!("{name:<width$}  {scope:<7}  {title}\n"));
    }
    let end = offset + workflows.len() as u64;
    let mut footer = match offset + 1 {
        1 => format!("{end} of {total}"),
        first if first == end => format!("{first} of {total}"),
        first => format!("{first}–{end} of {total}"),
    };
    if let Some(next) = number("nextOffset") {
        footer.push_str(&format!("; next page: --offset {next}"));
    }
    out.push_str(&footer);
    out.push('\n');
    if broken {
        out.push_str("why a workflow fails to load: pi-workflows workflows --json (its loadError)\n");
    }
    if page.get("truncated").and_then(Value::as_bool) == Some(true) {
        out.push_str(&format!(
            "a workflow directory holds more than {DIRECTORY_ENTRIES_READ} entries: only {DIRECTORY_ENTRIES_READ} \
             were read, so some workflows may be missing; move other files out of it\n"
        ));
    }
    out
}

/// `text` cut to `chars_max` characters, marked with … when cut.
fn cut(text: &str, chars_max: usize) -> String {
    if text.chars().count() <= chars_max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(chars_max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn page(value: Value) -> JsonObject {
        value.as_object().expect("an object").clone()
    }

    #[test]
    fn the_table_shows_titles_load_errors_and_the_next_page() {
        let text = table(&page(json!({
            "workflows": [
                {"name": "broken", "scope": "project", "path": "/p/broken.workflow.ts",
                 "loadError": {"code": "invalidDefinition", "message": "m"}},
                {"name": "greet", "scope": "project", "path": "/p/greet.workflow.ts", "title": "Say hello"},
                {"name": "evil\u{1b}[31m", "scope": "global", "path": "/g/evil.workflow.js"},
            ],
            "total": 5, "offset": 0, "nextOffset": 3, "truncated": false,
            "directories": {"project": "/p", "global": "/g"},
        })));
        assert!(text.starts_with("NAME"), "{text}");
        assert!(text.contains("(fails to load: invalidDefinition)"), "{text}");
        assert!(text.contains("Say hello"), "{text}");
        assert!(
            text.contains("evil\\u{1b}[31m"),
            "control characters are escaped: {text}"
        );
        assert!(!text.contains("/p/greet"), "no paths in the table: {text}");
        assert!(text.contains("3 of 5; next page: --offset 3"), "{text}");
        assert!(text.contains("--json"), "{text}");
    }

    #[test]
    fn an_empty_list_says_where_to_add_a_workflow() {
        let text = table(&page(json!({
            "workflows": [], "total": 0, "offset": 0, "truncated": false,
            "directories": {"project": "/p/.pi/workflows", "global": "/g/workflows"},
        })));
        assert!(
            text.contains("no workflows found in /p/.pi/workflows or /g/workflows"),
            "{text}"
        );
        let past = table(&page(json!({
            "workflows": [], "total": 2, "offset": 9, "truncated": false,
            "directories": {"project": "/p/.pi/workflows", "global": "/g/workflows"},
        })));
        assert!(past.contains("--offset 0"), "{past}");
    }

    #[test]
    fn long_names_are_cut() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }
}

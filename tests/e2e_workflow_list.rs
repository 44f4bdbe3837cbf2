//! End to end on the real binary with the real Node resolver: `pi-workflows workflows` and
//! `workflow.list`. Project workflows come first, then global ones (`$PI_CODING_AGENT_DIR/
//! workflows`), each by name, and a project file hides a global one of the same name; titles
//! come from loading each workflow in the resolver child; a file that does not load (a syntax
//! error, top-level code that never finishes) is listed with its load error while the others
//! list fine; pages are bounded (limit 1 to 50) and name the next offset; an empty project
//! says where to add a workflow.

mod common;

use std::path::Path;

use common::e2e::*;
use pi_workflows::client::Client;
use pi_workflows::protocol::{JsonObject, Operation, Outcome};
use pi_workflows::server::ownership::ServerPaths;
use serde_json::{Value, json};

fn workflow_source(name: &str, title: Option<&str>) -> String {
    let title = title.map_or(String::new(), |title| format!("title: {title:?}, "));
    format!(
        "import {{ compute, defineWorkflow }} from \"pi-workflows\";\n\
         export default defineWorkflow({{ name: {name:?}, {title}startAt: \"a\", \
         nodes: {{ a: compute({{ run: () => 1 }}) }}, edges: [] }});\n"
    )
}

fn write(dir: &Path, file: &str, source: &str) {
    std::fs::create_dir_all(dir).expect("workflow dir");
    std::fs::write(dir.join(file), source).expect("write workflow");
}

/// A project with four workflows (one broken, one that never finishes loading) and a global
/// directory with a workflow the project hides and one of its own.
fn populate(env: &Env, project: &Path) {
    let local = project.join(".pi/workflows");
    write(
        &local,
        "greet.workflow.ts",
        &workflow_source("greet", Some("Say hello")),
    );
    write(&local, "review.workflow.ts", &workflow_source("review", None));
    write(&local, "broken.workflow.ts", "export default {{{\n");
    write(&local, "hang.workflow.ts", "while (true) {}\nexport default 1;\n");
    let global = env.agent_dir.path().join("workflows");
    write(
        &global,
        "greet.workflow.js",
        &workflow_source("greet", Some("The global greet")),
    );
    write(&global, "solo.workflow.js", &workflow_source("solo", Some("Solo run")));
}

fn list_json(env: &Env, project: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["workflows", "--project", project.to_str().expect("path"), "--json"];
    args.extend_from_slice(extra);
    let out = env.cli(&args);
    env.expect_code(&out, 0, &format!("workflows {extra:?}"));
    json_of(&out)
}

fn names(page: &Value) -> Vec<String> {
    page["workflows"]
        .as_array()
        .expect("workflows")
        .iter()
        .map(|workflow| {
            format!(
                "{}:{}",
                workflow["scope"].as_str().unwrap_or("?"),
                workflow["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

fn entry<'a>(page: &'a Value, name: &str) -> &'a Value {
    page["workflows"]
        .as_array()
        .expect("workflows")
        .iter()
        .find(|workflow| workflow["name"] == name)
        .unwrap_or_else(|| panic!("{name} is listed: {page}"))
}

#[test]
fn workflows_lists_project_then_global_with_titles_and_load_errors() {
    let env = Env::new();
    let project = short_temp_dir("piwp");
    populate(&env, project.path());
    let real = project.path().canonicalize().expect("project");

    let page = list_json(&env, project.path(), &[]);
    assert_eq!(
        names(&page),
        [
            "project:broken",
            "project:greet",
            "project:hang",
            "project:review",
            "global:solo"
        ],
        "{page}"
    );
    assert_eq!(page["total"], 5);
    assert_eq!(page["offset"], 0);
    assert!(page.get("nextOffset").is_none(), "{page}");
    assert_eq!(page["truncated"], false);
    assert_eq!(page["directories"]["project"], json!(real.join(".pi/workflows")));

    // The project's greet hides the global one: its path and its title.
    let greet = entry(&page, "greet");
    assert_eq!(greet["path"], json!(real.join(".pi/workflows/greet.workflow.ts")));
    assert_eq!(greet["title"], "Say hello");
    assert!(greet.get("loadError").is_none(), "{greet}");
    assert_eq!(entry(&page, "solo")["title"], "Solo run");
    // No title declared: none listed.
    assert!(entry(&page, "review").get("title").is_none());

    // A broken file and one whose top-level code never finishes are listed, with why.
    let broken = &entry(&page, "broken")["loadError"];
    assert_eq!(broken["code"], "invalidDefinition", "{broken}");
    assert!(broken["message"].as_str().expect("message").len() <= 300, "{broken}");
    assert_eq!(entry(&page, "hang")["loadError"]["code"], "loadTimeout");

    let out = env.cli(&["workflows", "--project", project.path().to_str().expect("path")]);
    env.expect_code(&out, 0, "workflows (table)");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("SCOPE") && lines[0].contains("TITLE"),
        "{table}"
    );
    assert!(table.contains("Say hello"), "{table}");
    assert!(table.contains("(fails to load: invalidDefinition)"), "{table}");
    assert!(table.contains("(fails to load: loadTimeout)"), "{table}");
    assert!(table.contains("5 of 5"), "{table}");
    assert!(!table.contains(".workflow.ts"), "no paths in the table: {table}");

    // The server log never names a workflow path.
    let log = std::fs::read_to_string(env.dir().join("logs/server.log")).unwrap_or_default();
    assert!(!log.contains(".pi/workflows"), "{log}");
}

#[test]
fn workflows_pages_are_bounded_and_name_the_next_offset() {
    let env = Env::new();
    let project = short_temp_dir("piwp");
    let local = project.path().join(".pi/workflows");
    for name in ["a1", "a2", "a3"] {
        write(
            &local,
            &format!("{name}.workflow.ts"),
            &workflow_source(name, Some(&format!("Title {name}"))),
        );
    }
    write(
        &env.agent_dir.path().join("workflows"),
        "g1.workflow.js",
        &workflow_source("g1", None),
    );

    let first = list_json(&env, project.path(), &["--limit", "2"]);
    assert_eq!(names(&first), ["project:a1", "project:a2"]);
    assert_eq!(
        (first["total"].clone(), first["nextOffset"].clone()),
        (json!(4), json!(2))
    );
    let second = list_json(&env, project.path(), &["--offset", "2", "--limit", "2"]);
    assert_eq!(names(&second), ["project:a3", "global:g1"]);
    assert!(second.get("nextOffset").is_none(), "{second}");
    let past = list_json(&env, project.path(), &["--offset", "9"]);
    assert_eq!(
        (past["workflows"].clone(), past["total"].clone()),
        (json!([]), json!(4))
    );

    let out = env.cli(&[
        "workflows",
        "--project",
        project.path().to_str().expect("path"),
        "--limit",
        "2",
    ]);
    env.expect_code(&out, 0, "workflows --limit 2");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.contains("2 of 4; next page: --offset 2"), "{table}");
    assert!(table.contains("Title a1"), "{table}");

    // Above 50 per page: refused by the CLI before it connects, and by the server.
    let refused = env.cli(&[
        "workflows",
        "--project",
        project.path().to_str().expect("path"),
        "--limit",
        "51",
    ]);
    env.expect_code(&refused, 2, "workflows --limit 51");
    assert!(stderr_of(&refused).contains("1..=50"), "{}", stderr_of(&refused));
    let mut client = Client::connect(&ServerPaths::new(env.dir()).socket).expect("connect");
    let ask = |client: &mut Client, payload: Value| {
        let payload: JsonObject = payload.as_object().expect("object").clone();
        client.request(Operation::WorkflowList, payload).expect("workflow.list")
    };
    let path = project.path().to_str().expect("path");
    let too_many = ask(&mut client, json!({"projectPath": path, "limit": 51}));
    assert_eq!(too_many.outcome, Outcome::Rejected);
    let error = too_many.error.expect("an error");
    assert_eq!(error.code, "invalidRequest");
    assert!(error.message.contains("limit must be 1 to 50"), "{}", error.message);
    let relative = ask(&mut client, json!({"projectPath": "relative/dir"}));
    assert_eq!(relative.error.expect("an error").code, "invalidRequest");
    let missing = ask(&mut client, json!({"projectPath": "/nonexistent/piw-project"}));
    assert_eq!(missing.error.expect("an error").code, "projectNotFound");
    // A read: answered without an idempotency key or a receipt.
    let page = ask(&mut client, json!({"projectPath": path, "offset": 1, "limit": 1}));
    assert_eq!(page.outcome, Outcome::Accepted);
    let receipt = page.receipt.expect("a page");
    assert_eq!(receipt["workflows"][0]["name"], "a2");
    assert_eq!(receipt["nextOffset"], 2);
    assert_eq!(env.count("SELECT count(*) FROM host_commands"), 0);
}

#[test]
fn workflows_of_an_empty_project_say_where_to_add_one() {
    let env = Env::new();
    let project = short_temp_dir("piwp");
    let out = env.cli(&["workflows", "--project", project.path().to_str().expect("path")]);
    env.expect_code(&out, 0, "workflows (empty)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("no workflows found in"), "{text}");
    assert!(text.contains(".pi/workflows"), "{text}");
    assert!(text.contains("<name>.workflow.ts"), "{text}");
    let page = list_json(&env, project.path(), &[]);
    assert_eq!(
        (page["total"].clone(), page["workflows"].clone()),
        (json!(0), json!([]))
    );
}

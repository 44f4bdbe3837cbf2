//! Resolver isolation on the real server and the Node resolver: a workflow that never
//! finishes loading costs one resolver for at most the resolve timeout, is reported as such
//! (naming the workflow), and never stalls an unrelated `run start`. And the reuse of a
//! resolution: only while its workflow is unchanged on disk and no input normalizer ran.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::e2e::{Env, example, fixture, run_id_of, short_temp_dir, stderr_of};
use serde_json::json;

/// Short, so the test does not wait a minute; the default is 60 s.
const RESOLVE_TIMEOUT_MS: &str = "4000";

#[test]
fn a_workflow_that_hangs_while_loading_does_not_stall_other_starts() {
    let env = Env::with_vars(vec![(
        "PI_WORKFLOWS_RESOLVE_TIMEOUT_MS".to_string(),
        RESOLVE_TIMEOUT_MS.to_string(),
    )]);
    env.cli(&["server", "start"]);
    let hanging_path = fixture("hang-at-load");
    let hanging = env
        .command_in(
            &common::e2e::repo_root(),
            &["run", "start", hanging_path.to_str().expect("path")],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the hanging workflow");
    // Give the hanging start time to occupy the warm resolver.
    std::thread::sleep(Duration::from_millis(500));
    let quick = env.cli(&["run", "start", &example("repo-facts"), "--follow"]);
    env.expect_code(&quick, 0, "an unrelated run start while another workflow hangs");
    let mut hanging = hanging;
    assert!(
        hanging.try_wait().expect("poll").is_none(),
        "the quick run completed only after the hanging start had ended"
    );
    let hanging = hanging.wait_with_output().expect("the hanging start ends");
    assert!(!hanging.status.success(), "a workflow that never loads was started");
    let stderr = stderr_of(&hanging);
    assert!(
        stderr.contains("did not finish loading within 4 s") && stderr.contains("hang-at-load"),
        "{stderr}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM runs WHERE workflow_name = 'hang-at-load'"),
        0
    );
    // The warm resolver is back (a new process), and the next start works.
    let again = env.cli(&["run", "start", &example("repo-facts"), "--follow"]);
    env.expect_code(&again, 0, "a run start after the timeout");
}

/// The server's debug line for a `run.start` answered from a kept resolution.
const REUSED_LOG: &str = "reused the resolution of an unchanged workflow";

fn reuses(env: &Env) -> usize {
    let log = std::fs::read_to_string(env.dir().join("logs/server.log")).unwrap_or_default();
    log.matches(REUSED_LOG).count()
}

/// A one-step workflow named `same` whose step returns `mark`; `normalizer` adds an input
/// normalizer (workflow code that runs at every start).
fn marked_workflow(mark: &str, normalizer: bool) -> String {
    let input = if normalizer {
        "input: (raw) => ({ ...raw, at: Date.now() }),\n  "
    } else {
        ""
    };
    format!(
        "import {{ compute, defineWorkflow }} from \"pi-workflows\";\nexport default defineWorkflow({{\n  name: \"same\",\n  \
         {input}startAt: \"mark\",\n  nodes: {{ mark: compute({{ run: () => ({{ from: {mark:?} }}) }}) }},\n  edges: [],\n}});\n"
    )
}

#[test]
fn an_unchanged_workflow_reuses_its_resolution_and_a_changed_or_shadowed_one_never_does() {
    let env = Env::with_vars(vec![(
        "PI_WORKFLOWS_LOG".to_string(),
        "info,ractor=warn,pi_workflows::server::resolvers=debug".to_string(),
    )]);
    env.cli(&["server", "start"]);
    let project = short_temp_dir("piwr");
    let project_dir = project.path().join(".pi/workflows");
    let global_dir = env.agent_dir.path().join("workflows");
    std::fs::create_dir_all(&project_dir).expect("project workflows");
    std::fs::create_dir_all(&global_dir).expect("global workflows");
    // Started by name from the project: the mark its run's step returned.
    let start = || {
        let out = env.cli_in(project.path(), &["run", "start", "same", "--json"]);
        env.expect_code(&out, 0, "run start same");
        let run_id = run_id_of(&out);
        env.wait_for_count(
            "the run completed",
            &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND status = 'completed'"),
        );
        env.node_output(&run_id, "mark")["from"].clone()
    };

    std::fs::write(global_dir.join("same.workflow.ts"), marked_workflow("global", false)).expect("write");
    assert_eq!(
        (start(), reuses(&env)),
        (json!("global"), 0),
        "the first start is resolved"
    );
    assert_eq!((start(), reuses(&env)), (json!("global"), 1), "an unchanged workflow");

    // A project workflow of the same name is found first now: the global file is unchanged,
    // but a candidate before it became a file.
    let project_file = project_dir.join("same.workflow.ts");
    std::fs::write(&project_file, marked_workflow("project", false)).expect("write");
    assert_eq!(
        (start(), reuses(&env)),
        (json!("project"), 1),
        "a shadowing file appeared"
    );
    assert_eq!((start(), reuses(&env)), (json!("project"), 2));

    // One changed byte.
    std::fs::write(&project_file, marked_workflow("projecT", false)).expect("rewrite");
    assert_eq!((start(), reuses(&env)), (json!("projecT"), 2), "a changed byte");

    // Its input normalizer is workflow code that may read the clock: every start runs it.
    std::fs::write(&project_file, marked_workflow("normalized", true)).expect("rewrite");
    for _ in 0..3 {
        assert_eq!((start(), reuses(&env)), (json!("normalized"), 2), "a normalizer ran");
    }
    let inputs = env.texts("SELECT input_hash FROM runs WHERE workflow_name = 'same' ORDER BY rowid DESC LIMIT 3");
    let distinct: std::collections::BTreeSet<_> = inputs.iter().collect();
    assert_eq!(distinct.len(), 3, "each start normalized its own input: {inputs:?}");
}

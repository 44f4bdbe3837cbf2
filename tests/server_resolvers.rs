//! Resolver isolation on the real server and the Node resolver: a workflow that never
//! finishes loading costs one resolver for at most the resolve timeout, is reported as such
//! (naming the workflow), and never stalls an unrelated `run start`.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::e2e::{Env, example, fixture, stderr_of};

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

//! The runners' V8 startup snapshot on the real binary and the built package: the pool builds
//! and checks it in the background, starts warm runners from it once it passed, keeps it for
//! the next server, falls back to plain starts when the build fails or the Node refuses the
//! stored snapshot (and removes it), and builds none with `PI_WORKFLOWS_RUNNER_SNAPSHOT=off`.
//! The tree shows the pool's mode (`plain`, `building snapshot`, `snapshot`).

mod common;

use common::e2e::{Env, run_id_of, short_temp_dir};
use common::tree::*;
use serde_json::Value;

/// The pool's way of starting runners (`mode` in its details).
fn pool_mode(tree: &Value) -> Option<String> {
    Some(at(tree, &["runners", "pool"])?["details"]["mode"].as_str()?.to_string())
}

/// Wait until the pool's mode is `mode` (`what` says what that means).
fn wait_for_pool_mode(env: &Env, mode: &str, what: &str) {
    wait_for(env, what, || (pool_mode(&poll_tree(env)?)? == mode).then_some(()));
}

/// The files in the state's snapshot directory (finished or not).
fn snapshot_files(env: &Env) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(env.dir().join("cache/runner-snapshots")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("runner-snapshot-"))
        })
        .collect()
}

/// Start echo-task with `task` and wait for it to complete: the pid of the runner that ran it.
fn echo_run(env: &Env, task: &str) -> i32 {
    let out = env.cli(&[
        "run",
        "start",
        fixture_path("echo-task").as_str(),
        task,
        "--follow",
        "--json",
    ]);
    env.expect_code(&out, 0, "run start echo-task --follow");
    let run_id = run_id_of(&out);
    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
        "completed"
    );
    assert_eq!(env.node_output(&run_id, "echo"), serde_json::json!({ "task": task }));
    env.count(&format!("SELECT pid FROM run_workers WHERE run_id = '{run_id}'")) as i32
}

/// A state directory whose server's `PI_WORKFLOWS_NODE` is a shell wrapper in `scratch`: it
/// runs `prelude`, then the `node` on `PATH` with its arguments.
fn with_node_wrapper(scratch: &tempfile::TempDir, prelude: &str) -> Env {
    let node = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|dir| dir.join("node"))
        .find(|path| path.is_file())
        .expect("node on PATH");
    let wrapper = scratch.path().join("node");
    let script = format!("#!/bin/sh\n{prelude}\nexec '{}' \"$@\"\n", node.display());
    std::fs::write(&wrapper, script).expect("write the node wrapper");
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    Env::with_vars(vec![("PI_WORKFLOWS_NODE".to_string(), wrapper.display().to_string())])
}

/// The hash seed a snapshot's file name carries (`runner-snapshot-<key>-<seed hex>.blob`).
fn seed_of(blob: &std::path::Path) -> u64 {
    let name = blob.file_name().expect("a file name").to_string_lossy().into_owned();
    let hex = name
        .strip_suffix(".blob")
        .and_then(|stem| stem.rsplit_once('-'))
        .map(|(_, hex)| hex.to_string())
        .unwrap_or_else(|| panic!("no seed in {name}"));
    let seed = u64::from_str_radix(&hex, 16).unwrap_or_else(|err| panic!("{name}: {err}"));
    assert!(seed > 0 && seed <= i64::MAX as u64, "{name}");
    seed
}

fn fixture_path(name: &str) -> String {
    common::e2e::fixture(name).display().to_string()
}

#[test]
fn warm_runners_start_from_the_startup_snapshot_once_it_is_built_and_checked() {
    require_package();
    let env = Env::new();
    start_server(&env);
    wait_for_pool_mode(&env, "snapshot", "the pool has built and checked its snapshot");
    let files = snapshot_files(&env);
    assert_eq!(files.len(), 1, "one snapshot, no half-built file: {files:?}");
    let meta = std::fs::metadata(&files[0]).expect("snapshot file");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    // Stored without Node's code cache (what a runner never compiles from).
    let blob = std::fs::read(&files[0]).expect("read the snapshot");
    assert!(
        pi_workflows::server::runners::code_cache::is_stripped(&blob),
        "the stored snapshot ends with an empty code cache"
    );

    // The warm runner started before the build ended is plain; the pool replaces it from the
    // snapshot after it is taken.
    echo_run(&env, "first");
    let warm = wait_for(&env, "a warm runner started from the snapshot", || {
        let pool = processes(at(&poll_tree(&env)?, &["runners", "pool"])?);
        let (pid, _) = *pool.first()?;
        cmdline(pid).contains("--snapshot-blob").then_some(pid)
    });
    // It starts with the seed the snapshot was built with (the one its name carries).
    let seed = seed_of(&files[0]);
    assert!(
        cmdline(warm).contains(&format!("--hash-seed={seed} --no-rehash-snapshot --snapshot-blob")),
        "{}",
        cmdline(warm)
    );
    assert_eq!(
        echo_run(&env, "from the snapshot"),
        warm,
        "the snapshot runner ran the run"
    );

    // A new server for the same Node and package starts from the stored snapshot at once.
    env.expect_code(&env.cli(&["server", "stop"]), 0, "server stop");
    start_server(&env);
    assert_eq!(pool_mode(&tree(&env)).as_deref(), Some("snapshot"), "no second build");
    assert_eq!(snapshot_files(&env), files);
}

#[test]
fn a_snapshot_that_does_not_build_leaves_runners_starting_the_plain_way() {
    require_package();
    // A Node that refuses to build snapshots (like one older than 20.16) and runs anything else.
    let scratch = short_temp_dir("piwn");
    let env = with_node_wrapper(
        &scratch,
        "for arg in \"$@\"; do [ \"$arg\" = --build-snapshot ] && exit 3; done",
    );
    start_server(&env);
    wait_for_pool_mode(&env, "plain", "the pool gave up the snapshot");
    assert!(snapshot_files(&env).is_empty(), "a failed build leaves no file");
    let log = std::fs::read_to_string(env.dir().join("logs/server.log")).unwrap_or_default();
    assert!(
        log.contains("snapshot build failed (exit code 3)"),
        "the reason is logged:\n{log}"
    );
    for task in ["one", "two"] {
        let pid = echo_run(&env, task);
        assert!(pid > 0);
    }
    let pool = processes(at(&tree(&env), &["runners", "pool"]).expect("pool"));
    assert!(
        pool.iter().all(|(pid, _)| !cmdline(*pid).contains("--snapshot-blob")),
        "{pool:?}"
    );
}

#[test]
fn a_stored_snapshot_this_node_refuses_is_given_up_and_removed_and_runs_still_complete() {
    require_package();
    let scratch = short_temp_dir("piwn");
    // Once `refuse` exists, the wrapper (the same file, so the same snapshot name) runs a Node
    // that refuses the stored snapshot, the way a Node of another version does (exit 14).
    let refuse = scratch.path().join("refuse");
    let env = with_node_wrapper(
        &scratch,
        &format!(
            "if [ -e '{}' ]; then case \"$*\" in *pi-workflows-runner*) exit 14;; esac; fi",
            refuse.display()
        ),
    );
    start_server(&env);
    wait_for_pool_mode(&env, "snapshot", "the pool has built and checked its snapshot");
    assert_eq!(snapshot_files(&env).len(), 1);
    env.expect_code(&env.cli(&["server", "stop"]), 0, "server stop");

    std::fs::write(&refuse, b"").expect("refuse from now on");
    start_server(&env);
    for task in ["one", "two"] {
        echo_run(&env, task);
    }
    wait_for_pool_mode(&env, "plain", "the pool gave up the snapshot");
    assert!(snapshot_files(&env).is_empty(), "the refused snapshot is removed");
}

#[test]
fn runner_snapshot_off_never_builds_one() {
    require_package();
    let env = Env::with_vars(vec![("PI_WORKFLOWS_RUNNER_SNAPSHOT".to_string(), "off".to_string())]);
    start_server(&env);
    echo_run(&env, "plain");
    assert_eq!(pool_mode(&tree(&env)).as_deref(), Some("plain"));
    assert!(snapshot_files(&env).is_empty());
}

/// Runners skip the rehash only because Node refuses a snapshot started with other V8 flags
/// than it was built with: a runner on another hash seed would look its strings up under the
/// wrong hashes. This pins that refusal on the Node the tests run.
#[test]
fn node_refuses_the_snapshot_with_another_hash_seed_or_with_the_rehash() {
    require_package();
    let env = Env::new();
    start_server(&env);
    wait_for_pool_mode(&env, "snapshot", "the pool has built and checked its snapshot");
    let files = snapshot_files(&env);
    assert_eq!(files.len(), 1, "{files:?}");
    let seed = seed_of(&files[0]);
    let other = if seed == 1 { 2 } else { seed - 1 };
    // The Node the server builds with: `PI_WORKFLOWS_NODE`, else the first on `PATH`.
    let node = std::env::var_os("PI_WORKFLOWS_NODE").unwrap_or_else(|| "node".into());
    let check = |flags: &[String]| {
        let out = std::process::Command::new(&node)
            .args(flags)
            .arg("--snapshot-blob")
            .arg(&files[0])
            .args(["pi-workflows-runner", "--check"])
            .env_remove("NODE_EXTRA_CA_CERTS")
            .output()
            .expect("run node");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = check(&[format!("--hash-seed={seed}"), "--no-rehash-snapshot".to_string()]);
    assert_eq!(code, Some(0), "the snapshot's own flags pass its check: {stderr}");
    for flags in [
        vec![format!("--hash-seed={other}"), "--no-rehash-snapshot".to_string()],
        vec![format!("--hash-seed={seed}")],
        vec![],
    ] {
        let (code, stderr) = check(&flags);
        assert_eq!(code, Some(14), "{flags:?} must be refused: {stderr}");
        assert!(stderr.contains("different V8 configurations"), "{flags:?}: {stderr}");
    }
}

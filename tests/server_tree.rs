//! The server's live supervision tree (`server status --tree [--json]`) on the real binary:
//! its documented layout and node shape, the processes it lists (a runner with its claim
//! generation, the warm resolver and warm runners), the documented outcome of a SIGKILL of
//! the resolver (restarted, a new pid, the next run works) and of a runner (its temporary
//! child leaves the tree, the run parks for review), no listed process outliving
//! `server stop`, and no path, run ID or token in the output. The pool's startup snapshot
//! has its own file, tests/runner_snapshot.rs.
//!
//! Each test has its own state directory (and so its own server) under /tmp, stopped by the
//! `common::e2e::Env` drop guard. Every wait is bounded and prints the tree and the logs on
//! failure.

mod common;

use common::e2e::{Env, example, json_of, run_id_of, short_temp_dir};
use common::tree::*;
use serde_json::Value;

// Tests ----------------------------------------------------------------------------------------

#[test]
fn the_tree_has_the_documented_layout() {
    let env = scripted(LONG_SCRIPT, &[]);
    start_server(&env);
    let status = status(&env);
    let tree = &status["tree"];
    assert_eq!(tree["id"], "server");
    assert_eq!(tree["kind"], "supervisor");
    assert_eq!(tree["restart"], Value::Null);
    assert_eq!(tree["state"], "running");
    assert!(status["epoch"].as_u64().is_some_and(|epoch| epoch >= 1), "{status}");
    assert_eq!(
        tree["details"]["epoch"],
        status["epoch"],
        "the root carries the server epoch:\n{}",
        pretty(tree)
    );
    let mut top: Vec<&str> = children(tree).iter().map(id).collect();
    top.sort_unstable();
    assert_eq!(
        top,
        [
            "channels",
            "clients",
            "deadlines",
            "reclaimer",
            "reconciles",
            "resolvers",
            "retention",
            "runners",
            "scheduler",
            "store"
        ],
        "{}",
        pretty(tree)
    );
    for worker in ["store", "scheduler"] {
        assert_node(tree, &[worker], "worker", None, "permanent");
    }
    for supervisor in ["resolvers", "runners", "clients"] {
        assert_node(tree, &[supervisor], "supervisor", Some("one_for_one"), "permanent");
    }
    let reconciles = at(tree, &["reconciles"]).expect("reconciles");
    assert_eq!(reconciles["kind"], "supervisor", "{}", pretty(reconciles));
    assert!(
        children(reconciles).is_empty(),
        "reconciles has no children yet:\n{}",
        pretty(reconciles)
    );
    // With no channels.json there is no adapter: only the loader that looked for one.
    assert_node(tree, &["channels"], "supervisor", Some("one_for_one"), "permanent");
    let channels = at(tree, &["channels"]).expect("channels");
    let ids: Vec<&str> = children(channels)
        .iter()
        .filter_map(|child| child["id"].as_str())
        .collect();
    assert_eq!(ids, ["loader"], "{}", pretty(channels));
    assert_node(tree, &["runners", "pool"], "worker", None, "permanent");
    assert_node(tree, &["clients", "listener"], "worker", None, "permanent");
    assert_node(
        tree,
        &["clients", "feeds"],
        "supervisor",
        Some("one_for_one"),
        "permanent",
    );
    // The status request itself is a connection.
    let connections: Vec<&Value> = children(at(tree, &["clients"]).expect("clients"))
        .iter()
        .filter(|child| id(child).starts_with("connection-"))
        .collect();
    assert!(
        !connections.is_empty(),
        "the asking connection is a child of clients:\n{}",
        pretty(tree)
    );
    for connection in connections {
        assert_eq!(connection["kind"], "worker", "{}", pretty(connection));
        assert_eq!(connection["restart"], "temporary", "{}", pretty(connection));
    }
    // No run, no runner child.
    assert!(runner_children(tree).is_empty(), "{}", pretty(tree));
    if package_built() {
        let resolver = wait_for(&env, "the warm resolver is in the tree", || {
            poll_tree(&env).and_then(|tree| at(&tree, &["resolvers", "resolver"]).cloned())
        });
        assert_eq!(resolver["kind"], "worker", "{}", pretty(&resolver));
        assert_eq!(resolver["restart"], "permanent", "{}", pretty(&resolver));
    }
    // The human form draws the same nodes.
    let human = human_tree(&env);
    let epoch = status["epoch"].as_u64().expect("epoch");
    let root = human_line(&human, "server").unwrap_or_else(|| panic!("no root line:\n{human}"));
    assert!(
        root.contains("running") && root.contains(&format!("epoch {epoch}")),
        "{human}"
    );
    for name in [
        "store",
        "scheduler",
        "reclaimer",
        "deadlines",
        "retention",
        "resolvers",
        "runners",
        "pool",
        "clients",
        "listener",
        "feeds",
    ] {
        assert!(human_line(&human, name).is_some(), "no line for {name}:\n{human}");
    }

    // With retention off, there is no retention child.
    let off = scripted(LONG_SCRIPT, &[("PI_WORKFLOWS_RETENTION_DAYS", "off")]);
    start_server(&off);
    let without = self::tree(&off);
    assert!(child(&without, "retention").is_none(), "{}", pretty(&without));
    assert!(child(&without, "scheduler").is_some(), "{}", pretty(&without));

    // Retention, the reclaimer and the deadline task are transient tasks: a panic restarts
    // them, the server's stop ends them for good.
    for task in ["retention", "reclaimer", "deadlines"] {
        assert_node(tree, &[task], "worker", None, "transient");
    }
}

/// Queue `run_id`, start the server, and wait for its `runner-N` child to list one live
/// process and a generation.
fn start_with_live_runner(env: &Env, run_id: &str) -> Value {
    common::queue_runs_in(env.dir(), [run_id.to_string()]);
    start_server(env);
    wait_for(env, "a live runner-N child lists its process", || {
        let tree = poll_tree(env)?;
        let runner = runner_children(&tree).into_iter().next()?.clone();
        single_live_process(&runner)?;
        runner["details"]["generation"].as_u64()?;
        Some(runner)
    })
}

#[test]
fn a_live_runner_is_a_temporary_child_of_runners_with_its_generation_and_process() {
    let env = scripted(LONG_SCRIPT, &[]);
    let run_id = "run-tree-live-a1";
    let runner = start_with_live_runner(&env, run_id);
    let name = id(&runner).to_string();
    let generation = runner["details"]["generation"].as_u64().expect("generation");
    let (pid, pgid) = processes(&runner)[0];
    assert!(generation >= 1, "{}", pretty(&runner));
    assert_eq!(runner["kind"], "worker", "{}", pretty(&runner));
    assert_eq!(runner["restart"], "temporary", "{}", pretty(&runner));
    assert_eq!(runner["state"], "running", "{}", pretty(&runner));
    assert!(alive(pid), "{}", describe(pid));
    assert_eq!(group_of(pid), Some(pgid), "{}", describe(pid));
    assert_eq!(pgid, pid, "a runner leads its own process group: {}", describe(pid));
    assert!(
        cmdline(pid).contains("pi-workflows-test-runner"),
        "the listed pid is the runner: {}",
        describe(pid)
    );
    // The tree agrees with the runner's durable record.
    let recorded = format!(
        "SELECT count(*) FROM run_workers WHERE run_id = '{run_id}' AND status IN ('starting', 'ready') \
         AND pid = {pid} AND generation = {generation}"
    );
    assert_eq!(
        env.count(&recorded),
        1,
        "run_workers disagrees with the tree{}",
        report(&env)
    );
    let tree = tree(&env);
    assert_eq!(
        runner_children(&tree).len(),
        1,
        "one run, one runner child:\n{}",
        pretty(&tree)
    );

    let human = human_tree(&env);
    let line = human_line(&human, &name).unwrap_or_else(|| panic!("no line for {name}:\n{human}"));
    for part in [
        "running".to_string(),
        "temporary".to_string(),
        format!("generation {generation}"),
        format!("pid {pid} pgid {pgid}"),
    ] {
        assert!(line.contains(&part), "{name}'s line lacks {part:?}: {line}\n{human}");
    }
}

#[test]
fn the_resolver_is_a_permanent_child_of_resolvers_with_its_node_process() {
    require_package();
    let env = Env::new();
    start_server(&env);
    let server = env.server_pid();
    let resolver = wait_for(&env, "the resolver lists its live Node process", || {
        let tree = poll_tree(&env)?;
        let resolver = at(&tree, &["resolvers", "resolver"])?.clone();
        single_live_process(&resolver)?;
        Some(resolver)
    });
    let (pid, pgid) = processes(&resolver)[0];
    assert_eq!(resolver["kind"], "worker", "{}", pretty(&resolver));
    assert_eq!(resolver["restart"], "permanent", "{}", pretty(&resolver));
    assert_eq!(resolver["state"], "running", "{}", pretty(&resolver));
    assert!(
        cmdline(pid).contains("resolver-main.js"),
        "the listed pid is the resolver: {}",
        describe(pid)
    );
    assert_eq!(parent_of(pid), Some(server), "a child of the server: {}", describe(pid));
    assert_eq!(group_of(pid), Some(pgid), "{}", describe(pid));
    assert_eq!(pgid, pid, "the resolver leads its own process group: {}", describe(pid));

    // The Node runner's default pool: one warm runner, listed by `pool`.
    let warm = wait_for(&env, "the pool lists its warm runner", || {
        let tree = poll_tree(&env)?;
        let pool = at(&tree, &["runners", "pool"])?;
        single_live_process(pool)
    });
    assert!(
        ["runner-main.js", "pi-workflows-runner"]
            .iter()
            .any(|entry| cmdline(warm.0).contains(entry)),
        "the pool lists a runner (plain or from the snapshot): {}",
        describe(warm.0)
    );
    assert_eq!(parent_of(warm.0), Some(server), "{}", describe(warm.0));
    let human = human_tree(&env);
    let line = human_line(&human, "resolver").unwrap_or_else(|| panic!("no resolver line:\n{human}"));
    assert!(line.contains(&format!("pid {pid} pgid {pgid}")), "{line}\n{human}");
}

#[test]
fn a_killed_resolver_is_restarted_and_the_next_run_start_works() {
    require_package();
    let env = Env::new();
    start_server(&env);
    let before = wait_for(&env, "the resolver lists its live Node process", || {
        let tree = poll_tree(&env)?;
        let resolver = at(&tree, &["resolvers", "resolver"])?.clone();
        single_live_process(&resolver)?;
        Some(resolver)
    });
    let (old_pid, _) = processes(&before)[0];
    let old_start = start_time(old_pid).expect("start time");
    let old_restarts = restarts(&before);

    kill9(old_pid);
    let after = wait_for(&env, "the resolver is restarted with a new live process", || {
        let tree = poll_tree(&env)?;
        let resolver = at(&tree, &["resolvers", "resolver"])?.clone();
        let (pid, _) = single_live_process(&resolver)?;
        (resolver["state"] == "running" && restarts(&resolver) > old_restarts && pid != old_pid).then_some(resolver)
    });
    assert_eq!(
        restarts(&after),
        old_restarts + 1,
        "one kill, one restart:\n{}",
        pretty(&after)
    );
    let (new_pid, _) = processes(&after)[0];
    assert!(cmdline(new_pid).contains("resolver-main.js"), "{}", describe(new_pid));
    wait_for(&env, "the killed resolver is reaped", || {
        (!still_exists(old_pid, old_start)).then_some(())
    });

    let out = env.cli(&["run", "start", &example("repo-facts"), "--follow", "--json"]);
    env.expect_code(&out, 0, "run start repo-facts --follow after the resolver was killed");
    let run_id = run_id_of(&out);
    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
        "completed"
    );
    let tree = tree(&env);
    let resolver = at(&tree, &["resolvers", "resolver"]).expect("resolver");
    assert_eq!(resolver["state"], "running", "{}", pretty(&tree));
}

/// Fresh imports a served resolver makes before it retires (`SERVED_IMPORTS_MAX` in
/// resolver-main.ts).
const RESOLVER_IMPORTS_MAX: usize = 64;

/// A workflow that loads and rejects every input, so a `run start` of it exercises only the
/// resolver: `stamp` makes each version's bytes (and so its import) new.
fn input_rejecting_workflow(stamp: usize) -> String {
    format!(
        "import {{ compute, defineWorkflow }} from \"pi-workflows\";\n\
         export default defineWorkflow({{ name: \"quota\", title: \"version {stamp}\", startAt: \"a\",\n\
         input: () => {{ throw new Error(\"no input accepted\"); }},\n\
         nodes: {{ a: compute({{ run: () => 1 }}) }}, edges: [] }});\n"
    )
}

fn start_rejected(env: &Env, project: &std::path::Path, file: &str) {
    let out = env.cli_in(project, &["run", "start", file]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("rejected its input"),
        "a start the workflow's input check refuses: {stderr}"
    );
}

#[test]
fn the_warm_resolver_keeps_its_process_for_unchanged_workflows_and_retires_after_its_import_quota() {
    require_package();
    let env = Env::new();
    start_server(&env);
    let live_resolver = || {
        let tree = poll_tree(&env)?;
        let resolver = at(&tree, &["resolvers", "resolver"])?.clone();
        let (pid, _) = single_live_process(&resolver)?;
        (resolver["state"] == "running").then_some((resolver, pid))
    };
    let (before, first_pid) = wait_for(&env, "the resolver lists its live Node process", live_resolver);
    let restarts_before = restarts(&before);
    let project = short_temp_dir("piwq");
    let file = project.path().join("quota.workflow.ts");
    let file_arg = file.to_str().expect("path");

    // One import, then only reuses of the loaded module: the process stays.
    std::fs::write(&file, input_rejecting_workflow(0)).expect("write the workflow");
    for _ in 0..RESOLVER_IMPORTS_MAX + 6 {
        start_rejected(&env, project.path(), file_arg);
    }
    let (kept, pid) = wait_for(&env, "the resolver after its reuses", live_resolver);
    assert_eq!(
        pid,
        first_pid,
        "reusing an unchanged workflow replaced the resolver:\n{}",
        pretty(&kept)
    );

    // Each new version is an import: at the quota the process retires, and its end is no
    // failure (the tree counts no restart).
    for stamp in 1..RESOLVER_IMPORTS_MAX {
        std::fs::write(&file, input_rejecting_workflow(stamp)).expect("rewrite the workflow");
        start_rejected(&env, project.path(), file_arg);
    }
    let (after, new_pid) = wait_for(&env, "a new resolver process after the quota", || {
        live_resolver().filter(|(_, pid)| *pid != first_pid)
    });
    assert_eq!(
        restarts(&after),
        restarts_before,
        "a retiring resolver counted as a crash:\n{}",
        pretty(&after)
    );
    assert!(cmdline(new_pid).contains("resolver-main.js"), "{}", describe(new_pid));
    let out = env.cli(&["run", "start", &example("repo-facts"), "--follow"]);
    env.expect_code(&out, 0, "run start after the resolver retired");
}

#[test]
fn a_killed_runner_leaves_the_tree_and_its_run_is_parked() {
    let env = scripted(LONG_SCRIPT, &[]);
    let run_id = "run-tree-kill-d4";
    let runner = start_with_live_runner(&env, run_id);
    // Its node is running (the revision advanced after ready), so the crash parks it as
    // `workerCrashed`.
    wait_for_sql(
        &env,
        "the runner's attempt is running",
        &format!("SELECT count(*) FROM node_attempts WHERE run_id = '{run_id}' AND status = 'running'"),
    );
    let name = id(&runner).to_string();
    let (pid, _) = processes(&runner)[0];
    let start = start_time(pid).expect("start time");

    kill9(pid);
    wait_for(&env, "the killed runner's child leaves the tree", || {
        let tree = poll_tree(&env)?;
        let runners = at(&tree, &["runners"])?;
        let listed = nodes(runners)
            .iter()
            .any(|node| id(node) == name || processes(node).iter().any(|(listed, _)| *listed == pid));
        (!listed).then_some(())
    });
    wait_for_sql(
        &env,
        "the run is parked",
        &format!("SELECT count(*) FROM run_queue WHERE run_id = '{run_id}' AND status = 'parked'"),
    );
    assert_eq!(
        env.text(&format!("SELECT status_detail FROM runs WHERE run_id = '{run_id}'")),
        "workerCrashed",
        "{}",
        report(&env)
    );
    assert_eq!(
        env.text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'")),
        "running",
        "a runner crash is not a run failure"
    );
    assert_eq!(
        env.text(&format!(
            "SELECT status FROM run_workers WHERE run_id = '{run_id}' AND pid = {pid}"
        )),
        "crashed"
    );
    wait_for(&env, "the killed runner is reaped", || {
        (!still_exists(pid, start)).then_some(())
    });
    // A temporary child is never restarted, and a crashed run waits for a resume.
    let tree = tree(&env);
    assert!(
        runner_children(&tree).is_empty(),
        "no runner child after the crash:\n{}",
        pretty(&tree)
    );
    assert_eq!(env.count("SELECT count(*) FROM run_workers"), 1, "not relaunched");
}

/// The pool's live warm runners, as the tree lists them.
fn live_pool(env: &Env) -> Option<Vec<i32>> {
    let tree = poll_tree(env)?;
    let pool = processes(at(&tree, &["runners", "pool"])?);
    Some(pool.into_iter().map(|(pid, _)| pid).filter(|pid| alive(*pid)).collect())
}

/// The pid of the runner that ran `run_id` (its one epoch).
fn runner_of(env: &Env, run_id: &str) -> i32 {
    env.count(&format!("SELECT pid FROM run_workers WHERE run_id = '{run_id}'")) as i32
}

fn run_to_end(env: &Env) -> String {
    let run_id = env.start_fixture("echo-task", None);
    env.wait_for_count(
        "the run completes",
        &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}' AND finished_at IS NOT NULL"),
    );
    run_id
}

/// A run takes the newest warm runner that has settled (on a VM, memory a process has not
/// touched for seconds comes back slowly), not the oldest: the runner started after the first
/// run serves the second, and the one that was already waiting keeps waiting.
#[test]
fn a_run_takes_the_newest_settled_warm_runner() {
    require_package();
    // Two warm runners whatever the demand, and no shrink during the test.
    let env = Env::with_vars(vec![
        ("PI_WORKFLOWS_WARM_RUNNERS".to_string(), "2".to_string()),
        ("PI_WORKFLOWS_MAX_WORKERS".to_string(), "2".to_string()),
        ("PI_WORKFLOWS_WARM_DEMAND_MS".to_string(), "600000".to_string()),
    ]);
    start_server(&env);
    let before = wait_for(&env, "the pool lists two warm runners", || {
        live_pool(&env).filter(|pool| pool.len() == 2)
    });
    let first = run_to_end(&env);
    let first_runner = runner_of(&env, &first);
    assert!(
        before.contains(&first_runner),
        "the first run took a warm runner: {first_runner} not in {before:?}"
    );
    let waiting = *before
        .iter()
        .find(|pid| **pid != first_runner)
        .expect("the other warm runner");
    let (newer, pool) = wait_for(&env, "the pool starts a runner after the first run", || {
        let pool = live_pool(&env).filter(|pool| pool.len() == 2)?;
        let newer = *pool.iter().find(|pid| !before.contains(pid))?;
        Some((newer, pool))
    });
    assert!(
        pool.contains(&waiting),
        "the waiting runner is still in the pool: {pool:?}"
    );
    // Settled: older than the pool's WARM_SETTLED_MS (250 ms), with a margin.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let second = run_to_end(&env);
    let second_runner = runner_of(&env, &second);
    assert_eq!(
        second_runner,
        newer,
        "the second run takes the runner started after the first ({newer}), not the one waiting since the \
         start ({waiting}){}",
        env.diagnostics()
    );
    let pool = live_pool(&env).expect("the tree");
    assert!(pool.contains(&waiting), "the oldest keeps waiting: {pool:?}");
}

#[test]
fn after_server_stop_no_process_the_tree_listed_survives() {
    require_package();
    // Two warm runners: one is taken by the run, the other stays in the pool.
    let env = Env::with_vars(vec![("PI_WORKFLOWS_WARM_RUNNERS".to_string(), "2".to_string())]);
    start_server(&env);
    wait_for(&env, "the pool lists two warm runners", || {
        live_pool(&env).filter(|pool| pool.len() == 2)
    });
    let scratch = short_temp_dir("piwm");
    let marker = scratch.path().join("marker");
    let input = serde_json::json!({ "marker": marker.display().to_string() }).to_string();
    env.start_fixture("kill-during-shell", Some(&input));
    let tree = wait_for(
        &env,
        "the resolver, the pool and the run's runner list live processes",
        || {
            let tree = poll_tree(&env)?;
            single_live_process(at(&tree, &["resolvers", "resolver"])?)?;
            let runner = runner_children(&tree).into_iter().next()?;
            single_live_process(runner)?;
            let pool = processes(at(&tree, &["runners", "pool"])?);
            (!pool.is_empty()).then_some(())?;
            Some(tree)
        },
    );
    // The shell step runs, so the runner is mid-node when the stop comes.
    wait_for(&env, "the shell step started", || marker.exists().then_some(()));
    let listed: Vec<(String, i32, i32, u64)> = nodes(&tree)
        .iter()
        .flat_map(|node| {
            processes(node)
                .into_iter()
                .map(|(pid, pgid)| (id(node).to_string(), pid, pgid))
        })
        .filter_map(|(name, pid, pgid)| Some((name, pid, pgid, start_time(pid)?)))
        .collect();
    assert!(
        listed.len() >= 3,
        "resolver, pool and runner: {listed:?}\n{}",
        pretty(&tree)
    );
    let server = env.server_pid();
    let server_start = start_time(server).expect("server start time");

    let stop = env.cli(&["server", "stop"]);
    env.expect_code(&stop, 0, "server stop");
    let survivors: Vec<String> = listed
        .iter()
        .filter(|(_, pid, _, start)| still_exists(*pid, *start))
        .map(|(name, pid, _, _)| format!("{name}: {}", describe(*pid)))
        .collect();
    assert!(
        survivors.is_empty(),
        "processes the tree listed outlived `server stop` (a zombie counts: the server reaps):\n{}\n\
         tree before the stop:\n{}{}",
        survivors.join("\n"),
        pretty(&tree),
        env.diagnostics()
    );
    // The server's parent is init (`server start` detaches it), which in some environments
    // never reaps: a zombie of the server itself has exited.
    assert!(
        !(still_exists(server, server_start) && alive(server)),
        "the server outlived `server stop`: {}",
        describe(server)
    );
    let group_survivors: Vec<String> = listed
        .iter()
        .flat_map(|(name, _, pgid, _)| {
            live_group_members(*pgid)
                .into_iter()
                .map(move |pid| format!("{name} group {pgid}: {}", describe(pid)))
        })
        .collect();
    assert!(
        group_survivors.is_empty(),
        "members of listed process groups outlived `server stop`:\n{}",
        group_survivors.join("\n")
    );
    let status = env.cli(&["server", "status"]);
    assert_eq!(status.status.code(), Some(3), "no server after the stop");
}

#[test]
fn the_tree_output_names_no_path_run_id_or_token() {
    let env = scripted(LONG_SCRIPT, &[]);
    let run_ids = ["run-tree-private-f1", "run-tree-private-f2"];
    common::queue_runs_in(env.dir(), run_ids.iter().map(|id| id.to_string()));
    start_server(&env);
    wait_for(&env, "both runners list their processes", || {
        let tree = poll_tree(&env)?;
        let runners = runner_children(&tree);
        (runners.len() == 2 && runners.iter().all(|runner| single_live_process(runner).is_some())).then_some(())
    });
    // Watchers: a run feed and the run list appear under clients/feeds.
    let _view = Watcher::start(&env, &["view", run_ids[0]]);
    let _list = Watcher::start(&env, &["runs", "--watch"]);
    wait_for(&env, "the feeds of both watchers are in the tree", || {
        let tree = poll_tree(&env)?;
        let feeds = at(&tree, &["clients", "feeds"])?;
        let ids: Vec<&str> = children(feeds).iter().map(id).collect();
        (ids.iter().any(|id| id.starts_with("run-feed-")) && ids.iter().any(|id| id.starts_with("run-list")))
            .then_some(())
    });
    if package_built() {
        wait_for(&env, "the resolver lists its process", || {
            let tree = poll_tree(&env)?;
            single_live_process(at(&tree, &["resolvers", "resolver"])?)
        });
    }

    let state_dir = env.dir().display().to_string();
    let canonical = std::fs::canonicalize(env.dir()).map_or_else(|_| state_dir.clone(), |p| p.display().to_string());
    let agent_dir = env.agent_dir.path().display().to_string();
    let json = env.cli(&["server", "status", "--tree", "--json"]);
    env.expect_code(&json, 0, "server status --tree --json");
    let human = env.cli(&["server", "status", "--tree"]);
    env.expect_code(&human, 0, "server status --tree");
    assert!(json_of(&json)["tree"].is_object(), "no tree");
    for (form, out) in [("JSON", &json), ("human", &human)] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("runner-") && text.contains("run-feed-"), "{form}: {text}");
        let lower = text.to_lowercase();
        for secret in [
            state_dir.as_str(),
            canonical.as_str(),
            agent_dir.as_str(),
            run_ids[0],
            run_ids[1],
        ] {
            assert!(!text.contains(secret), "the {form} tree names {secret:?}:\n{text}");
        }
        assert!(!lower.contains("token"), "the {form} tree says \"token\":\n{text}");
        assert!(!text.contains("/tmp/"), "the {form} tree names a path:\n{text}");
    }
}

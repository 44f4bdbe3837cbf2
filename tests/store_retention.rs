//! Retention and bounded reads on a real database: which run trees expire, exact-tree
//! deletion, blob collection that keeps every blob a remaining row names, verified backups,
//! and the run state's total byte budget.

mod common;

use pi_workflows::store::retention::{self, DAY_MS};
use pi_workflows::store::runs::{self, NewRun, RunOrigin};
use pi_workflows::store::{Store, blobs};
use serde_json::json;

/// Queue a run whose input is a real blob; `parent` makes it a restart in the parent's tree.
fn queue(store: &Store, run_id: &str, parent: Option<&str>, input: serde_json::Value) {
    let (run_id, parent) = (run_id.to_string(), parent.map(str::to_string));
    store
        .write(move |tx| {
            let input_hash = blobs::put_json(tx, &input, 1024)?;
            let root = match &parent {
                Some(parent) => Some(tx.conn().query_row(
                    "SELECT root_run_id FROM runs WHERE run_id = ?1",
                    [parent],
                    |row| row.get::<_, String>(0),
                )?),
                None => None,
            };
            let run = NewRun {
                parent_run_id: parent.clone(),
                root_run_id: root,
                origin: if parent.is_some() {
                    RunOrigin::Restart
                } else {
                    RunOrigin::Start
                },
                input_hash: format!("sha256:{input_hash}"),
                ..common::new_run(&run_id)
            };
            runs::queue_run(tx, &run)
        })
        .expect("queue");
}

fn cancel(store: &Store, run_id: &str) {
    let run_id = run_id.to_string();
    store
        .write(move |tx| runs::cancel_unclaimed(tx, &run_id, None))
        .expect("cancel");
}

fn expired(store: &Store, cutoff_ms: i64) -> Vec<String> {
    store
        .read(|conn| retention::expired_trees(conn, cutoff_ms, retention::TREES_PER_SELECTION_MAX))
        .expect("select")
        .into_iter()
        .map(|tree| tree.root_run_id)
        .collect()
}

fn count(store: &Store, sql: &str) -> i64 {
    store
        .read(|conn| Ok(conn.query_row(sql, [], |row| row.get(0))?))
        .expect(sql)
}

#[test]
fn only_old_terminal_unprotected_trees_expire() {
    let t = common::open_store();
    let store = &t.store;
    // old: terminal, with a terminal restart in its tree
    queue(store, "old", None, json!({"n": 1}));
    cancel(store, "old");
    queue(store, "old-restart", Some("old"), json!({"n": 2}));
    cancel(store, "old-restart");
    // live: one run of the tree is still queued
    queue(store, "live", None, json!({"n": 3}));
    cancel(store, "live");
    queue(store, "live-restart", Some("live"), json!({"n": 4}));
    // effect: terminal, but an external effect is unsettled
    queue(store, "effect", None, json!({"n": 5}));
    cancel(store, "effect");
    store
        .write(|tx| {
            tx.conn().execute(
                "INSERT INTO effects (effect_id, run_id, effect_type, idempotency_key, request_fingerprint, recovery,
                                      status, created_at, updated_at)
                 VALUES ('e', 'effect', 't', 'k', 'f', 'manual', 'ambiguous', 0, 0)",
                [],
            )?;
            Ok(())
        })
        .expect("effect");
    t.clock.advance_ms(31 * DAY_MS);
    // recent: finished within the retention period
    queue(store, "recent", None, json!({"n": 6}));
    cancel(store, "recent");

    let cutoff = common::START_MS + 31 * DAY_MS - 30 * DAY_MS;
    assert_eq!(expired(store, cutoff), vec!["old".to_string()]);
    let everything_old = common::START_MS + 31 * DAY_MS + 1;
    assert_eq!(
        expired(store, everything_old),
        vec!["old".to_string(), "recent".to_string()],
        "the queued tree and the ambiguous effect stay protected at any age"
    );
}

#[test]
fn deleting_a_tree_removes_exactly_its_rows_and_collection_keeps_named_blobs() {
    let t = common::open_store();
    let store = &t.store;
    queue(store, "gone", None, json!({"only": "gone"}));
    cancel(store, "gone");
    queue(store, "gone-restart", Some("gone"), json!({"only": "gone-restart"}));
    cancel(store, "gone-restart");
    queue(store, "kept", None, json!({"only": "kept"}));
    cancel(store, "kept");
    let shared = json!({"shared": true});
    queue(store, "kept-shared", None, shared.clone());
    t.clock.advance_ms(31 * DAY_MS);
    let cutoff = t.store.now_ms() - 30 * DAY_MS;

    for (index, run_id) in ["gone", "kept"].into_iter().enumerate() {
        let command = pi_workflows::store::commands::CommandRequest {
            request_id: format!("req-{index}"),
            client_id: "client".to_string(),
            operation: "run.pause".to_string(),
            idempotency_key: format!("key-{index}"),
            run_id: Some(run_id.to_string()),
            fingerprint: pi_workflows::digest::sha256_hex(run_id.as_bytes()),
        };
        store
            .write(move |tx| {
                pi_workflows::store::commands::run_command(tx, &command, |_| {
                    Ok(pi_workflows::store::commands::Accepted {
                        revision: None,
                        receipt: json!({"ok": true}),
                    })
                })
            })
            .expect("receipt");
    }
    let deleted = store
        .write(move |tx| retention::delete_tree(tx, "gone", cutoff))
        .expect("delete");
    assert!(deleted);
    let receipts: String = store
        .read(|conn| Ok(conn.query_row("SELECT group_concat(run_id) FROM host_commands", [], |row| row.get(0))?))
        .expect("receipts");
    assert_eq!(receipts, "kept", "the tree's command receipts went with it");
    assert_eq!(count(store, "SELECT count(*) FROM runs WHERE root_run_id = 'gone'"), 0);
    assert_eq!(
        count(
            store,
            "SELECT count(*) FROM events WHERE run_id IN ('gone', 'gone-restart')"
        ),
        0
    );
    assert_eq!(
        count(
            store,
            "SELECT count(*) FROM run_queue WHERE run_id IN ('gone', 'gone-restart')"
        ),
        0
    );
    assert_eq!(
        count(store, "SELECT count(*) FROM runs"),
        2,
        "other trees are untouched"
    );
    let again = store
        .write(move |tx| retention::delete_tree(tx, "kept-shared", cutoff))
        .expect("refused");
    assert!(!again, "a queued run's tree is never deleted");

    let blobs_before = count(store, "SELECT count(*) FROM blobs");
    let collected = store.write(retention::collect_unreferenced_blobs).expect("collect");
    assert_eq!(collected, 2, "the two deleted runs' inputs");
    assert_eq!(count(store, "SELECT count(*) FROM blobs"), blobs_before - 2);
    // Every remaining run's input still resolves.
    let unresolved = count(
        store,
        "SELECT count(*) FROM runs r WHERE NOT EXISTS
           (SELECT 1 FROM blobs b WHERE b.blob_hash = substr(r.input_hash, 8))",
    );
    assert_eq!(unresolved, 0);
    let verify = store.read(pi_workflows::store::verify::verify).expect("verify");
    assert!(verify.is_clean(), "{verify:?}");
}

#[test]
fn young_blobs_are_never_collected() {
    let t = common::open_store();
    let store = &t.store;
    store
        .write(|tx| blobs::put_json(tx, &json!({"advertised": "run state"}), 1024).map(|_| ()))
        .expect("blob");
    assert_eq!(store.write(retention::collect_unreferenced_blobs).expect("collect"), 0);
    t.clock.advance_ms(retention::BLOB_GRACE_MS + 1);
    assert_eq!(store.write(retention::collect_unreferenced_blobs).expect("collect"), 1);
}

#[test]
fn a_backup_is_a_verified_private_copy_and_never_overwrites() {
    use std::os::unix::fs::PermissionsExt;
    let t = common::open_store();
    queue(&t.store, "r1", None, json!({"n": 1}));
    let dest = t.dir.path().join("backup.sqlite");
    let report = retention::backup_to(t.store.path(), &dest).expect("backup");
    assert_eq!(report.runs, 1);
    assert_eq!(
        std::fs::metadata(&dest).expect("file").permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        report.sha256,
        pi_workflows::digest::sha256_hex(&std::fs::read(&dest).expect("read"))
    );
    let copy = Store::open(&dest, std::sync::Arc::new(t.clock.clone())).expect("the copy opens");
    assert_eq!(count(&copy, "SELECT count(*) FROM runs"), 1);
    drop(copy);
    let refused = retention::backup_to(t.store.path(), &dest);
    assert!(refused.is_err(), "an existing file is never overwritten");
}

#[test]
fn compaction_returns_free_pages_in_short_steps() {
    let t = common::open_store();
    let store = &t.store;
    for index in 0..8 {
        let big = json!({"index": index, "fill": "x".repeat(400 * 1024)});
        store
            .write(move |tx| blobs::put_json(tx, &big, 512 * 1024).map(|_| ()))
            .expect("blob");
    }
    t.clock.advance_ms(retention::BLOB_GRACE_MS + 1);
    assert_eq!(store.write(retention::collect_unreferenced_blobs).expect("collect"), 8);
    let free = count(store, "SELECT freelist_count FROM pragma_freelist_count");
    assert!(free > 700, "about 3 MiB of pages are free: {free}");
    assert!(
        !store.read(retention::compaction_due).expect("due"),
        "3 MiB is below the 64 MiB threshold"
    );
    let mut steps = 0;
    while store.write(retention::vacuum_step).expect("step") > 0 {
        steps += 1;
        assert!(steps < 10, "each step returns up to 1024 pages");
    }
    assert_eq!(count(store, "SELECT freelist_count FROM pragma_freelist_count"), 0);
    retention::truncate_wal(store.path()).expect("truncate");
    let verify = store.read(pi_workflows::store::verify::verify).expect("verify");
    assert!(verify.is_clean(), "{verify:?}");
}

#[test]
fn a_run_state_above_its_byte_budget_is_refused_before_it_is_built() {
    use pi_workflows::store::run_state;
    let t = common::open_store();
    queue(&t.store, "run-big", None, json!({"fill": "x".repeat(900)}));
    let fits = t
        .store
        .read(|conn| run_state::read_run_state_within(conn, "run-big", 2_000))
        .expect("fits");
    assert_eq!(fits["input"]["fill"].as_str().map(str::len), Some(900));
    let refused = t
        .store
        .read(|conn| run_state::read_run_state_within(conn, "run-big", 500));
    assert!(
        matches!(refused, Err(pi_workflows::store::StoreError::TooLarge { max: 500, .. })),
        "{refused:?}"
    );
}

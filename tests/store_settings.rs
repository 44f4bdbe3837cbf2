//! Run settings in the store: change 0 is the declaration's initial value; a change is
//! checked against the grants and an optional expected change number and stored as the next
//! version; refusals change no row; an ended run refuses changes; a restart starts from its
//! parent's current settings; attempts may only name stored versions; retention removes it all.

mod common;

use common::{new_run, open_store, snapshot};
use pi_workflows::settings::parse_patch;
use pi_workflows::store::settings::{self, Change, SettingsActor};
use pi_workflows::store::{StoreError, runs};
use serde_json::{Value, json};

fn declared() -> Value {
    json!({"initial": {"level": 1, "tags": []}, "paths": [{"path": "/level", "allow": ["replace"]}, {"path": "/tags", "allow": ["add"]}]})
}

fn change(
    store: &pi_workflows::store::Store,
    run_id: &str,
    patch: Value,
    expected: Option<i64>,
) -> Result<i64, StoreError> {
    let run_id = run_id.to_string();
    store.write(move |tx| {
        let ops = parse_patch(&patch)?;
        let change = Change {
            run_id: &run_id,
            patch_json: &patch,
            patch: &ops,
            expected_change_number: expected,
            actor: SettingsActor::Human,
        };
        settings::change(tx, &change).map(|version| version.change_number)
    })
}

fn queue_with_settings(store: &pi_workflows::store::Store, run_id: &str) {
    let run = new_run(run_id);
    store
        .write(move |tx| {
            runs::queue_run(tx, &run)?;
            settings::declare(tx, &run.run_id, &declared())
        })
        .expect("queue");
}

#[test]
fn changes_are_numbered_versions_and_refusals_change_nothing() {
    let t = open_store();
    queue_with_settings(&t.store, "run-1");
    let current =
        |store: &pi_workflows::store::Store| store.read(|conn| settings::current(conn, "run-1")).expect("read");
    assert_eq!(
        current(&t.store).expect("declared").value,
        json!({"level": 1, "tags": []})
    );

    assert_eq!(
        change(
            &t.store,
            "run-1",
            json!([{"op": "replace", "path": "/level", "value": 2}]),
            Some(0)
        )
        .expect("change"),
        1
    );
    assert_eq!(
        change(
            &t.store,
            "run-1",
            json!([{"op": "add", "path": "/tags/-", "value": "x"}]),
            None
        )
        .expect("change"),
        2
    );

    let before = snapshot(&t.store);
    let stale = change(
        &t.store,
        "run-1",
        json!([{"op": "replace", "path": "/level", "value": 3}]),
        Some(1),
    );
    assert!(
        matches!(
            stale,
            Err(StoreError::SettingsChanged {
                expected: 1,
                current: 2,
                ..
            })
        ),
        "{stale:?}"
    );
    let denied = change(&t.store, "run-1", json!([{"op": "remove", "path": "/tags/0"}]), None);
    assert_eq!(
        denied.as_ref().map_err(StoreError::refusal_code).err(),
        Some(Some("settingsForbidden"))
    );
    let failed_test = change(
        &t.store,
        "run-1",
        json!([{"op": "test", "path": "/level", "value": 9}]),
        None,
    );
    assert_eq!(
        failed_test.map_err(|err| err.refusal_code()).err(),
        Some(Some("settingsTestFailed"))
    );
    assert_eq!(snapshot(&t.store), before, "a refused change writes nothing");

    let versions = t
        .store
        .read(|conn| {
            Ok((
                settings::version(conn, "run-1", 0)?,
                settings::version(conn, "run-1", 2)?,
                settings::version(conn, "run-1", 3)?,
            ))
        })
        .expect("versions");
    assert_eq!(
        versions.0.expect("v0").value,
        json!({"level": 1, "tags": []}),
        "old versions stay"
    );
    assert_eq!(versions.1.expect("v2").value, json!({"level": 2, "tags": ["x"]}));
    assert_eq!(versions.2, None);
    let page = t
        .store
        .read(|conn| settings::page(conn, "run-1", None, 2))
        .expect("page")
        .expect("declared");
    assert_eq!(
        page.changes.iter().map(|c| c.0).collect::<Vec<_>>(),
        [2, 1],
        "newest first, bounded"
    );
}

#[test]
fn ended_runs_refuse_changes_and_restarts_inherit_the_current_settings() {
    let t = open_store();
    queue_with_settings(&t.store, "run-1");
    change(
        &t.store,
        "run-1",
        json!([{"op": "replace", "path": "/level", "value": 5}]),
        None,
    )
    .expect("change");
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, "run-1", None))
        .expect("cancel");
    let before = snapshot(&t.store);
    let ended = change(
        &t.store,
        "run-1",
        json!([{"op": "replace", "path": "/level", "value": 6}]),
        None,
    );
    assert_eq!(ended.map_err(|err| err.refusal_code()).err(), Some(Some("runEnded")));
    assert_eq!(snapshot(&t.store), before);

    t.store
        .write(|tx| runs::restart_run(tx, "run-1", "run-2", None))
        .expect("restart");
    let inherited = t
        .store
        .read(|conn| settings::current(conn, "run-2"))
        .expect("read")
        .expect("inherited");
    assert_eq!(
        (inherited.change_number, inherited.value),
        (0, json!({"level": 5, "tags": []}))
    );
    let page = t
        .store
        .read(|conn| settings::page(conn, "run-2", None, 10))
        .expect("page")
        .expect("declared");
    assert_eq!(page.changes.len(), 1);
    assert_eq!(
        (page.changes[0].0, page.changes[0].1.as_str()),
        (0, "inherited"),
        "change 0 names its source"
    );
    // The grants come along: the restart's settings change under the same rules.
    assert!(change(&t.store, "run-2", json!([{"op": "remove", "path": "/level"}]), None).is_err());
    assert_eq!(
        change(
            &t.store,
            "run-2",
            json!([{"op": "replace", "path": "/level", "value": 7}]),
            None
        )
        .expect("change"),
        1
    );
}

#[test]
fn attempts_name_only_stored_versions() {
    let t = open_store();
    queue_with_settings(&t.store, "run-1");
    t.store
        .write(|tx| runs::queue_run(tx, &new_run("plain")))
        .expect("queue");
    let check = |run: &'static str, number: Option<i64>| {
        t.store
            .read(move |conn| settings::check_attempt_version(conn, run, number))
            .is_ok()
    };
    assert!(check("run-1", Some(0)));
    assert!(!check("run-1", Some(1)), "no version 1 yet");
    assert!(!check("run-1", None), "a run with settings names the version");
    assert!(check("plain", None));
    assert!(!check("plain", Some(0)), "a run without settings names none");
    change(
        &t.store,
        "run-1",
        json!([{"op": "replace", "path": "/level", "value": 2}]),
        None,
    )
    .expect("change");
    assert!(
        check("run-1", Some(1)) && check("run-1", Some(0)),
        "an older version stays valid for a racing start"
    );
}

// Found by the settings_patch fuzz target (fuzz/seeds/settings_patch/unknown-member-echoed-unbounded):
// a refusal quoted the client's unknown member name whole.
#[test]
fn a_refusal_quotes_only_a_bounded_prefix_of_an_unknown_member_name() {
    let name = "x".repeat(20_000);
    let patch = serde_json::json!([{"op": "test", "path": "/mode", "value": "fast", name.clone(): 1}]);
    let error = parse_patch(&patch).expect_err("an unknown member is refused");
    let message = error.to_string();
    assert!(message.contains("unknown member"), "{message}");
    assert!(message.len() < 300, "bounded: {} bytes", message.len());
    assert!(!message.contains(&name), "not the whole name");
}

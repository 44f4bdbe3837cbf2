use serde_json::{Value, json};

use super::*;

fn declaration() -> Declaration {
    Declaration::parse(&json!({
        "initial": {"reviewers": ["ann"], "limits": {"retries": 2}, "mode": "fast"},
        "paths": [
            {"path": "/reviewers", "allow": ["add", "remove"]},
            {"path": "/limits/retries", "allow": ["replace"]},
        ],
    }))
    .expect("a valid declaration")
}

fn change(patch: Value) -> Result<Value, SettingsError> {
    let decl = declaration();
    decl.change(&decl.initial, &parse_patch(&patch)?)
}

#[test]
fn granted_operations_apply_in_order() {
    let changed = change(json!([
        {"op": "test", "path": "/limits/retries", "value": 2},
        {"op": "replace", "path": "/limits/retries", "value": 5},
        {"op": "add", "path": "/reviewers/-", "value": "bob"},
        {"op": "add", "path": "/reviewers/0", "value": "cy"},
        {"op": "remove", "path": "/reviewers/1"},
    ]))
    .expect("allowed");
    assert_eq!(changed["limits"]["retries"], json!(5));
    assert_eq!(changed["reviewers"], json!(["cy", "bob"]));
    assert_eq!(changed["mode"], json!("fast"), "untouched members stay");
}

#[test]
fn anything_not_granted_is_denied_and_changes_nothing() {
    for (patch, op) in [
        (json!([{"op": "replace", "path": "/mode", "value": "slow"}]), "replace"),
        (json!([{"op": "replace", "path": "/reviewers", "value": []}]), "replace"),
        (json!([{"op": "remove", "path": "/limits/retries"}]), "remove"),
        (json!([{"op": "add", "path": "/limits/extra", "value": 1}]), "add"),
        (json!([{"op": "add", "path": "/reviewersX", "value": 1}]), "add"),
        // An add onto an existing member replaces it (RFC 6902), so it needs `replace`.
        (json!([{"op": "add", "path": "/reviewers", "value": "x"}]), "replace"),
        (json!([{"op": "add", "path": "/limits", "value": {}}]), "replace"),
    ] {
        match change(patch.clone()) {
            Err(SettingsError::Forbidden { op: refused, .. }) => assert_eq!(refused, op, "{patch}"),
            other => panic!("{patch}: expected Forbidden, got {other:?}"),
        }
    }
    // A later forbidden operation refuses the allowed one before it too.
    let mixed = json!([
        {"op": "replace", "path": "/limits/retries", "value": 9},
        {"op": "replace", "path": "/mode", "value": "slow"},
    ]);
    assert!(matches!(change(mixed), Err(SettingsError::Forbidden { index: 1, .. })));
}

#[test]
fn a_failed_test_or_missing_target_refuses_the_whole_patch() {
    let failed = json!([
        {"op": "replace", "path": "/limits/retries", "value": 3},
        {"op": "test", "path": "/limits/retries", "value": 2},
    ]);
    assert!(matches!(
        change(failed),
        Err(SettingsError::TestFailed { index: 1, .. })
    ));
    let missing = json!([{"op": "remove", "path": "/reviewers/7"}]);
    assert!(matches!(change(missing), Err(SettingsError::NotApplicable { .. })));
    let leading_zero = json!([{"op": "remove", "path": "/reviewers/00"}]);
    assert!(matches!(change(leading_zero), Err(SettingsError::NotApplicable { .. })));
}

#[test]
fn malformed_patches_are_refused_with_bounds() {
    for bad in [
        json!({"op": "add"}),
        json!([]),
        json!([{"op": "move", "from": "/a", "path": "/b"}]),
        json!([{"op": "add", "path": "reviewers", "value": 1}]),
        json!([{"op": "add", "path": "/reviewers/~2", "value": 1}]),
        json!([{"op": "add", "path": "/reviewers/-"}]),
        json!([{"op": "remove", "path": "/reviewers/0", "value": 1}]),
    ] {
        assert!(
            matches!(parse_patch(&bad), Err(SettingsError::InvalidPatch(_))),
            "{bad}"
        );
    }
    let too_many: Vec<Value> = (0..=PATCH_OPS_MAX)
        .map(|_| json!({"op": "test", "path": "", "value": {}}))
        .collect();
    assert!(matches!(
        parse_patch(&Value::Array(too_many)),
        Err(SettingsError::InvalidPatch(_))
    ));
    let long_pointer = format!("/{}", "a".repeat(POINTER_BYTES_MAX));
    assert!(parse_patch(&json!([{"op": "remove", "path": long_pointer}])).is_err());
    let big_value = "x".repeat(PATCH_BYTES_MAX);
    assert!(matches!(
        parse_patch(&json!([{"op": "add", "path": "/reviewers/-", "value": big_value}])),
        Err(SettingsError::TooLarge { .. })
    ));
    // Exactly the limit of operations is fine.
    let at_limit: Vec<Value> = (0..PATCH_OPS_MAX)
        .map(|_| json!({"op": "test", "path": "", "value": {}}))
        .collect();
    assert_eq!(
        parse_patch(&Value::Array(at_limit)).expect("at the limit").len(),
        PATCH_OPS_MAX
    );
}

#[test]
fn pointers_unescape_tilde_and_slash() {
    let decl = Declaration::parse(&json!({
        "initial": {"a/b": {"~k": 1}},
        "paths": [{"path": "/a~1b", "allow": ["replace"]}],
    }))
    .expect("valid");
    let patch = parse_patch(&json!([{"op": "replace", "path": "/a~1b/~0k", "value": 2}])).expect("parses");
    assert_eq!(
        decl.change(&decl.initial, &patch).expect("applies"),
        json!({"a/b": {"~k": 2}})
    );
}

#[test]
fn the_settings_stay_a_bounded_object() {
    let decl =
        Declaration::parse(&json!({"initial": {"blob": ""}, "paths": [{"path": "", "allow": ["replace", "add"]}]}))
            .expect("valid");
    let root = parse_patch(&json!([{"op": "replace", "path": "", "value": [1]}])).expect("parses");
    assert!(matches!(
        decl.change(&decl.initial, &root),
        Err(SettingsError::NotApplicable { .. })
    ));
    let mut current = decl.initial.clone();
    let chunk = "y".repeat(PATCH_BYTES_MAX - 200);
    let mut refused = None;
    for round in 0..8 {
        let patch = parse_patch(&json!([{"op": "add", "path": format!("/k{round}"), "value": chunk}])).expect("parses");
        match decl.change(&current, &patch) {
            Ok(next) => current = next,
            Err(err) => {
                refused = Some(err);
                break;
            }
        }
    }
    assert!(matches!(refused, Some(SettingsError::TooLarge { .. })), "{refused:?}");
    assert!(check_size("settings", &current, SETTINGS_BYTES_MAX).is_ok());
}

#[test]
fn declarations_are_checked() {
    assert_eq!(Declaration::of_snapshot(&json!({"name": "w"})).expect("none"), None);
    for bad in [
        json!({"initial": [1]}),
        json!({"initial": {}, "paths": {}}),
        json!({"initial": {}, "paths": [{"path": "/a", "allow": ["move"]}]}),
        json!({"initial": {}, "paths": [{"path": "a", "allow": ["add"]}]}),
        json!({"initial": {}, "paths": [{"allow": ["add"]}]}),
    ] {
        assert!(
            matches!(Declaration::parse(&bad), Err(SettingsError::InvalidDeclaration(_))),
            "{bad}"
        );
    }
    let decl = declaration();
    assert_eq!(
        decl.paths_json(),
        json!([{"path": "/reviewers", "allow": ["add", "remove"]}, {"path": "/limits/retries", "allow": ["replace"]}])
    );
}

#[test]
fn a_test_is_allowed_anywhere_and_compares_numbers_by_value() {
    let ok = change(json!([
        {"op": "test", "path": "/mode", "value": "fast"},
        {"op": "test", "path": "/limits/retries", "value": 2.0},
        {"op": "replace", "path": "/limits/retries", "value": 3},
    ]))
    .expect("a test needs no grant, and 2.0 equals 2");
    assert_eq!(ok["limits"]["retries"], json!(3));
    let missing = change(json!([{"op": "test", "path": "/nothing", "value": 1}]));
    assert!(
        matches!(missing, Err(SettingsError::TestFailed { index: 0, .. })),
        "{missing:?}"
    );
    let other = change(json!([{"op": "test", "path": "/reviewers", "value": ["ann", "bob"]}]));
    assert!(matches!(other, Err(SettingsError::TestFailed { .. })));
}

#[test]
fn an_add_that_creates_a_member_or_inserts_into_a_list_needs_only_add() {
    let decl = Declaration::parse(&json!({
        "initial": {"labels": {"a": 1}, "list": [1]},
        "paths": [{"path": "/labels", "allow": ["add"]}, {"path": "/list", "allow": ["add"]}],
    }))
    .expect("valid");
    let patch = parse_patch(&json!([
        {"op": "add", "path": "/labels/b", "value": 2},
        {"op": "add", "path": "/list/0", "value": 0},
    ]))
    .expect("parses");
    assert_eq!(
        decl.change(&decl.initial, &patch).expect("creates and inserts"),
        json!({"labels": {"a": 1, "b": 2}, "list": [0, 1]})
    );
    // Created by an earlier operation of the same patch, the member then exists.
    let twice = parse_patch(&json!([
        {"op": "add", "path": "/labels/c", "value": 1},
        {"op": "add", "path": "/labels/c", "value": 2},
    ]))
    .expect("parses");
    assert!(matches!(
        decl.change(&decl.initial, &twice),
        Err(SettingsError::Forbidden {
            index: 1,
            op: "replace",
            ..
        })
    ));
}

#[test]
fn settings_nest_at_most_the_depth_limit_even_when_a_patch_stacks_values() {
    let deep = |levels: usize| -> Value { (0..levels).fold(json!(1), |inner, _| json!([inner])) };
    assert!(matches!(
        Declaration::parse(&json!({"initial": {"x": deep(SETTINGS_DEPTH_MAX)}})),
        Err(SettingsError::TooDeep { .. })
    ));
    assert!(Declaration::parse(&json!({"initial": {"x": deep(SETTINGS_DEPTH_MAX - 1)}})).is_ok());
    let decl = Declaration::parse(&json!({"initial": {"list": []}, "paths": [{"path": "/list", "allow": ["add"]}]}))
        .expect("valid");
    // Each value alone fits; stacked in one patch they would not.
    let half = SETTINGS_DEPTH_MAX / 2 + 1;
    let mut inner_path = String::from("/list/0");
    for _ in 0..half - 1 {
        inner_path.push_str("/0");
    }
    let patch = parse_patch(&json!([
        {"op": "add", "path": "/list/-", "value": deep(half)},
        {"op": "add", "path": format!("{inner_path}/-"), "value": deep(half)},
    ]))
    .expect("parses");
    let refused = decl.change(&decl.initial, &patch);
    assert!(matches!(refused, Err(SettingsError::TooDeep { .. })), "{refused:?}");
}

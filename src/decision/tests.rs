use serde_json::json;

use super::*;

fn contract() -> Value {
    json!({"decision": {
        "audience": "operator",
        "title": "Merge PR 12?",
        "presentation": {"schema": PRESENTATION_SCHEMA, "summary": "All checks pass.",
                         "blocks": [{"kind": "fields", "fields": [{"label": "Branch", "value": "fix-1"}]}]},
        "choices": [
            {"id": "approve", "label": "Approve"},
            {"id": "changes", "label": "Request changes", "input": {"label": "What should change?", "maxLength": 20}},
        ],
        "deadlineAt": 1_000,
        "onTimeout": {"choice": "approve"},
    }})
}

fn request() -> DecisionRequest {
    DecisionRequest::from_contract(&contract()).expect("a valid request")
}

#[test]
fn a_valid_request_parses_and_its_default_is_a_valid_response() {
    let request = request();
    assert_eq!(request.choice_ids(), ["approve", "changes"]);
    assert_eq!(request.on_timeout.as_ref().map(|r| r.choice.as_str()), Some("approve"));
}

#[test]
fn responses_are_checked_against_the_declared_choices() {
    let request = request();
    let ok = |choice: &str, text: Option<&str>| {
        request.check_response(&Response {
            choice: choice.into(),
            text: text.map(str::to_string),
        })
    };
    assert_eq!(ok("approve", None), Ok(()));
    assert_eq!(ok("changes", Some("rename it")), Ok(()));
    let unknown = ok("maybe", None).expect_err("not a choice");
    assert!(unknown.to_string().contains("approve, changes"), "{unknown}");
    assert_eq!(ok("approve", Some("why")).map_err(|e| e.code()), Err("invalidAnswer"));
    assert!(ok("changes", None).is_err(), "a required text is missing");
    assert!(ok("changes", Some("   ")).is_err(), "blank text is missing text");
    let long = ok("changes", Some(&"x".repeat(21))).expect_err("over maxLength");
    assert!(long.to_string().contains("limit is 20"), "{long}");
}

#[test]
fn bad_requests_are_refused_with_what_to_fix() {
    let cases: Vec<(&str, Value)> = vec![
        ("audience", json!("Ops Team")),
        ("title", json!("")),
        ("choices", json!([])),
        (
            "choices",
            json!([{"id": "a", "label": "A"}, {"id": "a", "label": "again"}]),
        ),
        ("onTimeout", json!({"choice": "nope"})),
        ("onTimeout", json!({"choice": "changes"})),
        ("presentation", json!({"schema": "other", "summary": "s"})),
        (
            "presentation",
            json!({"schema": PRESENTATION_SCHEMA, "summary": "x".repeat(SUMMARY_CHARS_MAX + 1)}),
        ),
        (
            "presentation",
            json!({"schema": PRESENTATION_SCHEMA, "summary": "s", "blocks": [{"kind": "image"}]}),
        ),
        (
            "presentation",
            json!({"schema": PRESENTATION_SCHEMA, "summary": "s", "extra": 1}),
        ),
    ];
    for (member, value) in cases {
        let mut contract = contract();
        contract["decision"][member] = value.clone();
        let err = DecisionRequest::from_contract(&contract).expect_err(member);
        assert_eq!(err.code(), "invalidDecision", "{member} = {value}: {err}");
    }
    let mut no_deadline = contract();
    no_deadline["decision"]
        .as_object_mut()
        .expect("object")
        .remove("deadlineAt");
    assert!(
        DecisionRequest::from_contract(&no_deadline).is_err(),
        "a default needs a deadline"
    );
}

#[test]
fn an_oversized_presentation_is_refused() {
    let block = json!({"kind": "code", "text": "y".repeat(CODE_TEXT_CHARS_MAX)});
    let mut contract = contract();
    contract["decision"]["presentation"]["blocks"] = json!([block, block, block, block, block]);
    let err = DecisionRequest::from_contract(&contract).expect_err("too large");
    assert!(err.to_string().contains("bytes"), "{err}");
}

/// One change to one bound part of a request, named for the assertion that catches it.
type Change = (&'static str, fn(&mut DecisionRequest));

#[test]
fn the_digest_binds_every_part_of_the_request() {
    let request = request();
    let base = request.digest("subject-a", 0);
    assert_eq!(base, request.digest("subject-a", 0), "stable");
    assert_ne!(base, request.digest("subject-b", 0), "subject");
    assert_ne!(base, request.digest("subject-a", 1), "revision");
    let changes: [Change; 9] = [
        ("audience", |r| r.audience.push('s')),
        ("title", |r| r.title.push('!')),
        ("presentation", |r| r.presentation.summary.push('!')),
        ("choice id", |r| r.choices[0].id.push('d')),
        ("choice label", |r| r.choices[0].label.push('!')),
        ("prompt (text input)", |r| {
            r.choices[1].input.as_mut().expect("input").label.push('?');
        }),
        ("prompt limit", |r| {
            r.choices[1].input.as_mut().expect("input").max_length += 1
        }),
        ("deadline", |r| r.deadline_at = Some(2_000)),
        ("default", |r| r.on_timeout = None),
    ];
    for (part, change) in changes {
        let mut changed = request.clone();
        change(&mut changed);
        assert_ne!(changed, request, "{part}: the change must change the request");
        assert_ne!(base, changed.digest("subject-a", 0), "{part} is bound");
    }
}

#[test]
fn answers_parse_from_a_bare_choice_or_an_object() {
    assert_eq!(
        parse_answer(&json!("approve")).map(|r| r.choice),
        Ok("approve".to_string())
    );
    let full = parse_answer(&json!({"choice": "changes", "text": "t"})).expect("object");
    assert_eq!(full.text.as_deref(), Some("t"));
    assert!(parse_answer(&json!(3)).is_err());
    assert!(
        parse_answer(&json!({"choice": "a", "by": "me"})).is_err(),
        "unknown members are refused"
    );
    assert_eq!(
        output_of(&full, Provenance::Human),
        json!({"choice": "changes", "text": "t", "provenance": "human"})
    );
}

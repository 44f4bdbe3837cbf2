//! The attempt tab without a server: the selected attempt's output and error are asked for
//! once each (by their references), shown as pretty JSON when they arrive, scrolled with
//! PgUp / PgDn, and a value that is missing, does not match its digest or was lost with the
//! connection is an error in its section (never an endless "reading").

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use piw::connection::content::ContentRef;
use piw::connection::session::{Command, ContentState, Link, Update};
use piw::ui::app::App;
use piw::ui::text::{buffer_text, render};
use piw::ui::theme::Theme;
use serde_json::{Value, json};

const OUTPUT_MEDIA: &str = "application/vnd.pi-workflows.attempt-output+json";
const ERROR_MEDIA: &str = "application/vnd.pi-workflows.attempt-error+json";

fn reference(digest: &str, media: &str) -> Value {
    json!({"digest": digest, "mediaType": media, "byteLength": 40})
}

fn document() -> Value {
    json!({
        "runId": "run-1", "revision": 5,
        "workflow": {"name": "fails", "definitionDigest": "sha256:00"},
        "run": {"status": "failed", "revision": 4, "createdAt": 1_000, "finishedAt": 3_000, "attemptCount": 2},
        "display": {"status": "failed", "controls": ["restart"], "activity": {"kind": "none"}},
        "history": {"items": {
            "1": {"seq": 1, "attemptId": "t1", "nodePath": "prepare", "nodeType": "compute", "status": "completed",
                  "startedAt": 1_000, "finishedAt": 1_500, "outputRef": reference("sha256:0a", OUTPUT_MEDIA)},
            "2": {"seq": 2, "attemptId": "t2", "nodePath": "explode", "nodeType": "compute", "status": "failed",
                  "startedAt": 2_000, "finishedAt": 2_100, "errorRef": reference("sha256:0e", ERROR_MEDIA)}},
            "total": 2}
    })
}

fn app() -> App {
    let mut app = App::new(Theme::default(), Some("run-1"));
    app.apply(Update::Link(Link::Connected));
    app.apply(Update::View {
        document: document(),
        definition: ContentState::Failed("not needed here".into()),
        full_reason: None,
    });
    app
}

fn frame(app: &App) -> String {
    buffer_text(&render(app, 120, 40))
}

fn press(app: &mut App, code: KeyCode) -> Vec<Command> {
    piw::ui::keys::on_key(app, KeyEvent::new(code, KeyModifiers::NONE))
}

/// The one value load `pending_loads` asks for.
fn one_load(app: &mut App) -> ContentRef {
    let loads = app.pending_loads();
    let [Command::LoadAttemptValue(reference)] = loads.as_slice() else {
        panic!("one attempt value load: {loads:?}")
    };
    reference.clone()
}

fn answer(app: &mut App, reference: &ContentRef, value: Result<Value, String>) {
    app.apply(Update::AttemptValue {
        run_id: "run-1".into(),
        digest: reference.digest.clone(),
        media_type: reference.media_type.clone(),
        value: value.map(Arc::new),
    });
}

#[test]
fn the_attempt_tab_shows_a_failed_attempts_error_and_a_completed_attempts_output() {
    let mut app = app();
    assert!(app.pending_loads().is_empty(), "nothing is read for a hidden tab");
    press(&mut app, KeyCode::Char('2'));
    let error_ref = one_load(&mut app);
    assert_eq!(
        (error_ref.digest.as_str(), error_ref.media_type.as_str()),
        ("sha256:0e", ERROR_MEDIA)
    );
    assert!(app.pending_loads().is_empty(), "asked once");
    let text = frame(&app);
    assert!(text.contains("explode") && text.contains("reading…"), "{text}");
    answer(
        &mut app,
        &error_ref,
        Ok(json!({"code": "nodeFailed", "message": "the fixture fails on purpose"})),
    );
    let text = frame(&app);
    assert!(text.contains(r#""message": "the fixture fails on purpose""#), "{text}");
    assert!(text.contains("took 100 ms"), "timing: {text}");

    press(&mut app, KeyCode::Up);
    let output_ref = one_load(&mut app);
    assert_eq!(output_ref.media_type, OUTPUT_MEDIA);
    answer(&mut app, &output_ref, Ok(json!({"ready": true})));
    let text = frame(&app);
    assert!(text.contains("prepare") && text.contains(r#""ready": true"#), "{text}");
    press(&mut app, KeyCode::Down);
    assert!(app.pending_loads().is_empty(), "a value read is kept");
    assert!(frame(&app).contains("the fixture fails on purpose"));
}

#[test]
fn a_value_that_fails_or_is_lost_with_the_connection_is_a_section_error() {
    let mut app = app();
    press(&mut app, KeyCode::Char('2'));
    let error_ref = one_load(&mut app);
    answer(
        &mut app,
        &error_ref,
        Err("content does not match its digest sha256:0e (got sha256:ff)".into()),
    );
    let text = frame(&app);
    assert!(
        text.contains("error unavailable: content does not match its digest"),
        "{text}"
    );

    press(&mut app, KeyCode::Up);
    one_load(&mut app);
    app.apply(Update::Link(Link::Reconnecting {
        attempt: 1,
        reason: "the connection closed".into(),
    }));
    assert!(
        app.pending_loads().is_empty(),
        "nothing is asked for while disconnected"
    );
    let text = frame(&app);
    assert!(text.contains("not read: not connected"), "not endless reading: {text}");
    app.apply(Update::Link(Link::Connected));
    let again = one_load(&mut app);
    assert_eq!(again.media_type, OUTPUT_MEDIA, "the lost read is asked for again");
}

#[test]
fn an_incomplete_reference_is_an_error_and_long_values_scroll() {
    let mut app = app();
    let mut broken = document();
    broken["history"]["items"]["2"]["errorRef"] = json!({"digest": "sha256:0e", "mediaType": ERROR_MEDIA});
    app.apply(Update::View {
        document: broken,
        definition: ContentState::Failed("not needed here".into()),
        full_reason: None,
    });
    press(&mut app, KeyCode::Char('2'));
    assert!(app.pending_loads().is_empty(), "an incomplete reference is not read");
    assert!(frame(&app).contains("unavailable: the view's reference is incomplete"));

    press(&mut app, KeyCode::Up);
    let output_ref = one_load(&mut app);
    let long: Vec<String> = (0..40).map(|i| format!("line-{i:02}")).collect();
    answer(&mut app, &output_ref, Ok(json!(long)));
    let top = frame(&app);
    assert!(top.contains("line-00") && !top.contains("line-30"), "{top}");
    press(&mut app, KeyCode::PageDown);
    press(&mut app, KeyCode::PageDown);
    press(&mut app, KeyCode::PageDown);
    let scrolled = frame(&app);
    assert!(
        scrolled.contains("line-30") && !scrolled.contains("line-00"),
        "{scrolled}"
    );
}

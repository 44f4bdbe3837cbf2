//! The screen's rules without a server: a stale view grants no controls, content that is
//! missing or does not match its digest is a section-level error (never endless loading),
//! a pinned run is never replaced by the run list, and the timeline replays node states.
//! The digest case runs the real `--once` path against a scripted fake server.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::sync::Arc;

use base64::Engine as _;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use pi_workflows::protocol::{
    ClientMessage, ClientSchema, Event, EventKind, Hello, JsonObject, OpaqueId, Operation, Outcome, Response,
    decode_client_message, encode_client_message,
};
use piw::connection::content::digest_of;
use piw::connection::session::{Command, ContentState, Link, Update};
use piw::ui::app::App;
use piw::ui::text::{buffer_text, render};
use piw::ui::theme::Theme;
use serde_json::{Value, json};

fn definition() -> Value {
    json!({"startAt": "a", "nodes": [{"path": "a", "type": "compute", "title": "First"},
        {"path": "b", "type": "compute", "title": "Second"}], "edges": [{"from": "a", "to": "b"}], "includes": []})
}

fn document(digest: &str, status: &str, controls: &[&str]) -> Value {
    json!({
        "runId": "run-1", "revision": 9,
        "workflow": {"name": "demo", "definitionDigest": digest,
                     "definition": {"digest": digest, "mediaType": "application/vnd.pi-workflows.definition+json", "byteLength": 2}},
        "run": {"status": "running", "revision": 4, "createdAt": 1_000, "attemptCount": 2},
        "display": {"status": status, "controls": controls, "activity": {"kind": "worker", "state": "ready"},
                    "currentNode": {"nodePath": "b", "attemptId": "t2", "status": "running", "startedAt": 2_000}},
        "history": {"items": {
            "1": {"seq": 1, "attemptId": "t1", "nodePath": "a", "nodeType": "compute", "status": "completed", "startedAt": 1_000, "finishedAt": 1_500},
            "2": {"seq": 2, "attemptId": "t2", "nodePath": "b", "nodeType": "compute", "status": "running", "startedAt": 2_000}},
            "total": 2}
    })
}

fn app_with(definition_state: ContentState) -> App {
    let mut app = App::new(Theme::default(), Some("run-1"));
    app.apply(Update::Link(Link::Connected));
    app.apply(Update::View {
        document: document("sha256:00", "running", &["cancel", "pause"]),
        definition: definition_state,
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

#[test]
fn a_stale_view_is_marked_and_grants_no_controls() {
    let mut app = app_with(ContentState::Ready(Arc::new(definition())));
    assert!(frame(&app).contains("[p] pause"));
    app.apply(Update::Link(Link::Reconnecting {
        attempt: 2,
        reason: "the connection closed".into(),
    }));
    let text = frame(&app);
    assert!(
        text.contains("reconnecting (attempt 2)") && text.contains("controls: none while not connected"),
        "{text}"
    );
    assert!(press(&mut app, KeyCode::Char('p')).is_empty());
    assert!(app.overlay.is_none(), "no confirmation for a stale view");
    app.apply(Update::Link(Link::Disconnected { reason: "gone".into() }));
    assert!(frame(&app).contains("✗ disconnected"));
}

#[test]
fn a_control_is_sent_only_after_confirmation_with_its_own_key() {
    let mut app = app_with(ContentState::Ready(Arc::new(definition())));
    assert!(press(&mut app, KeyCode::Char('p')).is_empty());
    assert!(frame(&app).contains("Pause run run-1?"));
    let sent = press(&mut app, KeyCode::Char('y'));
    let [Command::Control(control)] = sent.as_slice() else {
        panic!("one control: {sent:?}")
    };
    assert_eq!(control.operation, Operation::RunPause);
    assert!(control.key.as_str().starts_with("piw-key-"));
    // A control the view does not offer opens nothing.
    assert!(press(&mut app, KeyCode::Char('r')).is_empty() && app.overlay.is_none());
}

#[test]
fn missing_or_failed_content_is_a_section_error_not_endless_loading() {
    let failed = app_with(ContentState::Failed("content does not match its digest".into()));
    let text = frame(&failed);
    assert!(
        text.contains("graph unavailable: content does not match its digest"),
        "{text}"
    );
    // The rest of the view still renders.
    assert!(
        text.contains("· RUNNING") && text.contains("2 of 2 attempts loaded"),
        "{text}"
    );
}

#[test]
fn a_pinned_run_is_never_replaced_by_the_run_list() {
    let mut app = app_with(ContentState::Ready(Arc::new(definition())));
    let runs = json!({"items": [{"runId": "run-newer", "workflowName": "other", "display": {"status": "running"}}]});
    assert_eq!(app.apply(Update::Runs(runs.clone())), None);
    assert_eq!(app.selected_id(), Some("run-1"));
    let mut browsing = App::new(Theme::default(), None);
    assert_eq!(browsing.apply(Update::Runs(runs)), Some("run-newer".to_string()));
}

#[test]
fn the_timeline_replays_node_states_and_end_returns_to_live() {
    let mut app = app_with(ContentState::Ready(Arc::new(definition())));
    let live = frame(&app);
    assert!(
        live.contains("▶ RUNNING") && live.contains("LIVE  attempt 2/2"),
        "{live}"
    );
    press(&mut app, KeyCode::Char('['));
    let replay = frame(&app);
    assert!(
        replay.contains("REPLAY  attempt 1/2") && replay.contains("· not run"),
        "{replay}"
    );
    press(&mut app, KeyCode::End);
    assert!(frame(&app).contains("LIVE  attempt 2/2"));
}

/// A fake server on a Unix socket: `hello`, then a view whose definition reference
/// promises bytes the content answer does not hold.
fn fake_server(dir: &std::path::Path, version: &str) -> std::path::PathBuf {
    fake_server_with(dir, version, document(&digest_of(b"{}"), "running", &[]))
}

/// The fake server answering `view` (to `view.run.get`, and as the snapshot of a
/// `view.run.watch`); any other read is answered with content that is not `{}`.
fn fake_server_with(dir: &std::path::Path, version: &str, view: Value) -> std::path::PathBuf {
    let version = version.to_string();
    let socket = dir.join("fake.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else { return };
        let mut writer = stream.try_clone().expect("clone");
        let hello = ClientMessage::Hello(Hello {
            schema: ClientSchema::V1,
            connection_id: OpaqueId::new("conn-1").expect("id"),
            package_version: version,
        });
        writer
            .write_all(&encode_client_message(&hello).expect("hello"))
            .expect("write");
        let promised = digest_of(b"{}");
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            let Ok(ClientMessage::Request(request)) = decode_client_message(format!("{line}\n").as_bytes()) else {
                return;
            };
            let receipt = match request.operation {
                Operation::ViewRunGet => json!({"view": view}),
                Operation::ViewRunWatch => json!({"subscriptionId": FAKE_SUBSCRIPTION}),
                _ => json!({"digest": promised, "mediaType": "application/vnd.pi-workflows.definition+json",
                            "byteLength": 2, "offset": 0,
                            "data": base64::engine::general_purpose::STANDARD.encode(b"[]")}),
            };
            let Value::Object(receipt) = receipt else { return };
            let response = ClientMessage::Response(Response {
                schema: ClientSchema::V1,
                request_id: request.request_id,
                outcome: Outcome::Accepted,
                revision: None,
                receipt: Some(receipt as JsonObject),
                error: None,
            });
            writer
                .write_all(&encode_client_message(&response).expect("response"))
                .expect("write");
            if request.operation == Operation::ViewRunWatch {
                let Value::Object(payload) = json!({"view": view}) else {
                    return;
                };
                let snapshot = ClientMessage::Event(Event {
                    schema: ClientSchema::V1,
                    subscription_id: OpaqueId::new(FAKE_SUBSCRIPTION).expect("id"),
                    event: EventKind::RunSnapshot,
                    revision: None,
                    run_id: None,
                    payload,
                });
                writer
                    .write_all(&encode_client_message(&snapshot).expect("event"))
                    .expect("write");
            }
        }
    });
    socket
}

const FAKE_SUBSCRIPTION: &str = "sub-1";

#[tokio::test(flavor = "multi_thread")]
async fn content_that_does_not_match_its_digest_is_refused_in_its_section() {
    let dir = tempfile::Builder::new().prefix("piwf").tempdir_in("/tmp").expect("dir");
    let socket = fake_server(dir.path(), env!("CARGO_PKG_VERSION"));
    let frame = once_at(socket).await.expect("a frame");
    assert!(
        frame.contains("graph unavailable: content does not match its digest"),
        "{frame}"
    );
    assert!(frame.contains("run run-1 · demo · RUNNING"), "{frame}");
}

#[test]
fn the_settings_tab_reads_the_settings_once_per_change() {
    let mut app = app_with(ContentState::Ready(Arc::new(definition())));
    assert!(app.pending_loads().is_empty(), "nothing is read for a hidden tab");
    press(&mut app, KeyCode::Char('3'));
    assert!(matches!(app.pending_loads().as_slice(), [Command::LoadSettings]));
    assert!(app.pending_loads().is_empty(), "asked once");
    assert!(frame(&app).contains("reading the settings…"));
    let mut changed = document("sha256:00", "running", &["cancel", "pause"]);
    changed["run"]["settingsChangeNumber"] = json!(1);
    app.apply(Update::View {
        document: changed,
        definition: ContentState::Ready(Arc::new(definition())),
        full_reason: None,
    });
    assert!(
        matches!(app.pending_loads().as_slice(), [Command::LoadSettings]),
        "a new change is read again"
    );
    app.apply(Update::Settings {
        run_id: "run-1".into(),
        page: Ok(json!({"changeNumber": 1, "settings": {"reviewers": ["ann"]}, "paths": [], "changes": []})),
    });
    let text = frame(&app);
    assert!(
        text.contains("change 1") && text.contains(r#"{"reviewers":["ann"]}"#),
        "{text}"
    );
}

async fn once_at(socket: std::path::PathBuf) -> Result<String, piw::once::OnceError> {
    piw::once::once(piw::once::OnceOptions {
        endpoint: piw::connection::transport::Endpoint::Unix(socket),
        client_id: OpaqueId::new("piw-test").expect("id"),
        run_id: "run-1".into(),
        timeout_ms: 10_000,
        theme: Theme::default(),
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_of_another_version_is_a_protocol_error() {
    let dir = tempfile::Builder::new().prefix("piwf").tempdir_in("/tmp").expect("dir");
    let socket = fake_server(dir.path(), "0.0.0-other");
    let err = once_at(socket).await.expect_err("another version");
    assert_eq!(err.exit_code(), piw::exit::PROTOCOL, "{err}");
    assert!(err.to_string().contains("0.0.0-other"), "{err}");
}

#[test]
fn help_opens_with_a_question_mark_and_closes_with_escape() {
    let mut app = app_with(ContentState::Ready(Arc::new(definition())));
    press(&mut app, KeyCode::Char('?'));
    assert!(frame(&app).contains("Tab / Shift-Tab"));
    press(&mut app, KeyCode::Esc);
    assert!(!frame(&app).contains("Tab / Shift-Tab"));
    assert!(!app.quit);
}

#[test]
fn a_click_on_a_browser_row_selects_that_run() {
    let mut app = App::new(Theme::default(), None);
    let runs = json!({"items": [
        {"runId": "run-b", "workflowName": "second", "display": {"status": "running"}},
        {"runId": "run-a", "workflowName": "first", "display": {"status": "completed"}}]});
    assert_eq!(app.apply(Update::Runs(runs)), Some("run-b".to_string()));
    frame(&app);
    let browser = app.regions.get().browser;
    let click = crossterm::event::MouseEvent {
        kind: crossterm::event::MouseEventKind::Down(crossterm::event::MouseButton::Left),
        column: browser.x + 2,
        row: browser.y + 2,
        modifiers: KeyModifiers::NONE,
    };
    let sent = piw::ui::keys::on_mouse(&mut app, click);
    assert!(
        matches!(sent.as_slice(), [Command::Select(Some(id))] if id == "run-a"),
        "{sent:?}"
    );
    assert_eq!(app.selected_id(), Some("run-a"));
}

/// The first frame the live session's first view makes, from `view` on a fake server.
async fn live_frame_of(view: Value) -> String {
    let dir = tempfile::Builder::new().prefix("piwf").tempdir_in("/tmp").expect("dir");
    let socket = fake_server_with(dir.path(), env!("CARGO_PKG_VERSION"), view);
    let (updates_tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let (_commands, commands_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = piw::connection::session::SessionOptions {
        endpoint: piw::connection::transport::Endpoint::Unix(socket),
        start_in: None,
        client_id: OpaqueId::new("piw-test").expect("id"),
        watch_runs: false,
        selected: Some("run-1".into()),
    };
    let session = tokio::spawn(piw::connection::session::Session::new(options, updates_tx).run(commands_rx));
    let mut app = App::new(Theme::default(), Some("run-1"));
    let wait = std::time::Duration::from_secs(10);
    while app.view().is_none() {
        let update = tokio::time::timeout(wait, updates.recv())
            .await
            .expect("a view within 10 s");
        app.apply(update.expect("the session runs"));
    }
    session.abort();
    frame(&app)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_view_without_a_definition_reference_is_a_graph_error_in_the_live_session() {
    let mut view = document("sha256:00", "running", &[]);
    view["workflow"].as_object_mut().expect("workflow").remove("definition");
    let text = live_frame_of(view).await;
    assert!(
        text.contains("graph unavailable: the view names no workflow definition"),
        "{text}"
    );
    assert!(!text.contains("reading the workflow definition"), "{text}");
    assert!(text.contains("run run-1 · demo · RUNNING"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_definition_reference_of_another_digest_is_a_graph_error_in_the_live_session() {
    let mut view = document("sha256:00", "running", &[]);
    view["workflow"]["definition"]["digest"] = json!(digest_of(b"{}"));
    let text = live_frame_of(view).await;
    assert!(
        text.contains("graph unavailable: the definition reference sha256:")
            && text.contains("not the run's definition sha256:00"),
        "{text}"
    );
    assert!(!text.contains("reading the workflow definition"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn once_shows_the_same_errors_for_a_missing_or_mismatched_definition_reference() {
    let mut missing = document("sha256:00", "running", &[]);
    missing["workflow"]
        .as_object_mut()
        .expect("workflow")
        .remove("definition");
    let mut mismatched = document("sha256:00", "running", &[]);
    mismatched["workflow"]["definition"]["digest"] = json!(digest_of(b"{}"));
    for (view, error) in [
        (missing, "graph unavailable: the view names no workflow definition"),
        (
            mismatched,
            "graph unavailable: the definition reference is not the run's definition",
        ),
    ] {
        let dir = tempfile::Builder::new().prefix("piwf").tempdir_in("/tmp").expect("dir");
        let socket = fake_server_with(dir.path(), env!("CARGO_PKG_VERSION"), view);
        let text = once_at(socket).await.expect("a frame");
        assert!(text.contains(error), "{text}");
    }
}

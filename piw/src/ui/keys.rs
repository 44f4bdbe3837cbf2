//! Keys and mouse: each changes the app and may produce session commands. Controls go
//! through a confirmation first, and are offered only when the server's view lists them
//! and the connection is live (a stale view grants nothing).

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseEvent, MouseEventKind};
use pi_workflows::protocol::{JsonObject, Operation};
use serde_json::{Value, json};

use super::app::{App, Confirm, Overlay, Pane, Tab};
use crate::connection::client::new_id;
use crate::connection::session::{Command, ControlRequest, OlderKind};

/// Rows PgUp / PgDn move in the steps list, and scroll the attempt tab.
const PAGE_ROWS: usize = 10;

/// The key of a control the server offers (`None`: piw does not offer it).
pub fn control_key(control: &str) -> Option<char> {
    match control {
        "pause" => Some('p'),
        "resume" => Some('r'),
        "cancel" => Some('c'),
        // A checkpoint's answer or a protected decision's: a view offers one or the other.
        "answer" | "human-answer" => Some('a'),
        "restart" => Some('R'),
        _ => None,
    }
}

pub fn on_key(app: &mut App, key: KeyEvent) -> Vec<Command> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        app.quit = true;
        return Vec::new();
    }
    match app.overlay.take() {
        Some(Overlay::Help) => {
            if !matches!(key.code, KeyCode::Esc | KeyCode::Char('?' | 'q')) {
                app.overlay = Some(Overlay::Help);
            }
            Vec::new()
        }
        Some(Overlay::Confirm(confirm)) => on_confirm(app, confirm, key.code),
        Some(Overlay::Answer { input }) => on_answer(app, input, key.code),
        None => on_plain_key(app, key.code),
    }
}

fn on_confirm(app: &mut App, confirm: Confirm, code: KeyCode) -> Vec<Command> {
    match code {
        KeyCode::Char('y') | KeyCode::Enter if app.live() => {
            app.notice = Some(format!("sent {}…", confirm.request.operation.as_str()));
            vec![Command::Control(confirm.request)]
        }
        KeyCode::Char('y') | KeyCode::Enter => {
            app.notice = Some("not connected: nothing was sent".into());
            Vec::new()
        }
        KeyCode::Char('n') | KeyCode::Esc => {
            app.notice = Some("cancelled".into());
            Vec::new()
        }
        _ => {
            app.overlay = Some(Overlay::Confirm(confirm));
            Vec::new()
        }
    }
}

fn on_answer(app: &mut App, mut input: String, code: KeyCode) -> Vec<Command> {
    match code {
        KeyCode::Esc => return Vec::new(),
        KeyCode::Enter => {
            let decision = app.view().is_some_and(|view| view.offers("human-answer"));
            let answer = match decision {
                true => decision_response(&input),
                false => serde_json::from_str::<Value>(&input).unwrap_or(Value::String(input.clone())),
            };
            if let Some(request) = answer_request(app, answer.clone()) {
                let what = if decision { "decision" } else { "checkpoint" };
                let question = format!("Answer the {what} with {answer}?");
                app.overlay = Some(Overlay::Confirm(Confirm { question, request }));
            }
            return Vec::new();
        }
        KeyCode::Backspace => {
            input.pop();
        }
        KeyCode::Char(c) => input.push(c),
        _ => {}
    }
    app.overlay = Some(Overlay::Answer { input });
    Vec::new()
}

fn on_plain_key(app: &mut App, code: KeyCode) -> Vec<Command> {
    match code {
        KeyCode::Char('q') => app.quit = true,
        KeyCode::Char('?') => app.overlay = Some(Overlay::Help),
        KeyCode::Tab => app.focus = next_pane(app, 1),
        KeyCode::BackTab => app.focus = next_pane(app, -1),
        KeyCode::Char('b') if !app.pinned => app.show_browser = !app.show_browser,
        KeyCode::Char('T') => app.theme = app.theme.next(),
        KeyCode::Char('f') => app.follow = true,
        KeyCode::Char(digit @ '1'..='4') => return set_tab(app, Tab::ALL[digit as usize - '1' as usize]),
        KeyCode::Char('[') => return step_timeline(app, -1),
        KeyCode::Char(']') => return step_timeline(app, 1),
        KeyCode::Home => return timeline_start(app),
        KeyCode::End => timeline_live(app),
        KeyCode::Char(c) if control_of(app, c).is_some() => ask_control(app, c),
        KeyCode::Enter => return enter(app),
        _ => return move_in_pane(app, code),
    }
    Vec::new()
}

fn next_pane(app: &App, step: isize) -> Pane {
    let mut panes = vec![Pane::Graph, Pane::Inspector, Pane::Timeline];
    if app.show_browser {
        panes.insert(0, Pane::Browser);
    }
    let index = panes.iter().position(|pane| *pane == app.focus).unwrap_or(0) as isize;
    panes[(index + step).rem_euclid(panes.len() as isize) as usize]
}

fn set_tab(app: &mut App, tab: Tab) -> Vec<Command> {
    if app.tab != tab {
        app.detail_scroll = 0;
    }
    app.tab = tab;
    app.focus = Pane::Inspector;
    // The settings page itself is asked for by `App::pending_loads`.
    Vec::new()
}

fn enter(app: &mut App) -> Vec<Command> {
    match app.focus {
        Pane::Browser => app.focus = Pane::Graph,
        Pane::Inspector if app.tab == Tab::Steps => app.tab = Tab::Attempt,
        Pane::Inspector => app.tab = Tab::Steps,
        _ => {}
    }
    Vec::new()
}

fn move_in_pane(app: &mut App, code: KeyCode) -> Vec<Command> {
    let delta: isize = match code {
        KeyCode::Up | KeyCode::Char('k') => -1,
        KeyCode::Down | KeyCode::Char('j') => 1,
        KeyCode::Left | KeyCode::Char('h') => -1,
        KeyCode::Right | KeyCode::Char('l') => 1,
        KeyCode::PageUp => -(PAGE_ROWS as isize),
        KeyCode::PageDown => PAGE_ROWS as isize,
        _ => return Vec::new(),
    };
    let vertical = matches!(
        code,
        KeyCode::Up | KeyCode::Down | KeyCode::Char('k' | 'j') | KeyCode::PageUp | KeyCode::PageDown
    );
    let paging = matches!(code, KeyCode::PageUp | KeyCode::PageDown);
    match app.focus {
        Pane::Browser if vertical => move_browser(app, delta),
        Pane::Inspector if paging && app.tab != Tab::Steps => {
            scroll_details(app, delta);
            match code {
                KeyCode::PageDown => older_of_tab(app),
                _ => Vec::new(),
            }
        }
        Pane::Graph => {
            pan_graph(app, delta, vertical);
            Vec::new()
        }
        Pane::Inspector if vertical => move_step(app, delta),
        Pane::Inspector => {
            let index = Tab::ALL.iter().position(|tab| *tab == app.tab).unwrap_or(0) as isize;
            set_tab(
                app,
                Tab::ALL[(index + delta).rem_euclid(Tab::ALL.len() as isize) as usize],
            )
        }
        Pane::Timeline => step_timeline(app, delta),
        Pane::Browser => Vec::new(),
    }
}

pub fn move_browser(app: &mut App, delta: isize) -> Vec<Command> {
    if app.runs.is_empty() {
        return Vec::new();
    }
    let row = app.browser_row().map_or(0, |row| row as isize + delta);
    let row = row.clamp(0, app.runs.len() as isize - 1) as usize;
    let id = app.runs[row].run_id.clone();
    app.select(&id)
        .map(|id| vec![Command::Select(Some(id))])
        .unwrap_or_default()
}

fn pan_graph(app: &mut App, delta: isize, vertical: bool) {
    app.follow = false;
    let (column, row) = app.graph_offset;
    let moved = |value: usize| (value as isize + delta).max(0) as usize;
    app.graph_offset = if vertical {
        (column, moved(row))
    } else {
        (moved(column), row)
    };
}

/// Scroll the attempt tab (its output and error can be long); drawing clamps the end.
fn scroll_details(app: &mut App, delta: isize) {
    app.detail_scroll = (app.detail_scroll as isize + delta).clamp(0, u16::MAX as isize) as u16;
}

/// Move the steps selection; at the top with older attempts missing, ask for a page.
pub fn move_step(app: &mut App, delta: isize) -> Vec<Command> {
    app.detail_scroll = 0;
    let Some(selected) = app.selected.as_mut() else {
        return Vec::new();
    };
    if selected.attempts.is_empty() {
        return Vec::new();
    }
    let last = selected.attempts.len() - 1;
    let current = selected.step.and_then(|seq| selected.index_of(seq)).unwrap_or(last) as isize;
    let index = (current + delta).clamp(0, last as isize) as usize;
    selected.step = (index != last).then(|| selected.attempts.items()[index].seq);
    if current + delta < 0 {
        return older_page(selected);
    }
    Vec::new()
}

fn older_page(selected: &mut super::app::Selected) -> Vec<Command> {
    if !selected.attempts.has_gap() || selected.paging {
        return Vec::new();
    }
    selected.paging = true;
    vec![Command::LoadAttempts {
        after: selected.attempts.next_after,
    }]
}

/// The next older page of what the settings or updates tab lists, if any remains.
fn older_of_tab(app: &mut App) -> Vec<Command> {
    // Reads are not kept while disconnected: `PgDn` asks again once the connection is back.
    if !app.live() {
        return Vec::new();
    }
    let tab = app.tab;
    let Some(selected) = app.selected.as_mut() else {
        return Vec::new();
    };
    let (kind, pages) = match tab {
        Tab::Settings => (OlderKind::SettingsChanges, &mut selected.settings_changes),
        Tab::Updates => match selected.updates.request_id.clone() {
            Some(request_id) => (OlderKind::Updates { request_id }, &mut selected.updates.pages),
            None => return Vec::new(),
        },
        Tab::Steps | Tab::Attempt => return Vec::new(),
    };
    pages
        .take_next()
        .map(|before| Command::LoadOlder { kind, before })
        .into_iter()
        .collect()
}

fn step_timeline(app: &mut App, delta: isize) -> Vec<Command> {
    let Some(selected) = app.selected.as_mut() else {
        return Vec::new();
    };
    let count = selected.attempts.len();
    if count == 0 {
        return Vec::new();
    }
    let position = match selected.cursor {
        None => count as isize,
        Some(seq) => selected.index_of(seq).map_or(0, |index| index as isize + 1),
    };
    let target = (position + delta).clamp(1, count as isize) as usize;
    selected.cursor = (target < count).then(|| selected.attempts.items()[target - 1].seq);
    selected.refresh_states();
    if position + delta < 1 {
        return older_page(selected);
    }
    Vec::new()
}

fn timeline_start(app: &mut App) -> Vec<Command> {
    let Some(selected) = app.selected.as_mut() else {
        return Vec::new();
    };
    let Some(first) = selected.attempts.items().first().map(|a| a.seq) else {
        return Vec::new();
    };
    selected.cursor = Some(first);
    selected.refresh_states();
    older_page(selected)
}

fn timeline_live(app: &mut App) {
    if let Some(selected) = app.selected.as_mut() {
        selected.cursor = None;
        selected.refresh_states();
    }
}

/// The control a key asks for: of those sharing the key, the one the view offers.
fn control_of(app: &App, key: char) -> Option<&'static str> {
    let offered = |control: &str| app.view().is_some_and(|view| view.offers(control));
    let mut matching = ["pause", "resume", "cancel", "answer", "human-answer", "restart"]
        .into_iter()
        .filter(|control| control_key(control) == Some(key));
    let first = matching.next()?;
    Some(
        std::iter::once(first)
            .chain(matching)
            .find(|control| offered(control))
            .unwrap_or(first),
    )
}

/// A decision answer as typed: `<choice> [text]` (the rest of the line is the text).
fn decision_response(input: &str) -> Value {
    let typed = input.trim();
    match typed.split_once(char::is_whitespace) {
        Some((choice, text)) if !text.trim().is_empty() => json!({"choice": choice, "text": text.trim()}),
        Some((choice, _)) => json!({"choice": choice}),
        None => json!({"choice": typed}),
    }
}

/// Open the confirmation (or the answer input) for a control the server offers.
fn ask_control(app: &mut App, key: char) {
    let Some(control) = control_of(app, key) else { return };
    let Some(view) = app.view() else { return };
    if !app.live() {
        app.notice = Some(format!("{control}: not connected; a stale view grants no controls"));
        return;
    }
    if !view.offers(control) {
        app.notice = Some(format!("{control} is not offered for this run now"));
        return;
    }
    let run_id = view.run_id.clone();
    let (operation, payload) = match control {
        "answer" | "human-answer" => {
            app.overlay = Some(Overlay::Answer { input: String::new() });
            return;
        }
        "pause" => (Operation::RunPause, JsonObject::new()),
        "resume" => (Operation::RunResume, JsonObject::new()),
        "cancel" => (Operation::RunCancel, JsonObject::new()),
        _ => {
            let mut payload = JsonObject::new();
            payload.insert("newRunId".into(), json!(new_id("run").as_str()));
            (Operation::RunRestart, payload)
        }
    };
    let request = ControlRequest {
        operation,
        run_id: run_id.clone(),
        payload,
        key: new_id("piw-key"),
    };
    let question = format!("{} run {run_id}?", capitalized(control));
    app.overlay = Some(Overlay::Confirm(Confirm { question, request }));
}

fn answer_request(app: &App, answer: Value) -> Option<ControlRequest> {
    let view = app.view()?;
    let mut payload = JsonObject::new();
    payload.insert("answer".into(), answer);
    if let Some(request) = &view.display.request {
        // Binds the answer to the request the user saw.
        payload.insert("requestId".into(), json!(request.request_id));
    }
    let operation = match view.offers("human-answer") {
        true => Operation::DecisionAnswer,
        false => Operation::CheckpointAnswer,
    };
    Some(ControlRequest {
        operation,
        run_id: view.run_id.clone(),
        payload,
        key: new_id("piw-key"),
    })
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map_or(String::new(), |first| first.to_uppercase().chain(chars).collect())
}

/// Mouse: the wheel moves in the pane under the pointer; a click on a run selects it.
pub fn on_mouse(app: &mut App, mouse: MouseEvent) -> Vec<Command> {
    let regions = app.regions.get();
    let at = ratatui::layout::Position::new(mouse.column, mouse.row);
    let delta = match mouse.kind {
        MouseEventKind::ScrollUp => -1,
        MouseEventKind::ScrollDown => 1,
        MouseEventKind::Down(_) => {
            if regions.browser.contains(at) {
                app.focus = Pane::Browser;
                if let Some(id) = super::browser::run_at(app, mouse.row) {
                    return app
                        .select(&id)
                        .map(|id| vec![Command::Select(Some(id))])
                        .unwrap_or_default();
                }
            }
            for (rect, pane) in [
                (regions.graph, Pane::Graph),
                (regions.inspector, Pane::Inspector),
                (regions.timeline, Pane::Timeline),
            ] {
                if rect.contains(at) {
                    app.focus = pane;
                }
            }
            return Vec::new();
        }
        _ => return Vec::new(),
    };
    if regions.browser.contains(at) {
        move_browser(app, delta)
    } else if regions.inspector.contains(at) {
        move_step(app, delta)
    } else if regions.graph.contains(at) {
        pan_graph(app, delta, true);
        Vec::new()
    } else {
        Vec::new()
    }
}

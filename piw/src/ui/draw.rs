//! The frame: header (run, status, connection), the browser beside the run view (graph,
//! inspector, timeline), a footer of keys and notices, and overlays (help, confirmation,
//! answer input). The same function draws the TUI and `--once`.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use super::app::{App, Overlay, Pane, Regions, duration, safe};
use super::{browser, graph, inspector, timeline};
use crate::connection::session::Link;

/// Width of the run browser beside the run view.
pub const BROWSER_WIDTH: u16 = 46;
/// Rows of the inspector (borders included).
pub const INSPECTOR_ROWS: u16 = 14;
/// Rows of the timeline (borders included).
pub const TIMELINE_ROWS: u16 = 4;
const HEADER_ROWS: u16 = 2;
const FOOTER_ROWS: u16 = 1;
/// Width of the help, confirmation and answer boxes.
const OVERLAY_WIDTH: u16 = 84;

pub fn draw(frame: &mut Frame<'_>, app: &App) {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(HEADER_ROWS),
        Constraint::Min(0),
        Constraint::Length(FOOTER_ROWS),
    ])
    .areas(frame.area());
    frame.render_widget(Block::new().style(app.theme.text), frame.area());
    draw_header(frame, app, header);
    let mut regions = Regions::default();
    let main = if app.show_browser {
        let [left, right] = Layout::horizontal([Constraint::Length(BROWSER_WIDTH), Constraint::Min(0)]).areas(body);
        browser::draw(frame, app, left);
        regions.browser = left;
        right
    } else {
        body
    };
    draw_run(frame, app, main, &mut regions);
    app.regions.set(regions);
    draw_footer(frame, app, footer);
    draw_overlay(frame, app);
}

fn draw_run(frame: &mut Frame<'_>, app: &App, area: Rect, regions: &mut Regions) {
    let Some(selected) = app.selected.as_ref() else {
        let text = if app.runs_loaded {
            "no run selected"
        } else {
            "waiting for the run list…"
        };
        frame.render_widget(pane_block(app, Pane::Graph, "run").title(text), area);
        return;
    };
    let [graph_area, inspector_area, timeline_area] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(INSPECTOR_ROWS),
        Constraint::Length(TIMELINE_ROWS),
    ])
    .areas(area);
    graph::draw(frame, app, selected, graph_area);
    inspector::draw(frame, app, selected, inspector_area);
    timeline::draw(frame, app, selected, timeline_area);
    regions.graph = graph_area;
    regions.inspector = inspector_area;
    regions.timeline = timeline_area;
}

/// A pane's border, bold when it has the focus.
pub fn pane_block<'a>(app: &App, pane: Pane, title: &'a str) -> Block<'a> {
    let style = if app.focus == pane {
        app.theme.border_focused
    } else {
        app.theme.border
    };
    Block::bordered()
        .border_style(style)
        .title(Span::styled(format!(" {title} "), app.theme.title))
}

fn link_span(app: &App) -> Span<'static> {
    match &app.link {
        Link::Connected => Span::styled("● live", app.theme.ok),
        Link::Connecting => Span::styled("◌ connecting", app.theme.warn),
        Link::Reconnecting { attempt, .. } => Span::styled(
            format!("◌ reconnecting (attempt {attempt}) · stale view, no controls"),
            app.theme.warn,
        ),
        Link::Disconnected { .. } => Span::styled("✗ disconnected · stale view, no controls", app.theme.error),
    }
}

fn draw_header(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let theme = &app.theme;
    let mut first = vec![Span::styled("piw", theme.title), Span::raw("  ")];
    let mut second = Vec::new();
    match (app.selected.as_ref(), app.view()) {
        (Some(_), Some(view)) => {
            let end = view.run.finished_at.unwrap_or(app.now_ms);
            first.extend([
                Span::styled(format!("run {}", safe(&view.run_id)), theme.text),
                Span::raw(" · "),
                Span::styled(safe(&view.workflow.name), theme.title),
                Span::raw(" · "),
                Span::styled(view.display.status.to_uppercase(), theme.status(&view.display.status)),
                Span::styled(activity(view), theme.dim),
                Span::raw(format!(" · elapsed {}", duration(end - view.run.created_at))),
                Span::styled(format!(" · rev {}  ", view.revision), theme.dim),
            ]);
            second.push(Span::styled(controls_text(app, view), theme.dim));
            if let Some(next) = &view.run.continued_as {
                second.push(Span::styled(
                    format!("  continues as run {} (piw {})", safe(next), safe(next)),
                    theme.warn,
                ));
            }
            if let Some(reason) = &view.display.reason {
                second.push(Span::styled(
                    format!("  reason {}: {}", safe(&reason.code), safe(&reason.message)),
                    theme.error,
                ));
            }
        }
        (Some(selected), None) => {
            first.push(Span::raw(format!("run {}  ", safe(&selected.run_id))));
            let text = match (&selected.gone, &selected.view_error) {
                (Some(gone), _) => format!("unavailable: {}", safe(gone)),
                (None, Some(err)) => err.clone(),
                (None, None) => "waiting for the run view…".to_string(),
            };
            second.push(Span::styled(text, theme.warn));
        }
        (None, _) => first.push(Span::raw("runs  ")),
    }
    first.push(link_span(app));
    let lines = vec![Line::from(first), Line::from(second)];
    frame.render_widget(Paragraph::new(lines), area);
}

fn activity(view: &crate::model::view::RunView) -> String {
    match (view.display.activity.kind.as_str(), &view.display.activity.state) {
        ("worker", Some(state)) => format!(" (runner {})", safe(state)),
        ("originTurn", _) => " (Pi turn)".to_string(),
        _ => String::new(),
    }
}

/// The server's controls with their keys; none while the view is stale.
fn controls_text(app: &App, view: &crate::model::view::RunView) -> String {
    if !app.live() {
        return "controls: none while not connected".to_string();
    }
    let keyed: Vec<String> = view
        .display
        .controls
        .iter()
        .map(|control| match super::keys::control_key(control) {
            Some(key) => format!("[{key}] {control}"),
            None => control.clone(),
        })
        .collect();
    if keyed.is_empty() {
        "controls: none".to_string()
    } else {
        format!("controls: {}", keyed.join("  "))
    }
}

fn draw_footer(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let hints = "q quit · ? help · Tab pane · ↑↓←→/hjkl move · Enter open · [ ] step · End live";
    let line = match &app.notice {
        Some(notice) => Line::from(vec![
            Span::styled(safe(notice), app.theme.info),
            Span::styled(format!("  ·  {hints}"), app.theme.dim),
        ]),
        None => Line::from(Span::styled(hints, app.theme.dim)),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// Help text, one key per line.
pub const HELP: &[&str] = &[
    "Tab / Shift-Tab   next / previous pane",
    "↑↓ / j k          move in the pane (runs, steps)",
    "← → / h l         pan the graph · switch inspector tab · step the timeline",
    "Enter             open the run · show the attempt",
    "1 2 3 4           inspector: steps, attempt, settings, updates",
    "[ ]  Home  End    timeline: previous, next, first, live",
    "PgUp PgDn         steps: page (older attempts load on demand) · attempt tab: scroll",
    "f                 follow the current node in the graph",
    "b                 show / hide the run browser",
    "p r c a R         pause, resume, cancel, answer, restart (confirmed first)",
    "T                 next theme",
    "q / Ctrl-C        quit (Esc closes this help)",
];

fn draw_overlay(frame: &mut Frame<'_>, app: &App) {
    let Some(overlay) = &app.overlay else { return };
    let (title, lines): (&str, Vec<Line<'_>>) = match overlay {
        Overlay::Help => ("help", HELP.iter().map(|line| Line::raw(*line)).collect()),
        Overlay::Confirm(confirm) => (
            "confirm",
            vec![
                Line::styled(confirm.question.clone(), app.theme.warn),
                Line::raw(""),
                Line::raw("y / Enter: yes    n / Esc: no"),
            ],
        ),
        Overlay::Answer { input } if app.view().is_some_and(|view| view.offers("human-answer")) => (
            "answer the decision",
            vec![
                Line::raw("Type a choice, then the text if it takes one (`pi-workflows run status` lists them):"),
                Line::styled(format!("> {input}▏"), app.theme.highlight),
                Line::raw(""),
                Line::raw("Enter: review and confirm    Esc: cancel"),
            ],
        ),
        Overlay::Answer { input } => (
            "answer the checkpoint",
            vec![
                Line::raw("Type the answer (JSON; anything else is sent as a string):"),
                Line::styled(format!("> {input}▏"), app.theme.highlight),
                Line::raw(""),
                Line::raw("Enter: review and confirm    Esc: cancel"),
            ],
        ),
    };
    let area = centered(frame.area(), OVERLAY_WIDTH, lines.len() as u16 + 2);
    frame.render_widget(Clear, area);
    let block = Block::bordered()
        .border_style(app.theme.border_focused)
        .title(Span::styled(format!(" {title} "), app.theme.title))
        .style(app.theme.text);
    frame.render_widget(Paragraph::new(lines).block(block).wrap(Wrap { trim: false }), area);
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

/// A one-line status word with its theme style.
pub fn status_span(app: &App, status: &str) -> Span<'static> {
    Span::styled(safe(status), app.theme.status(status))
}

/// Cut `text` to `width` characters with an ellipsis.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

pub fn plain(style: Style, text: String) -> Span<'static> {
    Span::styled(text, style)
}

//! The inspector: the run's attempts (steps, paged), the selected attempt's details, the
//! run's settings and the pending step's updates. Only visible rows are built, so ten
//! thousand attempts cost what one screen shows.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Tabs, Wrap};

use super::app::{App, Pane, Selected, Tab, duration, safe};
use super::draw::{fit, pane_block, status_span};
use super::graph::mark;
use crate::model::view::Attempt;

/// Columns of a node path in the steps list.
const PATH_COLUMNS: usize = 28;
const TYPE_COLUMNS: usize = 10;
/// Bytes of the settings JSON shown (the rest is cut with a notice).
const SETTINGS_TEXT_BYTES_MAX: usize = 4_096;

pub fn draw(frame: &mut Frame<'_>, app: &App, selected: &Selected, area: Rect) {
    let block = pane_block(app, Pane::Inspector, "inspector");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [tabs_area, body] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
    let index = Tab::ALL.iter().position(|tab| *tab == app.tab).unwrap_or(0);
    let tabs = Tabs::new(Tab::ALL.iter().map(|tab| tab.label()))
        .select(index)
        .style(app.theme.dim)
        .highlight_style(app.theme.selected);
    frame.render_widget(tabs, tabs_area);
    let lines = match app.tab {
        Tab::Steps => steps(app, selected, body.height as usize),
        Tab::Attempt => attempt_details(app, selected),
        Tab::Settings => settings(app, selected),
        Tab::Updates => updates(app),
    };
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), body);
}

fn steps(app: &App, selected: &Selected, rows: usize) -> Vec<Line<'static>> {
    let attempts = &selected.attempts;
    let mut lines = vec![Line::styled(
        format!(
            "{} of {} attempts loaded{}",
            attempts.len(),
            attempts.total,
            if attempts.has_gap() {
                " · PgUp at the top loads older ones"
            } else {
                ""
            }
        ),
        app.theme.dim,
    )];
    if attempts.is_empty() {
        lines.push(Line::styled("no attempts yet", app.theme.dim));
        return lines;
    }
    let shown = rows.saturating_sub(1).max(1);
    let current = selected
        .step
        .and_then(|seq| selected.index_of(seq))
        .unwrap_or(attempts.len() - 1);
    let first = (current + 1).saturating_sub(shown);
    for (index, attempt) in attempts.items()[first..].iter().take(shown).enumerate() {
        let mut line = step_line(app, attempt);
        if first + index == current {
            line = line.style(app.theme.selected);
        }
        lines.push(line);
    }
    lines
}

fn step_line(app: &App, attempt: &Attempt) -> Line<'static> {
    let timing = match attempt.finished_at {
        Some(end) => duration(end - attempt.started_at),
        None => format!("for {}", duration(app.now_ms - attempt.started_at)),
    };
    Line::from(vec![
        Span::raw(format!("{} ", mark(&attempt.status))),
        Span::raw(format!(
            "{:<PATH_COLUMNS$} ",
            fit(&safe(&attempt.node_path), PATH_COLUMNS)
        )),
        Span::styled(
            format!("{:<TYPE_COLUMNS$} ", fit(&safe(&attempt.node_type), TYPE_COLUMNS)),
            app.theme.dim,
        ),
        status_span(app, &format!("{:<12}", attempt.status)),
        Span::styled(timing, app.theme.dim),
    ])
}

fn attempt_details(app: &App, selected: &Selected) -> Vec<Line<'static>> {
    let Some(attempt) = selected.step_attempt() else {
        return vec![Line::styled("no attempt selected", app.theme.dim)];
    };
    let field = |name: &str, value: String| {
        Line::from(vec![
            Span::styled(format!("{name:<10}"), app.theme.dim),
            Span::raw(value),
        ])
    };
    let mut lines = vec![
        Line::from(vec![
            Span::styled(format!("{:<10}", "node"), app.theme.dim),
            Span::styled(safe(&attempt.node_path), app.theme.title),
            Span::raw(format!("  ({}, visit {})", safe(&attempt.node_type), attempt.visit)),
        ]),
        Line::from(vec![
            Span::styled(format!("{:<10}", "status"), app.theme.dim),
            status_span(app, &attempt.status),
        ]),
        field(
            "attempt",
            format!("{} (seq {})", safe(&attempt.attempt_id), attempt.seq),
        ),
        field("started", format!("{} ago", duration(app.now_ms - attempt.started_at))),
        field(
            "finished",
            attempt.finished_at.map_or("not yet".into(), |end| {
                format!("after {}", duration(end - attempt.started_at))
            }),
        ),
    ];
    lines.extend(reason_lines(app, selected, attempt));
    lines.push(field(
        "output",
        "not part of run-view.v1 (the server pages no attempt outputs yet)".into(),
    ));
    lines
}

/// The run's reason (and pending request) on the attempt it concerns: the one the display
/// names, or the newest attempt of an ended run.
fn reason_lines(app: &App, selected: &Selected, attempt: &Attempt) -> Vec<Line<'static>> {
    let Some(view) = app.view() else { return Vec::new() };
    let display = &view.display;
    let named = [&display.current_node, &display.waiting_on]
        .into_iter()
        .flatten()
        .any(|node| node.attempt_id == attempt.attempt_id);
    let newest = selected.attempts.items().last().map(|a| a.seq) == Some(attempt.seq);
    let mut lines = Vec::new();
    if let Some(request) = display.request.as_ref().filter(|_| named) {
        lines.push(Line::raw(format!(
            "request   {} ({})",
            safe(&request.request_id),
            safe(&request.kind)
        )));
    }
    if let Some(reason) = display.reason.as_ref().filter(|_| named || newest) {
        let message = match &selected.full_reason {
            Some(Ok(full)) => full.clone(),
            Some(Err(err)) => format!("{} (complete reason unavailable: {err})", reason.message),
            None => reason.message.clone(),
        };
        lines.push(Line::styled(
            format!("reason    {}: {}", safe(&reason.code), safe(&message)),
            app.theme.error,
        ));
    }
    lines
}

fn settings(app: &App, selected: &Selected) -> Vec<Line<'static>> {
    let page = match &selected.settings {
        None => return vec![Line::styled("reading the settings…", app.theme.dim)],
        Some(Err(err)) => {
            return vec![Line::styled(
                format!("settings unavailable: {}", safe(err)),
                app.theme.warn,
            )];
        }
        Some(Ok(page)) => page,
    };
    let mut lines = vec![Line::raw(format!("change {}", page["changeNumber"]))];
    let text = serde_json::to_string(&page["settings"]).unwrap_or_default();
    lines.push(Line::raw(safe(&fit(&text, SETTINGS_TEXT_BYTES_MAX))));
    let paths: Vec<String> = page["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|path| format!("{} {}", path["path"].as_str().unwrap_or("?"), path["allow"]))
        .collect();
    if !paths.is_empty() {
        lines.push(Line::styled(
            format!("changeable: {}", safe(&paths.join(", "))),
            app.theme.dim,
        ));
    }
    for change in page["changes"].as_array().into_iter().flatten() {
        lines.push(Line::styled(
            format!("  #{} by {}", change["number"], change["actor"].as_str().unwrap_or("?")),
            app.theme.dim,
        ));
    }
    lines
}

fn updates(app: &App) -> Vec<Line<'static>> {
    let request = app.view().and_then(|view| view.display.request.as_ref());
    let Some(request) = request.filter(|request| !request.updates.is_empty()) else {
        return vec![Line::styled("no updates from a pending step", app.theme.dim)];
    };
    request
        .updates
        .iter()
        .map(|update| {
            let data = update
                .data_json
                .clone()
                .unwrap_or_else(|| format!("({} bytes, not inlined)", update.data_bytes));
            Line::raw(safe(&format!(
                "#{} {}/{}: {}",
                update.seq, update.update_type, update.key, data
            )))
        })
        .collect()
}

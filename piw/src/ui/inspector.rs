//! The inspector: the run's attempts (steps, paged), the selected attempt's details (status,
//! timing, the run's reason where it belongs, and its output and error, read on demand by
//! reference and scrolled with PgUp / PgDn), the run's settings and the pending step's
//! updates. Only visible rows are built, so ten thousand attempts cost what one screen shows.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Tabs, Wrap};

use super::app::{App, Pane, Selected, Tab, duration, safe, value_key};
use super::draw::{fit, pane_block, status_span};
use super::graph::mark;
use crate::connection::content::ContentRef;
use crate::model::older::OlderPages;
use crate::model::values::ValueState;
use crate::model::view::Attempt;

/// Columns of a node path in the steps list.
const PATH_COLUMNS: usize = 28;
const TYPE_COLUMNS: usize = 10;
/// Bytes of the settings JSON shown (the rest is cut with a notice).
const SETTINGS_TEXT_BYTES_MAX: usize = 4_096;
/// Characters of a value's digest shown in its header (`sha256:` and the first hex digits).
const DIGEST_SHOWN_CHARS: usize = 19;

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
        Tab::Updates => updates(app, selected),
    };
    // Every tab but the steps list scrolls; the last line stays in sight however far.
    let scroll = match app.tab {
        Tab::Steps => 0,
        _ => app.detail_scroll.min(lines.len().saturating_sub(1) as u16),
    };
    let paragraph = Paragraph::new(lines).wrap(Wrap { trim: false }).scroll((scroll, 0));
    frame.render_widget(paragraph, body);
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
    let mut lines = vec![
        Line::from(vec![
            label(app, "node"),
            Span::styled(safe(&attempt.node_path), app.theme.title),
            Span::raw(format!("  ({}, visit {})  ", safe(&attempt.node_type), attempt.visit)),
            status_span(app, &attempt.status),
        ]),
        field(
            app,
            "attempt",
            format!("{} (seq {})", safe(&attempt.attempt_id), attempt.seq),
        ),
        field(app, "timing", timing(app, attempt)),
    ];
    lines.extend(reason_lines(app, selected, attempt));
    let values = [("output", &attempt.output_ref), ("error", &attempt.error_ref)];
    for (name, reference) in values {
        if let Some(reference) = reference {
            lines.extend(value_lines(app, selected, name, reference));
        }
    }
    if attempt.output_ref.is_none() && attempt.error_ref.is_none() {
        let none = match attempt.finished_at {
            Some(_) => "none recorded",
            None => "not yet (the attempt has not finished)",
        };
        lines.push(field(app, "output", none.into()));
    }
    lines
}

fn label(app: &App, name: &str) -> Span<'static> {
    Span::styled(format!("{name:<10}"), app.theme.dim)
}

fn field(app: &App, name: &str, value: String) -> Line<'static> {
    Line::from(vec![label(app, name), Span::raw(value)])
}

fn timing(app: &App, attempt: &Attempt) -> String {
    let started = format!("started {} ago", duration(app.now_ms - attempt.started_at));
    match attempt.finished_at {
        Some(end) => format!("{started} · took {}", duration(end - attempt.started_at)),
        None => format!("{started} · running for {}", duration(app.now_ms - attempt.started_at)),
    }
}

/// One referenced value (`output` or `error`): a header with its size and digest, then its
/// pretty JSON, or why it is not shown (a section error; never an endless "reading").
fn value_lines(app: &App, selected: &Selected, name: &str, reference: &serde_json::Value) -> Vec<Line<'static>> {
    let style = if name == "error" {
        app.theme.error
    } else {
        app.theme.text
    };
    let Some(reference) = ContentRef::from_value(reference) else {
        return vec![Line::styled(
            format!("{name:<10}unavailable: the view's reference is incomplete (digest, mediaType, byteLength)"),
            app.theme.warn,
        )];
    };
    let digest: String = reference.digest.chars().take(DIGEST_SHOWN_CHARS).collect();
    let mut lines = vec![Line::from(vec![
        label(app, name),
        Span::styled(format!("{} bytes · {digest}…", reference.byte_length), app.theme.dim),
    ])];
    match selected.values.get(&value_key(&reference)) {
        None if !app.live() => lines.push(Line::styled(
            "  not read: not connected (read once the connection is back)",
            app.theme.warn,
        )),
        None | Some(ValueState::Loading) => lines.push(Line::styled("  reading…", app.theme.dim)),
        Some(ValueState::Failed(err)) => lines.push(Line::styled(
            format!("  {name} unavailable: {}", safe(err)),
            app.theme.warn,
        )),
        Some(ValueState::Ready(text)) => {
            lines.extend(
                text.lines
                    .iter()
                    .map(|line| Line::styled(format!("  {}", safe(line)), style)),
            );
            if let Some(cut) = &text.cut {
                lines.push(Line::styled(format!("  {cut}"), app.theme.dim));
            }
        }
    }
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
    let first = page["changes"].as_array().into_iter().flatten();
    for change in first.chain(&selected.settings_changes.items) {
        lines.push(Line::styled(
            format!(
                "  #{} by {}",
                change["changeNumber"],
                safe(change["actor"].as_str().unwrap_or("?"))
            ),
            app.theme.dim,
        ));
    }
    lines.extend(older_line(app, &selected.settings_changes, "changes"));
    lines
}

/// Where older pages stand: reading, failed, or more to read with `PgDn`.
fn older_line(app: &App, pages: &OlderPages, what: &str) -> Option<Line<'static>> {
    if pages.loading {
        return Some(Line::styled(format!("reading older {what}…"), app.theme.dim));
    }
    if let Some(err) = &pages.error {
        return Some(Line::styled(
            format!("older {what} unavailable: {} (PgDn tries again)", safe(err)),
            app.theme.warn,
        ));
    }
    pages
        .has_more()
        .then(|| Line::styled(format!("PgDn reads older {what}"), app.theme.dim))
}

fn updates(app: &App, selected: &Selected) -> Vec<Line<'static>> {
    let seen = selected.updates.newest_first();
    if seen.is_empty() {
        return vec![Line::styled("no updates from a pending step", app.theme.dim)];
    }
    let mut lines = vec![Line::styled(
        format!("{} updates, newest first (PgUp / PgDn scroll)", seen.len()),
        app.theme.dim,
    )];
    lines.extend(seen.into_iter().map(|update| {
        let data = update
            .data_json
            .clone()
            .unwrap_or_else(|| format!("({} bytes, not inlined)", update.data_bytes));
        Line::raw(safe(&format!(
            "#{} {}/{}: {}",
            update.seq, update.update_type, update.key, data
        )))
    }));
    lines.extend(older_line(app, &selected.updates.pages, "updates"));
    lines
}

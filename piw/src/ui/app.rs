//! The TUI's state and how updates from the session change it. Drawing (`draw.rs` and the
//! pane modules) only reads this; keys (`keys.rs`) change it and produce session commands.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use ratatui::layout::Rect;
use serde_json::Value;

use super::theme::Theme;
use crate::connection::content::ContentRef;
use crate::connection::session::{Command, ContentState, ControlRequest, Link, OlderKind, OlderPage, Update};
use crate::model::attempts::Attempts;
use crate::model::graph::Graph;
use crate::model::older::{OlderPages, StepUpdates};
use crate::model::values::{AttemptValues, ValueKey};
use crate::model::view::{Attempt, RunItem, RunView, run_items};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Browser,
    Graph,
    Inspector,
    Timeline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Steps,
    Attempt,
    Settings,
    Updates,
}

impl Tab {
    pub const ALL: [Tab; 4] = [Tab::Steps, Tab::Attempt, Tab::Settings, Tab::Updates];

    pub fn label(self) -> &'static str {
        match self {
            Tab::Steps => "1 Steps",
            Tab::Attempt => "2 Attempt",
            Tab::Settings => "3 Settings",
            Tab::Updates => "4 Updates",
        }
    }
}

/// A control waiting for the user's confirmation.
#[derive(Debug, Clone)]
pub struct Confirm {
    pub question: String,
    pub request: ControlRequest,
}

#[derive(Debug, Clone)]
pub enum Overlay {
    Help,
    Confirm(Confirm),
    /// Typing a checkpoint answer (JSON, or else sent as a string).
    Answer {
        input: String,
    },
}

/// The graph section: built from hydrated content or showing why it cannot be.
#[derive(Debug, Clone)]
pub enum GraphState {
    Loading,
    Ready(Arc<Graph>),
    Failed(String),
}

/// Everything about the selected run.
#[derive(Debug, Clone)]
pub struct Selected {
    pub run_id: String,
    pub view: Option<RunView>,
    pub view_error: Option<String>,
    pub graph: GraphState,
    /// The digest the graph was built from (rebuilt only when it changes).
    graph_digest: Option<String>,
    pub full_reason: Option<Result<String, String>>,
    pub attempts: Attempts,
    /// Node path → its newest attempt up to the timeline cursor.
    pub states: HashMap<String, Attempt>,
    /// The timeline cursor: the seq of the last attempt shown; `None` is live.
    pub cursor: Option<i64>,
    /// The attempt selected in the steps list; `None` follows the newest.
    pub step: Option<i64>,
    pub settings: Option<Result<Value, String>>,
    /// The settings change number the last settings read was asked for.
    settings_for: Option<Option<i64>>,
    /// Settings changes older than the settings page's own (`PgDn` on the settings tab).
    pub settings_changes: OlderPages,
    /// The pending step's updates: the view's newest and older pages (`PgDn` on the tab).
    pub updates: StepUpdates,
    pub gone: Option<String>,
    /// A page request is on its way (one at a time).
    pub paging: bool,
    /// Outputs and errors read for the attempt tab, by reference.
    pub values: AttemptValues,
}

impl Selected {
    pub fn new(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            view: None,
            view_error: None,
            graph: GraphState::Loading,
            graph_digest: None,
            full_reason: None,
            attempts: Attempts::default(),
            states: HashMap::new(),
            cursor: None,
            step: None,
            settings: None,
            settings_for: None,
            settings_changes: OlderPages::default(),
            updates: StepUpdates::default(),
            gone: None,
            paging: false,
            values: AttemptValues::default(),
        }
    }

    /// Index of `seq` among the loaded attempts (the nearest earlier one if it is gone).
    pub fn index_of(&self, seq: i64) -> Option<usize> {
        let items = self.attempts.items();
        match items.binary_search_by_key(&seq, |a| a.seq) {
            Ok(index) => Some(index),
            Err(0) => None,
            Err(index) => Some(index - 1),
        }
    }

    /// Recompute node states for the cursor (once per change, not per frame).
    pub fn refresh_states(&mut self) {
        let upto = match self.cursor {
            None => self.attempts.len(),
            Some(seq) => self.index_of(seq).map_or(0, |index| index + 1),
        };
        self.states = self.attempts.node_states(upto);
    }

    /// The selected attempt of the steps list.
    pub fn step_attempt(&self) -> Option<&Attempt> {
        match self.step {
            Some(seq) => self.index_of(seq).and_then(|index| self.attempts.get(index)),
            None => self.attempts.items().last(),
        }
    }

    fn apply_view(&mut self, document: &Value, definition: ContentState, full_reason: Option<ContentState>) {
        match RunView::from_document(document) {
            Ok(view) => {
                self.attempts.total = view.history.total;
                self.attempts.merge(view.history_in_order());
                if view.history.older_before.is_none() {
                    self.attempts.joined = true;
                }
                self.set_graph(&view, definition);
                self.updates.see_view(view.display.request.as_ref());
                self.view = Some(view);
                self.view_error = None;
            }
            Err(err) => self.view_error = Some(format!("the server's view could not be read: {err}")),
        }
        self.full_reason = full_reason.map(|state| match state {
            ContentState::Ready(value) => Ok(value["message"].as_str().unwrap_or_default().to_string()),
            ContentState::Failed(err) => Err(err),
            ContentState::Loading => Err("loading".into()),
        });
        self.refresh_states();
    }

    fn set_graph(&mut self, view: &RunView, definition: ContentState) {
        let digest = view.workflow.definition_digest.clone();
        self.graph = match definition {
            ContentState::Ready(value) => {
                if self.graph_digest.as_ref() == Some(&digest)
                    && let GraphState::Ready(graph) = &self.graph
                {
                    GraphState::Ready(graph.clone())
                } else {
                    self.graph_digest = Some(digest);
                    match Graph::from_definition(&value) {
                        Ok(graph) => GraphState::Ready(Arc::new(graph)),
                        Err(err) => GraphState::Failed(err.to_string()),
                    }
                }
            }
            ContentState::Failed(err) => GraphState::Failed(err),
            ContentState::Loading => GraphState::Loading,
        };
    }

    fn finish_older(&mut self, kind: &OlderKind, page: OlderPage) {
        match kind {
            OlderKind::SettingsChanges => self.settings_changes.finish(page),
            OlderKind::Updates { request_id } if self.updates.request_id.as_ref() == Some(request_id) => {
                self.updates.finish(page);
            }
            // A page of a request that is no longer pending.
            OlderKind::Updates { .. } => {}
        }
    }

    /// Older pages in flight are lost with the connection: `PgDn` asks again.
    fn forget_older_loading(&mut self) {
        self.settings_changes.loading = false;
        self.updates.pages.loading = false;
    }

    fn apply_page(&mut self, items: &[Value], next_after: Option<i64>) {
        self.paging = false;
        let window_start = self.view.as_ref().and_then(|v| v.history.older_before);
        let page: Vec<Attempt> = items
            .iter()
            .filter_map(|item| serde::Deserialize::deserialize(item).ok())
            .collect();
        let reached = page.last().map(|a: &Attempt| a.seq);
        self.attempts.merge(page);
        self.attempts.next_after = next_after;
        let joined = next_after.is_none() || matches!((reached, window_start), (Some(r), Some(w)) if r >= w);
        self.attempts.joined |= joined;
        self.refresh_states();
    }
}

/// Where panes were drawn (for mouse clicks and scrolls).
#[derive(Debug, Clone, Copy, Default)]
pub struct Regions {
    pub browser: Rect,
    pub graph: Rect,
    pub inspector: Rect,
    pub timeline: Rect,
}

pub struct App {
    pub theme: Theme,
    pub link: Link,
    pub runs: Vec<RunItem>,
    pub runs_loaded: bool,
    pub show_browser: bool,
    /// `piw <runId>`: the run stays selected whatever the run list does.
    pub pinned: bool,
    pub selected: Option<Selected>,
    pub focus: Pane,
    pub tab: Tab,
    pub overlay: Option<Overlay>,
    pub notice: Option<String>,
    /// Why the session ended, with the exit code.
    pub fatal: Option<(String, u8)>,
    /// Graph pan in cards (columns, rows); `follow` keeps the highlighted node in sight.
    pub graph_offset: (usize, usize),
    pub follow: bool,
    /// First row of the attempt tab shown (PgUp / PgDn scroll it; a new attempt resets it).
    pub detail_scroll: u16,
    pub quit: bool,
    pub now_ms: i64,
    pub regions: Cell<Regions>,
}

impl App {
    pub fn new(theme: Theme, pinned: Option<&str>) -> Self {
        Self {
            theme,
            link: Link::Connecting,
            runs: Vec::new(),
            runs_loaded: false,
            show_browser: pinned.is_none(),
            pinned: pinned.is_some(),
            selected: pinned.map(Selected::new),
            focus: if pinned.is_some() { Pane::Graph } else { Pane::Browser },
            tab: Tab::Steps,
            overlay: None,
            notice: None,
            fatal: None,
            graph_offset: (0, 0),
            follow: true,
            detail_scroll: 0,
            quit: false,
            now_ms: now_ms(),
            regions: Cell::new(Regions::default()),
        }
    }

    pub fn selected_id(&self) -> Option<&str> {
        self.selected.as_ref().map(|s| s.run_id.as_str())
    }

    pub fn view(&self) -> Option<&RunView> {
        self.selected.as_ref().and_then(|s| s.view.as_ref())
    }

    /// Controls are granted only by a current view on a live connection.
    pub fn live(&self) -> bool {
        self.link == Link::Connected
    }

    /// Apply one session update; returns the run the browser now wants selected, if any.
    pub fn apply(&mut self, update: Update) -> Option<String> {
        match update {
            Update::Link(link) => {
                // Reads in flight are lost with the connection: ask again once it is back.
                if link != Link::Connected
                    && let Some(selected) = self.selected.as_mut()
                {
                    selected.values.forget_loading();
                    selected.forget_older_loading();
                }
                self.link = link;
            }
            Update::Runs(page) => return self.apply_runs(&page),
            Update::View {
                document,
                definition,
                full_reason,
            } => {
                let id = document["runId"].as_str().unwrap_or_default();
                if let Some(selected) = self.selected.as_mut().filter(|s| s.run_id == id) {
                    selected.apply_view(&document, definition, full_reason);
                    selected.gone = None;
                }
            }
            Update::ViewGone { run_id, message } => {
                if let Some(selected) = self.selected.as_mut().filter(|s| s.run_id == run_id) {
                    selected.gone = Some(message);
                }
            }
            Update::Attempts {
                run_id,
                items,
                next_after,
            } => {
                if let Some(selected) = self.selected.as_mut().filter(|s| s.run_id == run_id) {
                    selected.apply_page(&items, next_after);
                }
            }
            Update::Settings { run_id, page } => {
                if let Some(selected) = self.selected.as_mut().filter(|s| s.run_id == run_id) {
                    let next_before = page.as_ref().ok().and_then(|page| page["nextBefore"].as_i64());
                    selected.settings_changes = OlderPages::reset(next_before);
                    selected.settings = Some(page);
                }
            }
            Update::Older { run_id, kind, page } => {
                if let Some(selected) = self.selected.as_mut().filter(|s| s.run_id == run_id) {
                    selected.finish_older(&kind, page);
                }
            }
            Update::AttemptValue {
                run_id,
                digest,
                media_type,
                value,
            } => {
                if let Some(selected) = self.selected.as_mut().filter(|s| s.run_id == run_id) {
                    selected.values.finish(&ValueKey { digest, media_type }, value);
                }
            }
            Update::Notice(text) => self.notice = Some(text),
            Update::Fatal { message, code } => {
                self.fatal = Some((message, code));
                self.quit = true;
            }
        }
        None
    }

    /// A new run list. Unpinned, the first list selects the newest run; later lists keep the
    /// selected run (by ID) wherever it moved.
    fn apply_runs(&mut self, page: &Value) -> Option<String> {
        self.runs = run_items(page);
        let first = !self.runs_loaded;
        self.runs_loaded = true;
        if self.pinned || !first || self.selected.is_some() {
            return None;
        }
        let newest = self.runs.first()?.run_id.clone();
        self.select(&newest)
    }

    /// Select a run (unless pinned); `Some` when the session must watch it.
    pub fn select(&mut self, run_id: &str) -> Option<String> {
        if self.pinned || self.selected_id() == Some(run_id) {
            return None;
        }
        self.selected = Some(Selected::new(run_id));
        self.graph_offset = (0, 0);
        self.detail_scroll = 0;
        self.follow = true;
        Some(run_id.to_string())
    }

    /// Reads the visible tab needs: the settings page when the settings tab shows a run
    /// whose settings were not read at its current change number; the output and error of
    /// the attempt the attempt tab shows, once each, while connected.
    pub fn pending_loads(&mut self) -> Vec<Command> {
        let on_settings = self.tab == Tab::Settings;
        if self.tab == Tab::Attempt && self.live() {
            return self.selected.as_mut().map(attempt_value_loads).unwrap_or_default();
        }
        let Some(selected) = self.selected.as_mut() else {
            return Vec::new();
        };
        let Some(change) = selected.view.as_ref().map(|view| view.run.settings_change_number) else {
            return Vec::new();
        };
        if on_settings && selected.settings_for != Some(change) {
            selected.settings_for = Some(change);
            return vec![Command::LoadSettings];
        }
        Vec::new()
    }

    /// The browser row of the selected run.
    pub fn browser_row(&self) -> Option<usize> {
        let id = self.selected_id()?;
        self.runs.iter().position(|run| run.run_id == id)
    }
}

/// The selected attempt's values not asked for yet (each marked as loading).
fn attempt_value_loads(selected: &mut Selected) -> Vec<Command> {
    let Some(attempt) = selected.step_attempt() else {
        return Vec::new();
    };
    let references: Vec<ContentRef> = [&attempt.output_ref, &attempt.error_ref]
        .into_iter()
        .flatten()
        .filter_map(ContentRef::from_value)
        .collect();
    let mut loads = Vec::new();
    for reference in references {
        let key = value_key(&reference);
        if selected.values.get(&key).is_none() {
            selected.values.start(key);
            loads.push(Command::LoadAttemptValue(reference));
        }
    }
    loads
}

pub fn value_key(reference: &ContentRef) -> ValueKey {
    ValueKey {
        digest: reference.digest.clone(),
        media_type: reference.media_type.clone(),
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// `12 ms`, `3.4 s`, `2m05s`, `1h02m`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

/// Text from the server made safe for the terminal (control characters escaped).
pub fn safe(text: &str) -> String {
    pi_workflows::printable::printable(text).into_owned()
}

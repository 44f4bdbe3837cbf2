//! The live session behind the TUI: one connection at a time, the run-list watch and the
//! selected run's watch, hydration of the view's referenced content, controls with their
//! idempotency keys, and reconnecting with bounded backoff. It sends the UI `Update`s and
//! takes its `Command`s; it never derives state (it forwards the server's documents).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pi_workflows::protocol::{Event, EventKind, JsonObject, OpaqueId, Operation};
use pi_workflows::view::patch;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::client::{Client, ClientError, REQUEST_TIMEOUT, accepted};
use super::content::{self, ContentRef};
use super::transport::Endpoint;

/// Waits between reconnect attempts; the last one repeats. Bounded so a restarted server
/// is found within a few seconds, and short at first because a local socket either answers
/// again at once or not at all.
pub const RECONNECT_BACKOFF_MS: [u64; 6] = [100, 250, 500, 1_000, 2_000, 4_000];
/// Attempts shown as "reconnecting" before the view is called "disconnected" (it keeps
/// retrying at the last backoff).
pub const RECONNECTS_BEFORE_DISCONNECTED: u32 = 12;
/// Attempts per `view.page` read.
pub const ATTEMPTS_PAGE_LIMIT: usize = 200;
/// Items per older settings-changes or step-updates page (the server's maximum).
pub const OLDER_PAGE_LIMIT: usize = 200;
/// The answer wait of a restart (the server resolves the workflow again).
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(90);

/// The connection as the UI shows it; only `Connected` grants controls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Connecting,
    Connected,
    Reconnecting { attempt: u32, reason: String },
    Disconnected { reason: String },
}

/// Referenced content of the view, section by section: never an endless "loading".
#[derive(Debug, Clone)]
pub enum ContentState {
    Loading,
    Ready(Arc<Value>),
    Failed(String),
}

/// What an older page (`view.page`, newest first, `before`) continues: the settings page's
/// `changes`, or a pending request's step updates (`items`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OlderKind {
    SettingsChanges,
    Updates { request_id: String },
}

/// An older page's items and where the next one starts, or why it could not be read.
pub type OlderPage = Result<(Vec<Value>, Option<i64>), String>;

/// A user action that changes a run, with the key that makes its retry safe.
#[derive(Debug, Clone)]
pub struct ControlRequest {
    pub operation: Operation,
    pub run_id: String,
    pub payload: JsonObject,
    pub key: OpaqueId,
}

#[derive(Debug, Clone)]
pub enum Update {
    Link(Link),
    Runs(Value),
    View {
        document: Value,
        definition: ContentState,
        full_reason: Option<ContentState>,
    },
    ViewGone {
        run_id: String,
        message: String,
    },
    Attempts {
        run_id: String,
        items: Vec<Value>,
        next_after: Option<i64>,
    },
    Settings {
        run_id: String,
        page: Result<Value, String>,
    },
    /// An older page of settings changes or step updates.
    Older {
        run_id: String,
        kind: OlderKind,
        page: OlderPage,
    },
    /// An attempt value (`outputRef` / `errorRef`) read and verified, or why it could not be.
    AttemptValue {
        run_id: String,
        digest: String,
        media_type: String,
        value: Result<Arc<Value>, String>,
    },
    Notice(String),
    /// The session cannot go on; `code` is the process exit code (`crate::exit`).
    Fatal {
        message: String,
        code: u8,
    },
}

#[derive(Debug, Clone)]
pub enum Command {
    Select(Option<String>),
    Control(ControlRequest),
    /// The next page of attempts from the start (`after` a seq).
    LoadAttempts {
        after: Option<i64>,
    },
    LoadSettings,
    /// The page of `kind` older than `before`.
    LoadOlder {
        kind: OlderKind,
        before: i64,
    },
    /// An attempt value of the selected run, by its reference.
    LoadAttemptValue(ContentRef),
}

pub struct SessionOptions {
    pub endpoint: Endpoint,
    /// The local state directory: the server may be started there once, at launch.
    pub start_in: Option<PathBuf>,
    pub client_id: OpaqueId,
    pub watch_runs: bool,
    pub selected: Option<String>,
}

/// After a failed connection attempt.
enum Next {
    /// Wait a backoff, then connect again.
    Retry(String),
    /// Connect again at once (the server was just started).
    Again,
    /// A fatal update was sent; the session ends.
    Stop,
}

/// Why `serve` returned.
enum Ended {
    Quit,
    Lost(String),
}

pub struct Session {
    options: SessionOptions,
    updates: mpsc::UnboundedSender<Update>,
    document: Option<Value>,
    definition: Option<(String, ContentState)>,
    reason: Option<(String, ContentState)>,
    run_subscription: Option<OpaqueId>,
    runs_subscription: Option<OpaqueId>,
    in_flight: Vec<ControlRequest>,
}

impl Session {
    pub fn new(options: SessionOptions, updates: mpsc::UnboundedSender<Update>) -> Self {
        Self {
            options,
            updates,
            document: None,
            definition: None,
            reason: None,
            run_subscription: None,
            runs_subscription: None,
            in_flight: Vec::new(),
        }
    }

    fn send(&self, update: Update) {
        let _ = self.updates.send(update);
    }

    /// Run until the UI drops its command sender.
    pub async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut may_start = self.options.start_in.is_some();
        let mut ever_connected = false;
        let mut attempt: u32 = 0;
        self.send(Update::Link(Link::Connecting));
        loop {
            let reason = match Client::connect(&self.options.endpoint, self.options.client_id.clone()).await {
                Ok((client, events)) => {
                    (attempt, may_start, ever_connected) = (0, false, true);
                    self.send(Update::Link(Link::Connected));
                    match self.serve(&client, events, &mut commands).await {
                        Ended::Quit => return,
                        Ended::Lost(reason) => reason,
                    }
                }
                Err(err) => match self.not_connected(err, ever_connected, &mut may_start).await {
                    Next::Retry(reason) => reason,
                    Next::Again => continue,
                    Next::Stop => return,
                },
            };
            attempt += 1;
            self.send(Update::Link(stale_link(attempt, reason)));
            if !self.wait_backoff(attempt, &mut commands).await {
                return;
            }
        }
    }

    /// What a failed connection attempt leads to. A client that never reached its server
    /// fails with one clear error instead of waiting (spec "Renderers and controls"); once
    /// connected, losing the server is a reconnect.
    async fn not_connected(&mut self, err: ClientError, ever_connected: bool, may_start: &mut bool) -> Next {
        let fatal = |message: String, code: u8| Update::Fatal { message, code };
        if let ClientError::VersionMismatch { .. } = err {
            self.send(fatal(err.to_string(), crate::exit::PROTOCOL));
            return Next::Stop;
        }
        if ever_connected {
            return Next::Retry(err.to_string());
        }
        if !std::mem::take(may_start) {
            self.send(fatal(err.to_string(), crate::exit::UNAVAILABLE));
            return Next::Stop;
        }
        match self.start_server().await {
            Ok(()) => Next::Again,
            Err(start) => {
                self.send(fatal(format!("{err}; {start}"), crate::exit::UNAVAILABLE));
                Next::Stop
            }
        }
    }

    async fn start_server(&self) -> Result<(), super::start::StartError> {
        let dir = self.options.start_in.clone().unwrap_or_default();
        self.send(Update::Notice("starting the pi-workflows server…".into()));
        super::start::start_server(&dir).await
    }

    /// Sleep before the next attempt while keeping the commands answered; false on quit.
    async fn wait_backoff(&mut self, attempt: u32, commands: &mut mpsc::UnboundedReceiver<Command>) -> bool {
        let index = (attempt as usize).saturating_sub(1).min(RECONNECT_BACKOFF_MS.len() - 1);
        let sleep = tokio::time::sleep(Duration::from_millis(RECONNECT_BACKOFF_MS[index]));
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return true,
                command = commands.recv() => match command {
                    None => return false,
                    Some(command) => self.while_disconnected(command),
                },
            }
        }
    }

    fn while_disconnected(&mut self, command: Command) {
        match command {
            Command::Select(run) => self.reselect(run),
            Command::Control(_) => self.send(Update::Notice("not connected: nothing was sent".into())),
            // The UI asks for these again once it sees the connection back.
            Command::LoadAttempts { .. }
            | Command::LoadSettings
            | Command::LoadOlder { .. }
            | Command::LoadAttemptValue(_) => {}
        }
    }

    fn reselect(&mut self, run: Option<String>) {
        if run != self.options.selected {
            self.options.selected = run;
            self.document = None;
            self.definition = None;
            self.reason = None;
        }
    }

    async fn serve(
        &mut self,
        client: &Client,
        mut events: mpsc::Receiver<Event>,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Ended {
        if let Err(err) = self.subscribe(client).await {
            return Ended::Lost(err.to_string());
        }
        for control in std::mem::take(&mut self.in_flight) {
            if let Err(err) = self.control(client, control).await {
                return Ended::Lost(err.to_string());
            }
        }
        loop {
            let result = tokio::select! {
                event = events.recv() => match event {
                    None => return Ended::Lost("the connection closed".into()),
                    Some(event) => self.on_event(client, event).await,
                },
                command = commands.recv() => match command {
                    None => return Ended::Quit,
                    Some(command) => self.on_command(client, command).await,
                },
            };
            if let Err(err) = result {
                return Ended::Lost(err.to_string());
            }
        }
    }

    /// Watch the run list and the selected run on this connection (a held view resumes
    /// from its revision: the server answers a patch when it still has it).
    async fn subscribe(&mut self, client: &Client) -> Result<(), ClientError> {
        self.runs_subscription = None;
        self.run_subscription = None;
        if self.options.watch_runs {
            let response = client.read(Operation::ViewRunsWatch, None, JsonObject::new()).await?;
            self.runs_subscription = subscription_of(&response);
        }
        self.watch_selected(client).await
    }

    async fn watch_selected(&mut self, client: &Client) -> Result<(), ClientError> {
        let Some(run_id) = self.options.selected.clone() else {
            return Ok(());
        };
        let mut payload = JsonObject::new();
        if let Some(revision) = self.document.as_ref().and_then(|d| d["revision"].as_i64()) {
            payload.insert("sinceRevision".into(), json!(revision));
        }
        let response = client.read(Operation::ViewRunWatch, Some(&run_id), payload).await?;
        match accepted(&response) {
            Ok(_) => self.run_subscription = subscription_of(&response),
            Err(refusal) => self.send(Update::ViewGone {
                run_id,
                message: refusal.to_string(),
            }),
        }
        Ok(())
    }

    async fn on_event(&mut self, client: &Client, event: Event) -> Result<(), ClientError> {
        let id = Some(&event.subscription_id);
        if id == self.runs_subscription.as_ref() && event.event == EventKind::Runs {
            self.send(Update::Runs(Value::Object(event.payload)));
            return Ok(());
        }
        if id != self.run_subscription.as_ref() {
            return Ok(());
        }
        match event.event {
            EventKind::RunSnapshot => self.document = event.payload.get("view").cloned(),
            EventKind::RunPatch => self.apply_patch(client, &event.payload).await?,
            EventKind::Unavailable => {
                let run_id = self.options.selected.clone().unwrap_or_default();
                let message = "the run is no longer available".to_string();
                self.run_subscription = None;
                self.send(Update::ViewGone { run_id, message });
                return Ok(());
            }
            _ => return Ok(()),
        }
        self.publish(client).await
    }

    /// A patch from the held revision applies; any other (an event was missed) is replaced
    /// by a fresh read of the whole view.
    async fn apply_patch(&mut self, client: &Client, payload: &JsonObject) -> Result<(), ClientError> {
        let held = self.document.as_ref().map(|d| d["revision"].clone());
        if let (Some(document), Some(held)) = (self.document.as_mut(), held)
            && payload.get("fromRevision") == Some(&held)
        {
            patch::apply(document, &payload["patch"]);
            return Ok(());
        }
        let run_id = self.options.selected.clone().unwrap_or_default();
        let response = client
            .read(Operation::ViewRunGet, Some(&run_id), JsonObject::new())
            .await?;
        self.document = accepted(&response)
            .ok()
            .and_then(|receipt| receipt.get("view").cloned());
        Ok(())
    }

    /// Hydrate what the view references (once per digest), then hand the view to the UI.
    async fn publish(&mut self, client: &Client) -> Result<(), ClientError> {
        let Some(document) = self.document.clone() else {
            return Ok(());
        };
        let run_id = document["runId"].as_str().unwrap_or_default().to_string();
        let definition = match ContentRef::from_value(&document["workflow"]["definition"]) {
            None => ContentState::Failed("the view names no workflow definition".into()),
            Some(reference) => {
                let expected = document["workflow"]["definitionDigest"].as_str().unwrap_or_default();
                if expected != reference.digest {
                    ContentState::Failed(format!(
                        "the definition reference {} is not the run's definition {expected}",
                        reference.digest
                    ))
                } else {
                    hydrate(client, &run_id, &reference, &mut self.definition).await?
                }
            }
        };
        let full_reason = match ContentRef::from_value(&document["display"]["reasonContent"]) {
            None => None,
            Some(reference) => Some(hydrate(client, &run_id, &reference, &mut self.reason).await?),
        };
        self.send(Update::View {
            document,
            definition,
            full_reason,
        });
        Ok(())
    }

    async fn on_command(&mut self, client: &Client, command: Command) -> Result<(), ClientError> {
        match command {
            Command::Select(run) => {
                if run == self.options.selected {
                    return Ok(());
                }
                if let Some(old) = self.run_subscription.take() {
                    let mut payload = JsonObject::new();
                    payload.insert("subscriptionId".into(), json!(old.as_str()));
                    client.read(Operation::ViewRunUnwatch, None, payload).await?;
                }
                self.reselect(run);
                self.watch_selected(client).await
            }
            Command::Control(control) => self.control(client, control).await,
            Command::LoadAttempts { after } => self.load_attempts(client, after).await,
            Command::LoadSettings => self.load_settings(client).await,
            Command::LoadOlder { kind, before } => self.load_older(client, kind, before).await,
            Command::LoadAttemptValue(reference) => self.load_attempt_value(client, reference).await,
        }
    }

    /// Send a control; a lost connection keeps it for a resend with the same key.
    async fn control(&mut self, client: &Client, control: ControlRequest) -> Result<(), ClientError> {
        let wait = if control.operation == Operation::RunRestart {
            RESTART_TIMEOUT
        } else {
            REQUEST_TIMEOUT
        };
        let response = client
            .request(
                control.operation,
                Some(&control.run_id),
                control.payload.clone(),
                Some(&control.key),
                wait,
            )
            .await;
        let name = control.operation.as_str();
        match response {
            Ok(response) => {
                let notice = match accepted(&response) {
                    Ok(_) if control.operation == Operation::RunRestart => format!(
                        "{name}: {} (new run {})",
                        response.outcome.as_str(),
                        control.payload["newRunId"].as_str().unwrap_or("?")
                    ),
                    Ok(_) => format!("{name}: {}", response.outcome.as_str()),
                    Err(refusal) => format!("{name} refused: {refusal}"),
                };
                self.send(Update::Notice(notice));
                Ok(())
            }
            Err(err) if err.is_transport() => {
                self.in_flight.push(control);
                Err(err)
            }
            Err(err) => {
                self.send(Update::Notice(format!("{name}: {err}")));
                Ok(())
            }
        }
    }

    async fn load_attempts(&mut self, client: &Client, after: Option<i64>) -> Result<(), ClientError> {
        let Some(run_id) = self.options.selected.clone() else {
            return Ok(());
        };
        let mut payload = JsonObject::new();
        payload.insert("kind".into(), json!("attempts"));
        payload.insert("limit".into(), json!(ATTEMPTS_PAGE_LIMIT));
        if let Some(after) = after {
            payload.insert("after".into(), json!(after));
        }
        let response = client.read(Operation::ViewPage, Some(&run_id), payload).await?;
        match accepted(&response) {
            Ok(receipt) => self.send(Update::Attempts {
                run_id,
                items: receipt
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                next_after: receipt.get("nextAfter").and_then(Value::as_i64),
            }),
            Err(refusal) => self.send(Update::Notice(format!("attempts: {refusal}"))),
        }
        Ok(())
    }

    async fn load_attempt_value(&mut self, client: &Client, reference: ContentRef) -> Result<(), ClientError> {
        let Some(run_id) = self.options.selected.clone() else {
            return Ok(());
        };
        let value = fetch_json(client, &run_id, &reference).await?;
        self.send(Update::AttemptValue {
            run_id,
            digest: reference.digest,
            media_type: reference.media_type,
            value,
        });
        Ok(())
    }

    async fn load_settings(&mut self, client: &Client) -> Result<(), ClientError> {
        let Some(run_id) = self.options.selected.clone() else {
            return Ok(());
        };
        let mut payload = JsonObject::new();
        payload.insert("kind".into(), json!("settings"));
        let response = client.read(Operation::ViewPage, Some(&run_id), payload).await?;
        let page = accepted(&response)
            .map(|receipt| Value::Object(receipt.clone()))
            .map_err(|refusal| refusal.to_string());
        self.send(Update::Settings { run_id, page });
        Ok(())
    }

    /// An older page of settings changes (`changes`) or of a request's updates (`items`).
    async fn load_older(&mut self, client: &Client, kind: OlderKind, before: i64) -> Result<(), ClientError> {
        let Some(run_id) = self.options.selected.clone() else {
            return Ok(());
        };
        let mut payload = JsonObject::new();
        payload.insert("before".into(), json!(before));
        payload.insert("limit".into(), json!(OLDER_PAGE_LIMIT));
        let field = match &kind {
            OlderKind::SettingsChanges => {
                payload.insert("kind".into(), json!("settings"));
                "changes"
            }
            OlderKind::Updates { request_id } => {
                payload.insert("kind".into(), json!("updates"));
                payload.insert("requestId".into(), json!(request_id));
                "items"
            }
        };
        let response = client.read(Operation::ViewPage, Some(&run_id), payload).await?;
        let page = accepted(&response)
            .map(|receipt| {
                let items = receipt.get(field).and_then(Value::as_array).cloned();
                (
                    items.unwrap_or_default(),
                    receipt.get("nextBefore").and_then(Value::as_i64),
                )
            })
            .map_err(|refusal| refusal.to_string());
        self.send(Update::Older { run_id, kind, page });
        Ok(())
    }
}

/// Read a reference unless `cache` already holds its digest. Only a lost connection is an
/// error; anything else becomes that section's failure.
pub async fn hydrate(
    client: &Client,
    run_id: &str,
    reference: &ContentRef,
    cache: &mut Option<(String, ContentState)>,
) -> Result<ContentState, ClientError> {
    if let Some((digest, state)) = cache.as_ref()
        && *digest == reference.digest
    {
        return Ok(state.clone());
    }
    let state = match fetch_json(client, run_id, reference).await? {
        Ok(value) => ContentState::Ready(value),
        Err(err) => ContentState::Failed(err),
    };
    *cache = Some((reference.digest.clone(), state.clone()));
    Ok(state)
}

/// A referenced JSON value, verified against its digest. Only a lost connection is an error;
/// anything else is the section's failure, as text.
pub async fn fetch_json(
    client: &Client,
    run_id: &str,
    reference: &ContentRef,
) -> Result<Result<Arc<Value>, String>, ClientError> {
    Ok(match content::fetch(client, run_id, reference).await {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
            .map(Arc::new)
            .map_err(|err| format!("the content is not JSON: {err}")),
        Err(content::ContentError::Client(err)) if err.is_transport() => return Err(err),
        Err(err) => Err(err.to_string()),
    })
}

fn subscription_of(response: &pi_workflows::protocol::Response) -> Option<OpaqueId> {
    let id = accepted(response).ok()?.get("subscriptionId")?.as_str()?;
    OpaqueId::new(id).ok()
}

fn stale_link(attempt: u32, reason: String) -> Link {
    if attempt > RECONNECTS_BEFORE_DISCONNECTED {
        Link::Disconnected { reason }
    } else {
        Link::Reconnecting { attempt, reason }
    }
}

//! The adapter process: start-up, then one loop that owns all state.
//!
//! Threads: the stdin reader ([`crate::inbound`]) and the long poll ([`crate::poller`]) only
//! turn input into [`Event`]s; this loop handles them one at a time, makes every present's
//! API call, and is the only writer of stdout. So a settle always follows its present, answers
//! keep Telegram's order, and a stop request is seen only after the presents before it settled.

use crate::api::BotApi;
use crate::inbound::{InboundFence, spawn_stdin_reader};
use crate::logging;
use crate::outbox::{Outbox, OutboxError};
use crate::registry::Registry;
use crate::startup::{GetMeOutcome, get_me_with_retries, load_launch};
use crate::token::{Redactor, read_token_file};
use crate::{poller, present};
use channel_protocol::exit::{EXIT_CONFIG, EXIT_INTERNAL, EXIT_OUTPUT_FAILED};
use channel_protocol::payload::{ExitReason, Exiting, Message, Ready};
use channel_protocol::{ChannelLaunch, Frame, Kind};
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};

/// Events queued for the loop at most (the readers wait when it is full).
pub const EVENTS_QUEUED_MAX: usize = 64;

/// What the reader threads hand to the loop.
#[derive(Debug)]
pub enum Event {
    /// A frame that decoded (not yet fenced).
    Frame(Box<Frame>),
    /// Stdin carried an oversized or malformed line (the error's code).
    Violation(&'static str),
    /// Stdin ended (or failed).
    StdinClosed,
    /// A batch of raw updates; answer on `done` once handled.
    Updates {
        /// The updates, at most one `getUpdates` batch.
        updates: Vec<Value>,
        /// Told when the batch is handled (its answers written).
        done: Sender<()>,
    },
    /// `getUpdates` answered 401/404: the token is no longer accepted.
    CredentialRejected,
    /// A reader thread panicked (a bug); the adapter cannot go on without it.
    ThreadFailed(&'static str),
}

/// Whether the loop goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Handle the next event.
    Continue,
    /// Send `channel.exiting` with this reason and exit.
    Exit(ExitReason),
    /// Exit with this code at once (an internal error: no reason of the protocol fits).
    Abort(i32),
}

/// A step of the loop: a flow, or stdout failed.
pub type Step = Result<Flow, OutboxError>;

/// The adapter's state, owned by the loop.
pub struct Adapter<W: Write> {
    pub(crate) launch: ChannelLaunch,
    pub(crate) api: BotApi,
    pub(crate) outbox: Outbox<W>,
    pub(crate) registry: Registry,
    fence: InboundFence,
    ignored: HashMap<&'static str, u64>,
}

/// Runs the adapter; returns the process exit code.
#[must_use]
pub fn run() -> i32 {
    logging::init();
    logging::install_panic_hook();
    let launch = match load_launch() {
        Ok(launch) => launch,
        Err(error) => return refuse_start(&error.to_string()),
    };
    let token = match read_token_file(Path::new(&launch.token_file)) {
        Ok(token) => token,
        Err(error) => return refuse_start(&error.to_string()),
    };
    let redactor = Redactor::new(&token);
    logging::set_redactor(redactor.clone());
    let sender_api = BotApi::new(&launch.api_base_url, token.clone(), false);
    let poll_api = BotApi::new(&launch.api_base_url, token, true);
    let (input, output) = match crate::streams::open() {
        Ok(streams) => streams,
        Err(error) => return refuse_start(&error.to_string()),
    };
    let outbox = Outbox::new(output, &launch, redactor);
    let mut adapter = Adapter::new(launch, sender_api, outbox);
    let bot = match get_me_with_retries(&adapter.api) {
        GetMeOutcome::Ready(bot) => bot,
        GetMeOutcome::CredentialRejected => return adapter.exit(ExitReason::CredentialRejected),
        GetMeOutcome::Unreachable => return adapter.exit(ExitReason::ApiUnreachable),
    };
    if let Err(error) = adapter.outbox.send(&Message::Ready(Ready { bot }), 0, None) {
        return output_failed(&error);
    }
    tracing::info!("ready");
    let (events, inbox) = mpsc::sync_channel(EVENTS_QUEUED_MAX);
    let poll_timeout_s = adapter.launch.poll_timeout_s;
    let started =
        spawn_stdin_reader(events.clone(), input).and_then(|_| poller::spawn(poll_api, poll_timeout_s, events));
    if started.is_err() {
        tracing::error!("cannot start the reader threads");
        return EXIT_INTERNAL;
    }
    adapter.run_loop(&inbox)
}

fn refuse_start(message: &str) -> i32 {
    logging::write_stderr_line(&format!("pi-workflows-telegram: cannot start: {message}"));
    EXIT_CONFIG
}

fn output_failed(error: &OutboxError) -> i32 {
    match error {
        OutboxError::Io(_) => EXIT_OUTPUT_FAILED,
        OutboxError::Encode { .. } => EXIT_INTERNAL,
    }
}

impl<W: Write> Adapter<W> {
    /// A fresh adapter state.
    pub fn new(launch: ChannelLaunch, api: BotApi, outbox: Outbox<W>) -> Self {
        let fence = InboundFence::new(&launch);
        Self {
            launch,
            api,
            outbox,
            registry: Registry::default(),
            fence,
            ignored: HashMap::new(),
        }
    }

    /// Handles events until one ends the adapter; returns the exit code.
    pub fn run_loop(&mut self, inbox: &Receiver<Event>) -> i32 {
        loop {
            // Both reader threads gone without a last word: treat as the end of stdin.
            let event = inbox.recv().unwrap_or(Event::StdinClosed);
            match self.handle(event) {
                Ok(Flow::Continue) => {}
                Ok(Flow::Exit(reason)) => return self.exit(reason),
                Ok(Flow::Abort(code)) => return code,
                Err(error) => {
                    tracing::error!(kind = error_kind(&error), "cannot write a frame");
                    return output_failed(&error);
                }
            }
        }
    }

    fn handle(&mut self, event: Event) -> Step {
        match event {
            Event::Frame(frame) => self.on_frame(&frame),
            Event::Violation(code) => {
                tracing::error!(code, "protocol violation on stdin");
                Ok(Flow::Exit(ExitReason::ProtocolViolation))
            }
            Event::StdinClosed => Ok(Flow::Exit(ExitReason::StdinClosed)),
            Event::Updates { updates, done } => {
                let step = self.on_updates(updates)?;
                // Only now may the poller confirm the batch to Telegram: its answers are out.
                let _ = done.send(());
                Ok(step)
            }
            Event::CredentialRejected => Ok(Flow::Exit(ExitReason::CredentialRejected)),
            Event::ThreadFailed(thread) => {
                tracing::error!(thread, "a reader thread failed");
                Ok(Flow::Abort(EXIT_INTERNAL))
            }
        }
    }

    fn on_frame(&mut self, frame: &Frame) -> Step {
        if let Err(refusal) = self.fence.admit(&frame.header) {
            tracing::warn!(reason = refusal.as_str(), "frame refused");
            return Ok(Flow::Continue);
        }
        match frame.kind {
            Kind::Present => self.on_present(frame),
            Kind::Exiting => match frame.message() {
                Ok(_) => Ok(Flow::Exit(ExitReason::Requested)),
                Err(_) => Ok(present::violation("exitingPayload")),
            },
            Kind::Ready | Kind::Settle | Kind::Answer => Ok(present::violation("kindNotForAdapter")),
        }
    }

    /// Sends `channel.exiting` (best effort: stdout may be gone) and returns the exit code.
    pub fn exit(&mut self, reason: ExitReason) -> i32 {
        let sent = self.outbox.send(&Message::Exiting(Exiting { reason }), 0, None);
        tracing::info!(reason = reason.as_str(), "exiting");
        match sent {
            Ok(()) => reason.exit_code(),
            Err(_) if reason.exit_code() == 0 => EXIT_OUTPUT_FAILED,
            Err(_) => reason.exit_code(),
        }
    }

    /// Counts an ignored update and logs one safe line: the reason and its count.
    pub(crate) fn ignore(&mut self, reason: &'static str) {
        let count = self.ignored.entry(reason).or_insert(0);
        *count += 1;
        tracing::info!(reason, count = *count, "update ignored");
    }

    /// Whether presses and replies of this user count.
    pub(crate) fn user_allowed(&self, user_id: i64) -> bool {
        self.launch.allowed_user_ids.contains(&user_id)
    }

    /// Whether this chat is one the adapter serves.
    pub(crate) fn chat_allowed(&self, chat_id: i64) -> bool {
        self.launch.allowed_chat_ids.contains(&chat_id)
    }
}

fn error_kind(error: &OutboxError) -> &'static str {
    match error {
        OutboxError::Io(_) => "io",
        OutboxError::Encode { .. } => "encode",
    }
}

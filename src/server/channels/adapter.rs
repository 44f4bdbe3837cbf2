//! One Telegram profile's adapter: a permanent child of `channels` that owns one
//! `pi-workflows-telegram` process (through a linked `ProcessActor`) and the server's end of
//! its channel (docs/CHANNEL-PROTOCOL.md).
//!
//! - Start: the store gives the launch the profile's next epoch (which makes any attempt an
//!   older launch left applying ambiguous), then the process is started in its own process
//!   group with the launch envelope, its one token file path and the channel on fd 3.
//! - Frames: every adapter frame is fenced (epoch, profile, its sequence exactly + 1) before
//!   its payload is read; a violation stops the process (and so fails this actor).
//! - Work: after `channel.ready` it tracks the open messages again, then makes one present at
//!   a time — the store records the effect attempt `applying` first — and waits for its
//!   settle. Commits wake it; a rate limit delays it.
//! - End: the process ending makes its in-flight attempt ambiguous. A refused credential or
//!   launch stops the profile until `channel reload`; any other end fails this actor, and the
//!   restart waits out a backoff that doubles with each quick death.
//!
//! Architecture Invariant: the adapter process is told only the presentation, the allowed
//! identities and where its one credential is; it never sees the store, a subject or a token
//! this process read (the server never reads one).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use channel_protocol::{ExitReason, Frame, Header, Message, Outcome, Stage};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use supervisors::process::{ProcessSpec, RlimitResource, spawn};
use supervisors::{DetailsCell, ProcessActor, ProcessConfig, ProcessMsg, Readiness};
use tokio::io::{AsyncWriteExt, BufReader};

use super::present::present_frame;
use super::registry::{AdapterState as Shown, ChannelRegistry};
use crate::channels::config::TelegramProfile;
use crate::server::blocking;
use crate::server::frames::{LineRead, read_line};
use crate::server::shared::Shared;
use crate::server::socket;
use crate::server::spawn::capture_paths;
use crate::store::StoreError;
use crate::store::channels::{
    self as store, AdapterFence, Answered, AttemptOutcome, ChannelAnswer, ChannelError, SettleClaim,
};

/// How long an adapter's process may take to stop (it finishes its in-flight request).
pub const ADAPTER_GRACE_MS: u64 = 3_000;
/// The descriptor the adapter finds its channel on (`PI_WORKFLOWS_CHANNEL_FD`).
const CHANNEL_FD: i32 = 3;
/// A process that dies within this time of its start counts as a quick death, even after
/// `channel.ready`: only an adapter that stayed up this long resets the backoff (one that
/// crashes right after ready would otherwise restart every 0.5 s and exhaust the `channels`
/// supervisor's intensity, and then the root's).
const STABLE_UPTIME_MS: u64 = 30_000;
/// The first and the longest wait before starting again after quick deaths.
const BACKOFF_MS_MIN: u64 = 500;
const BACKOFF_MS_MAX: u64 = 30_000;
/// How often the adapter looks for work without a commit (a rate limit's end).
const TICK_MS: u64 = 2_000;
/// The longest wait a rate limit can impose before the next present.
const RETRY_AFTER_MS_MAX: u64 = 300_000;
/// Captured adapter output per stream.
const CAPTURE_BYTES_MAX: u64 = 1024 * 1024;
/// The variables an adapter inherits: only what reaching Telegram through the user's network
/// needs (proxies, certificates); its configuration is the launch envelope.
const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];
/// The profile's bot is already served by another profile (`lastExit`).
const DUPLICATE_BOT: &str = "duplicateBot";
/// An adapter exits 78 when its launch, token file or token was refused: a restart cannot fix it.
const EXIT_CONFIG: i32 = 78;

#[derive(Clone)]
pub struct AdapterArgs {
    pub shared: Arc<Shared>,
    pub registry: Arc<ChannelRegistry>,
    pub profile: String,
    pub telegram: TelegramProfile,
    /// The audiences this profile presents.
    pub audiences: Vec<String>,
    pub program: PathBuf,
    pub logs_dir: PathBuf,
    pub details: DetailsCell,
}

pub enum AdapterMsg {
    Launch,
    Frame(Box<Frame>),
    /// The channel closed, or the adapter broke the framing (the reason).
    ChannelEnded(&'static str),
    Wake,
}

pub struct Adapter;

pub struct AdapterState {
    args: AdapterArgs,
    serving: Option<Serving>,
    /// The profile stopped for good (until a reload starts a new actor).
    stopped: bool,
}

struct Serving {
    process: ActorRef<ProcessMsg>,
    writer: socket::WriteHalf,
    fence: AdapterFence,
    /// The sequence of this server's last frame to the adapter.
    sent: u64,
    /// The sequence of the adapter's last frame.
    received: u64,
    ready: bool,
    /// The attempt the adapter is making (one at a time).
    in_flight: Option<InFlight>,
    /// The channel messages this adapter was given (sent or tracked): their buttons work.
    /// Newest last, at most `TRACKED_MAX`: forgetting an old one only means it is offered
    /// again (`track`) if it is still open, which the adapter takes as a no-op.
    tracked: VecDeque<String>,
    /// No present before this (a rate limit).
    not_before: Option<Instant>,
    exit_reason: Option<ExitReason>,
    /// Why the server stopped this process for good (the profile stays stopped until a reload).
    refused: Option<&'static str>,
    /// The process's exit code, once it ended (set by the process actor's exit hook).
    exit_code: Arc<std::sync::Mutex<Option<i32>>>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The present the adapter is making: only its own settle (same attempt, channel message and
/// channel revision) may settle it.
struct InFlight {
    attempt_id: String,
    channel_message_id: String,
    channel_revision: u64,
}

impl InFlight {
    fn matches(&self, header: &Header, settle: &channel_protocol::Settle) -> bool {
        header.attempt_id.as_deref() == Some(self.attempt_id.as_str())
            && header.channel_revision == self.channel_revision
            && settle.channel_message_id == self.channel_message_id
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Actor for Adapter {
    type Msg = AdapterMsg;
    type State = AdapterState;
    type Arguments = AdapterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<AdapterMsg>,
        args: AdapterArgs,
    ) -> Result<AdapterState, ActorProcessingErr> {
        match backoff(args.registry.quick_deaths(&args.profile)) {
            Duration::ZERO => drop(myself.cast(AdapterMsg::Launch)),
            wait => drop(myself.send_after(wait, || AdapterMsg::Launch)),
        }
        Ok(AdapterState {
            args,
            serving: None,
            stopped: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<AdapterMsg>,
        message: AdapterMsg,
        state: &mut AdapterState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AdapterMsg::Launch if state.serving.is_none() && !state.stopped => start(&myself, state).await?,
            AdapterMsg::Launch => {}
            AdapterMsg::Frame(frame) => on_frame(state, *frame).await?,
            AdapterMsg::ChannelEnded(why) => on_channel_ended(state, why).await,
            AdapterMsg::Wake => work(state).await?,
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<AdapterMsg>,
        event: SupervisionEvent,
        state: &mut AdapterState,
    ) -> Result<(), ActorProcessingErr> {
        let cell = match &event {
            SupervisionEvent::ActorTerminated(cell, _, _) | SupervisionEvent::ActorFailed(cell, _) => cell,
            _ => return Ok(()),
        };
        let Some(serving) = state
            .serving
            .take_if(|serving| serving.process.get_id() == cell.get_id())
        else {
            return Ok(());
        };
        on_process_end(state, serving).await
    }

    async fn post_stop(&self, _: ActorRef<AdapterMsg>, state: &mut AdapterState) -> Result<(), ActorProcessingErr> {
        if let Some(serving) = state.serving.take() {
            // Stopped by a reload or the server's stop: whatever it was sending is unknown.
            interrupt(&state.args).await;
            drop(serving);
        }
        Ok(())
    }
}

/// Launch the adapter process. A program that cannot be started (missing, not executable)
/// will not start on a retry either: the profile stops until a reload, rather than failing in
/// a loop. Anything else fails this actor, counted as a quick death for the backoff.
async fn start(myself: &ActorRef<AdapterMsg>, state: &mut AdapterState) -> Result<(), ActorProcessingErr> {
    let Err(err) = launch(myself, state).await else {
        return Ok(());
    };
    let args = &state.args;
    if let Some(LaunchError::Program(why)) = err.downcast_ref::<LaunchError>() {
        tracing::warn!(profile = %args.profile, error = %why, "the Telegram adapter program could not be started; the profile is stopped until `pi-workflows channel reload`");
        args.registry.note_exit(&args.profile, "launchFailed", false);
        args.registry.set_status(&args.profile, Shown::Stopped, None);
        state.stopped = true;
        return Ok(());
    }
    args.registry.note_exit(&args.profile, "launchFailed", true);
    Err(err)
}

/// Why a launch did not happen.
#[derive(Debug, thiserror::Error)]
enum LaunchError {
    #[error("{0}")]
    Program(String),
}

async fn launch(myself: &ActorRef<AdapterMsg>, state: &mut AdapterState) -> Result<(), ActorProcessingErr> {
    let args = &state.args;
    let profile = args.profile.clone();
    let fence = blocking::write(&args.shared.store, move |tx| store::launch(tx, &profile)).await?;
    let (parent_end, child_end) = std::os::unix::net::UnixStream::pair()?;
    let spec = process_spec(args, &fence, child_end.into())?;
    let child =
        spawn(spec).map_err(|err| LaunchError::Program(format!("the Telegram adapter could not start: {err}")))?;
    let exit_code = Arc::new(std::sync::Mutex::new(None));
    let recorded = Arc::clone(&exit_code);
    let config = ProcessConfig::adopt(child, Readiness::Immediate)
        .with_details(args.details.clone())
        .on_exit(move |end| *crate::server::shared::lock(&recorded) = end.outcome.and_then(|outcome| outcome.code()));
    let (process, _) = Actor::spawn_linked(None, ProcessActor, config, myself.get_cell()).await?;
    let (read_half, writer) = socket::split(parent_end)?;
    let tasks = vec![
        tokio::spawn(read_frames(myself.clone(), BufReader::new(read_half))),
        tokio::spawn(wake_on_commits(myself.clone(), Arc::clone(&args.shared))),
    ];
    args.registry
        .set_status(&args.profile, Shown::Starting, Some(fence.epoch));
    tracing::info!(profile = %args.profile, epoch = fence.epoch, "channel adapter started");
    state.serving = Some(Serving {
        process,
        writer,
        fence,
        sent: 0,
        received: 0,
        ready: false,
        in_flight: None,
        tracked: VecDeque::new(),
        not_before: None,
        exit_reason: None,
        refused: None,
        exit_code,
        started: Instant::now(),
        tasks,
    });
    Ok(())
}

fn process_spec(
    args: &AdapterArgs,
    fence: &AdapterFence,
    channel: std::os::fd::OwnedFd,
) -> Result<ProcessSpec, ActorProcessingErr> {
    let launch = channel_protocol::ChannelLaunch {
        schema: channel_protocol::launch::LAUNCH_SCHEMA.to_string(),
        adapter_epoch: u64::try_from(fence.epoch)?,
        profile: args.profile.clone(),
        api_base_url: args.telegram.api_base_url.clone(),
        token_file: args.telegram.token_file.display().to_string(),
        allowed_user_ids: args.telegram.allowed_user_ids.clone(),
        allowed_chat_ids: args.telegram.allowed_chat_ids.clone(),
        poll_timeout_s: args.telegram.poll_timeout_s,
    };
    launch.check().map_err(|err| err.to_string())?;
    let (stdout, stderr) = capture_paths(&args.logs_dir, &format!("channel-{}-e{}", args.profile, fence.epoch));
    let mut spec = ProcessSpec::new(&args.program)
        .env_clear(true)
        .stdout_to(stdout)
        .stderr_to(stderr)
        .capture_bytes_max(CAPTURE_BYTES_MAX)
        .grace(Duration::from_millis(ADAPTER_GRACE_MS))
        .rlimit(RlimitResource::Core, Some(0), Some(0))
        .inherit_fd(channel, CHANNEL_FD)
        .env(
            channel_protocol::launch::LAUNCH_ENV,
            launch.to_json().map_err(|err| err.to_string())?,
        )
        .env("PI_WORKFLOWS_CHANNEL_FD", CHANNEL_FD.to_string());
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            spec = spec.env(name, value);
        }
    }
    Ok(spec)
}

/// Frames from the adapter, each decoded (canonical, bounded) and handed to the actor.
async fn read_frames(myself: ActorRef<AdapterMsg>, mut reader: BufReader<socket::ReadHalf>) {
    let mut line = Vec::new();
    loop {
        let why = match read_line(&mut reader, &mut line).await {
            Ok(LineRead::Line) => match channel_protocol::decode_line(&line) {
                Ok(frame) => {
                    if myself.cast(AdapterMsg::Frame(Box::new(frame))).is_err() {
                        return;
                    }
                    continue;
                }
                Err(_) => "malformedFrame",
            },
            Ok(LineRead::TooLarge) => "oversizedFrame",
            Ok(LineRead::Closed) | Err(_) => "closed",
        };
        let _ = myself.cast(AdapterMsg::ChannelEnded(why));
        return;
    }
}

/// Commits may make work (a decision to present, or one settled to close); a tick covers a
/// rate limit's end.
async fn wake_on_commits(myself: ActorRef<AdapterMsg>, shared: Arc<Shared>) {
    let mut commits = shared.store.commits();
    loop {
        let _ = tokio::time::timeout(Duration::from_millis(TICK_MS), commits.changed()).await;
        commits.borrow_and_update();
        if myself.cast(AdapterMsg::Wake).is_err() {
            return;
        }
    }
}

async fn on_frame(state: &mut AdapterState, frame: Frame) -> Result<(), ActorProcessingErr> {
    let Some(serving) = state.serving.as_mut() else {
        return Ok(());
    };
    let fenced = frame.header.adapter_epoch == u64::try_from(serving.fence.epoch).unwrap_or(0)
        && frame.header.profile == serving.fence.profile
        && frame.header.sequence == serving.received + 1
        && frame.kind.adapter_sends();
    let message = match fenced {
        true => frame.message().ok(),
        false => None,
    };
    let Some(message) = message else {
        tracing::warn!(profile = %state.args.profile, kind = frame.kind.as_str(), "the channel adapter broke the protocol; stopping it");
        stop_process(serving);
        return Ok(());
    };
    serving.received = frame.header.sequence;
    match message {
        Message::Ready(ready) => on_ready(state, ready.bot.id).await?,
        Message::Settle(settle) => on_settle(state, &frame.header, settle).await?,
        Message::Answer(answer) => on_answer(state, frame.header.channel_revision, answer).await?,
        Message::Exiting(exiting) => serving.exit_reason = Some(exiting.reason),
        Message::Present(_) => {}
    }
    Ok(())
}

async fn on_ready(state: &mut AdapterState, bot_id: i64) -> Result<(), ActorProcessingErr> {
    let args = &state.args;
    if let Err(other) = args.registry.claim_bot(&args.profile, bot_id) {
        // Two token files holding one bot's token: a second long poll would conflict forever.
        tracing::warn!(profile = %args.profile, other = %other, "this profile's token is the bot of another profile; it is stopped: give it its own bot and run `pi-workflows channel reload`");
        let serving = state.serving.as_mut().expect("a frame came from a serving adapter");
        serving.refused = Some(DUPLICATE_BOT);
        stop_process(serving);
        return Ok(());
    }
    state
        .serving
        .as_mut()
        .expect("a frame came from a serving adapter")
        .ready = true;
    let tracked = track_open(state).await?;
    let args = &state.args;
    args.registry.set_status(&args.profile, Shown::Ready, None);
    tracing::info!(profile = %args.profile, tracked, "channel adapter ready");
    work(state).await
}

/// Messages one adapter process remembers having been given (`Serving::tracked`).
const TRACKED_MAX: usize = 4 * store::LISTING_MAX as usize;

fn remember_tracked(serving: &mut Serving, channel_message_id: &str) {
    serving.tracked.push_back(channel_message_id.to_string());
    while serving.tracked.len() > TRACKED_MAX {
        serving.tracked.pop_front();
    }
}

/// Tell the adapter about the open messages it does not track yet (`track`, no attempt):
/// after `channel.ready` all of them; later a send an operator's `recover confirm` opened.
/// Returns how many.
async fn track_open(state: &mut AdapterState) -> Result<usize, ActorProcessingErr> {
    let serving = state.serving.as_mut().expect("a serving adapter");
    let (profile, tracked) = (state.args.profile.clone(), Vec::from(serving.tracked.clone()));
    let open = blocking::read(&state.args.shared.store, move |conn| {
        store::open_messages(conn, &profile, &tracked)
    })
    .await?;
    for message in &open {
        let header = next_header(serving, message.channel_revision, None);
        send(serving, &present_frame(message, header, true)?).await?;
        remember_tracked(serving, &message.channel_message_id);
    }
    Ok(open.len())
}

/// The adapter's settle of the attempt in flight. One that is not exactly that attempt's (its
/// id, channel message and expected channel revision) breaks the protocol: it settles nothing,
/// and the process is stopped (so the attempt it left in flight becomes ambiguous, as for any
/// adapter that dies mid-call).
async fn on_settle(
    state: &mut AdapterState,
    header: &Header,
    settle: channel_protocol::Settle,
) -> Result<(), ActorProcessingErr> {
    let serving = state.serving.as_mut().expect("a frame came from a serving adapter");
    let Some(in_flight) = serving
        .in_flight
        .take_if(|in_flight| in_flight.matches(header, &settle))
    else {
        tracing::warn!(profile = %state.args.profile, "a settle that is not the attempt in flight's (attempt, message or channel revision); stopping the adapter");
        stop_process(serving);
        return Ok(());
    };
    let outcome = match (&settle.outcome, &settle.error) {
        (Outcome::Applied, _) => {
            let reference = settle
                .telegram
                .ok_or("an applied settle without its Telegram message")?;
            AttemptOutcome::Applied {
                chat_id: reference.chat_id,
                message_id: reference.message_id,
            }
        }
        (Outcome::Rejected, Some(error)) if error.uncertain => AttemptOutcome::Uncertain,
        (Outcome::Rejected, error) => {
            let retryable = error.as_ref().is_some_and(|error| error.retryable);
            if let Some(wait) = error.as_ref().and_then(|error| error.retry_after_ms) {
                serving.not_before = Some(Instant::now() + Duration::from_millis(wait.min(RETRY_AFTER_MS_MAX)));
            }
            let code = error.as_ref().map_or("unknown", |error| error.code.as_str());
            tracing::warn!(profile = %state.args.profile, code, retryable, "a channel present was refused");
            AttemptOutcome::Rejected { retryable }
        }
    };
    if matches!(outcome, AttemptOutcome::Applied { .. }) && !serving.tracked.contains(&in_flight.channel_message_id) {
        remember_tracked(serving, &in_flight.channel_message_id);
    }
    let fence = serving.fence.clone();
    let settled = blocking::write(&state.args.shared.store, move |tx| {
        let claim = SettleClaim {
            attempt_id: &in_flight.attempt_id,
            channel_message_id: &in_flight.channel_message_id,
            channel_revision: i64::try_from(in_flight.channel_revision).unwrap_or(i64::MAX),
        };
        store::settle(tx, &fence, &claim, &outcome)
    })
    .await;
    if let Err(err) = settled {
        tracing::warn!(profile = %state.args.profile, error = %err, "a channel settle was refused");
    }
    work(state).await
}

async fn on_answer(
    state: &mut AdapterState,
    channel_revision: u64,
    answer: channel_protocol::Answer,
) -> Result<(), ActorProcessingErr> {
    let args = &state.args;
    // The adapter checks the identities too; the server does not take its word for it.
    let allowed = args.telegram.allowed_user_ids.contains(&answer.from.user_id)
        && args.telegram.allowed_chat_ids.contains(&answer.from.chat_id);
    if !allowed {
        tracing::warn!(profile = %args.profile, "an answer from an identity that is not allowed was ignored");
        return Ok(());
    }
    let fence = state.serving.as_ref().expect("a serving adapter").fence.clone();
    let answered = blocking::write(&args.shared.store, move |tx| {
        let forwarded = ChannelAnswer {
            channel_message_id: &answer.channel_message_id,
            choice: &answer.choice_id,
            text: answer.text.as_deref(),
            wants_text: answer.stage == Stage::WantsText,
            update_id: answer.update_id,
            channel_revision: i64::try_from(channel_revision).unwrap_or(i64::MAX),
            telegram_message_id: answer.telegram_message_id,
        };
        store::answer(tx, &fence, &forwarded)
    })
    .await;
    match answered {
        Ok(Answered::Settled(resolved)) => {
            tracing::info!(profile = %args.profile, decision_id = %crate::printable::printable(&resolved.decision_id), "a decision was answered on Telegram");
            args.shared.wake_scheduler();
        }
        Ok(Answered::Prompted | Answered::Repeated) => {}
        // Settled already, past its deadline, not a choice: the first valid answer won.
        Err(StoreError::Decision(err)) => {
            tracing::info!(profile = %args.profile, code = err.code(), "a Telegram answer did not win")
        }
        Err(err) => tracing::warn!(profile = %args.profile, error = %err, "a Telegram answer was refused"),
    }
    work(state).await
}

/// Make the next present, if the adapter is ready, idle and not held back.
async fn work(state: &mut AdapterState) -> Result<(), ActorProcessingErr> {
    let Some(serving) = state.serving.as_mut() else {
        return Ok(());
    };
    let waiting = serving.not_before.is_some_and(|until| Instant::now() < until);
    if !serving.ready || serving.in_flight.is_some() || waiting {
        return Ok(());
    }
    serving.not_before = None;
    track_open(state).await?;
    let serving = state.serving.as_mut().expect("a serving adapter");
    let (fence, audiences, chats) = (
        serving.fence.clone(),
        state.args.audiences.clone(),
        state.args.telegram.allowed_chat_ids.clone(),
    );
    let next = blocking::write(&state.args.shared.store, move |tx| {
        store::plan(tx, &fence, &audiences, &chats)?;
        store::next_present(tx, &fence)
    })
    .await;
    let present = match next {
        Ok(Some(present)) => present,
        Ok(None) => return Ok(()),
        Err(StoreError::Channel(ChannelError::StaleAdapter { .. })) => {
            stop_process(serving);
            return Ok(());
        }
        Err(err) => return Err(err.into()),
    };
    let header = next_header(serving, present.channel_revision, Some(present.attempt_id.clone()));
    serving.in_flight = Some(InFlight {
        attempt_id: present.attempt_id.clone(),
        channel_message_id: present.channel_message_id.clone(),
        channel_revision: header.channel_revision,
    });
    send(serving, &present_frame(&present, header, false)?).await
}

fn next_header(serving: &mut Serving, channel_revision: i64, attempt_id: Option<String>) -> Header {
    serving.sent += 1;
    Header {
        adapter_epoch: u64::try_from(serving.fence.epoch).unwrap_or(0),
        profile: serving.fence.profile.clone(),
        sequence: serving.sent,
        channel_revision: u64::try_from(channel_revision).unwrap_or(0),
        attempt_id,
    }
}

async fn send(serving: &mut Serving, frame: &Frame) -> Result<(), ActorProcessingErr> {
    let line = channel_protocol::encode_line(frame).map_err(|err| err.to_string())?;
    if let Err(err) = serving.writer.write_all(&line).await {
        // The process is going; its end fails this actor.
        tracing::debug!(error = %err, "the channel adapter's channel closed");
    }
    Ok(())
}

async fn on_channel_ended(state: &mut AdapterState, why: &'static str) {
    let Some(serving) = state.serving.as_mut() else {
        return;
    };
    if why != "closed" {
        tracing::warn!(profile = %state.args.profile, why, "the channel adapter broke the framing; stopping it");
    }
    stop_process(serving);
}

fn stop_process(serving: &Serving) {
    serving.process.stop(Some("channel ended".to_string()));
}

/// The process ended: its in-flight attempt is ambiguous; a refused configuration stops the
/// profile, anything else fails this actor (restarted after a backoff).
async fn on_process_end(state: &mut AdapterState, serving: Serving) -> Result<(), ActorProcessingErr> {
    interrupt(&state.args).await;
    let exit_code = exit_code_of(&serving);
    let refused = serving.refused.is_some()
        || serving.exit_reason == Some(ExitReason::CredentialRejected)
        || exit_code == Some(EXIT_CONFIG);
    let why = match (serving.refused, serving.exit_reason, refused) {
        (Some(why), _, _) => why,
        (None, Some(reason), _) => reason.as_str(),
        (None, None, true) => "launchRefused",
        (None, None, false) => "exited",
    };
    let quickly = serving.started.elapsed() < Duration::from_millis(STABLE_UPTIME_MS);
    let args = &state.args;
    args.registry.note_exit(&args.profile, why, quickly);
    drop(serving);
    if refused {
        tracing::warn!(profile = %args.profile, why, "the channel adapter's configuration was refused; fix it and run `pi-workflows channel reload`");
        args.registry.set_status(&args.profile, Shown::Stopped, None);
        state.stopped = true;
        return Ok(());
    }
    args.registry.set_status(&args.profile, Shown::Starting, None);
    Err(format!("the channel adapter of profile {} ended ({why})", args.profile).into())
}

fn exit_code_of(serving: &Serving) -> Option<i32> {
    *crate::server::shared::lock(&serving.exit_code)
}

async fn interrupt(args: &AdapterArgs) {
    let profile = args.profile.clone();
    match blocking::write(&args.shared.store, move |tx| {
        store::interrupt_applying(tx, Some(&profile))
    })
    .await
    {
        Ok(0) => {}
        Ok(count) => {
            tracing::warn!(profile = %args.profile, count, "a channel attempt in flight is now ambiguous; check Telegram, then `pi-workflows channel recover`")
        }
        Err(err) => {
            tracing::warn!(profile = %args.profile, error = %err, "in-flight channel attempts could not be marked")
        }
    }
}

/// The wait before a start after `quick_deaths` quick deaths in a row.
fn backoff(quick_deaths: u32) -> Duration {
    if quick_deaths == 0 {
        return Duration::ZERO;
    }
    let doublings = quick_deaths.saturating_sub(1).min(16);
    Duration::from_millis((BACKOFF_MS_MIN << doublings).min(BACKOFF_MS_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::channels::{CHANNELS_PERIOD_MS, CHANNELS_RESTARTS_MAX};

    /// A crash loop (every start dies at once) must never reach the `channels` supervisor's
    /// intensity: the restarts that fit in one period, waiting out the backoff each time, stay
    /// below its maximum, however long the loop runs.
    #[test]
    fn a_crash_loop_never_reaches_the_channels_intensity() {
        let period = Duration::from_millis(CHANNELS_PERIOD_MS);
        for first in 1..64 {
            let mut waited = Duration::ZERO;
            let mut restarts = 0;
            for deaths in first.. {
                waited += backoff(deaths);
                if waited > period {
                    break;
                }
                restarts += 1;
            }
            assert!(
                restarts < CHANNELS_RESTARTS_MAX,
                "{restarts} restarts within one period from quick death {first}"
            );
        }
    }
}

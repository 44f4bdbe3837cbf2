//! A source resolver actor: the warm one (a permanent child of `resolvers`, kept started so
//! `run.start` resolves a workflow — source identity, definition snapshot and digest,
//! normalized input — without a Node start-up), or a one-shot `resolver-N` (temporary, for
//! one request while the warm one is busy). Its Node child (`resolver-main.js --serve`) is
//! owned by a linked `ProcessActor`; requests go one at a time over its private channel
//! (fd 3), each bounded in time and size.
//!
//! - A process that does not answer within the timeout is killed: the workflow "did not
//!   finish loading" (a loop or a never-settling await at its top level), and no other
//!   request waits behind it longer than that.
//! - A process that answers badly or has served its quota is stopped and replaced inside
//!   this actor (the tree does not count that as a restart).
//! - A process that dies on its own (a crash, a kill) fails this actor, so its supervisor
//!   restarts it: the restart shows in the tree, and the new actor starts a new process,
//!   after a backoff when processes keep dying right after their start.
//!
//! Architecture Invariant: the resolver only reads workflow sources and answers; it never
//! touches the store. Its answer is checked like any client payload (`run.start`).

use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::{Map, Value};
use supervisors::{ProcessActor, ProcessConfig, ProcessMsg, Readiness};
use tokio::io::{AsyncWriteExt, BufReader};

use super::mailbox::{Resolution, ResolveFailure, ResolverJob, ResolverMsg};
use super::registry::ResolverArgs;
use crate::protocol::{decode_frame, encode_frame};
use crate::server::frames::{LineRead, read_line};
use crate::server::socket;
use crate::server::spawn::spawn_with_channel;

/// Requests one resolver process serves before it is replaced; the same bound as
/// `SERVED_REQUESTS_MAX` in `resolver-main.ts`. The process also retires itself earlier,
/// after `SERVED_IMPORTS_MAX` fresh imports (each stays in its memory), and says so in its
/// last answer (`retiring`), so a repeated start of an unchanged workflow never replaces it.
pub const SERVED_REQUESTS_MAX: u64 = 4096;
/// A process that dies within this time of its start counts as a quick death.
const QUICK_DEATH_MS: u64 = 10_000;
/// The first and the longest wait before starting again after quick deaths.
const BACKOFF_MS_MIN: u64 = 250;
const BACKOFF_MS_MAX: u64 = 30_000;
/// How long a replaced process may take to stop.
const REPLACE_GRACE_MS: u64 = 500;

pub struct Resolver;

pub struct ResolverState {
    args: ResolverArgs,
    serving: Option<Serving>,
}

/// One live resolver process and the server's end of its channel.
struct Serving {
    process: ActorRef<ProcessMsg>,
    reader: BufReader<socket::ReadHalf>,
    writer: socket::WriteHalf,
    next_id: u64,
    started: Instant,
    /// Its last answer said it exits now (an import or request quota is spent).
    retiring: bool,
}

impl Serving {
    /// It exits by itself after its current answer: its end is expected, not a failure.
    fn spent(&self) -> bool {
        self.retiring || self.next_id >= SERVED_REQUESTS_MAX
    }
}

impl Actor for Resolver {
    type Msg = ResolverMsg;
    type State = ResolverState;
    type Arguments = ResolverArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ResolverMsg>,
        args: ResolverArgs,
    ) -> Result<ResolverState, ActorProcessingErr> {
        if args.warm {
            args.registry.set_current(Some(myself.clone()));
            match backoff(args.registry.quick_deaths()) {
                Duration::ZERO => drop(myself.cast(ResolverMsg::Prewarm)),
                wait => drop(myself.send_after(wait, || ResolverMsg::Prewarm)),
            }
        }
        Ok(ResolverState { args, serving: None })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<ResolverMsg>,
        state: &mut ResolverState,
    ) -> Result<(), ActorProcessingErr> {
        if state.args.warm {
            state.args.registry.clear_current(&myself);
        }
        retire(state).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ResolverMsg>,
        message: ResolverMsg,
        state: &mut ResolverState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ResolverMsg::Prewarm if state.serving.is_none() => {
                if let Err(err) = start(&myself, state).await {
                    tracing::warn!(error = %err, "no warm resolver; the next run start tries again");
                }
            }
            ResolverMsg::Prewarm => {}
            ResolverMsg::Resolve(job, reply) => {
                let resolution = resolve(&myself, state, job).await;
                let _ = reply.send(resolution);
                if !state.args.warm {
                    // A one-shot resolver served its one request.
                    myself.stop(Some("served".to_string()));
                    return Ok(());
                }
                if state.serving.as_ref().is_some_and(Serving::spent) {
                    retire(state).await;
                }
                if state.serving.is_none() {
                    // Its process was replaced or retired: start the next one ahead of the
                    // next request.
                    let _ = myself.cast(ResolverMsg::Prewarm);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<ResolverMsg>,
        event: SupervisionEvent,
        state: &mut ResolverState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, normal, why) = match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => (cell, true, reason.unwrap_or_default()),
            SupervisionEvent::ActorFailed(cell, err) => (cell, false, err.to_string()),
            _ => return Ok(()),
        };
        // A process this actor replaced ends as asked; only the serving one's end matters.
        let Some(serving) = state
            .serving
            .take_if(|serving| serving.process.get_id() == cell.get_id())
        else {
            return Ok(());
        };
        if normal && serving.spent() {
            // It served its quota and exited by itself, as it should: the next request
            // starts a new one.
            return Ok(());
        }
        if !state.args.warm {
            return Ok(());
        }
        let quickly = serving.started.elapsed() < Duration::from_millis(QUICK_DEATH_MS);
        state.args.registry.note_death(quickly);
        Err(format!("the resolver process ended on its own ({why})").into())
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

/// The job's timeout bounds each try. A resolver that fails is replaced; one that had served
/// before is tried once more with a fresh process (it may have died of old age between
/// requests). One that times out is not tried again: the workflow itself does not finish
/// loading.
async fn resolve(myself: &ActorRef<ResolverMsg>, state: &mut ResolverState, job: ResolverJob) -> Resolution {
    let ResolverJob { mut request, timeout } = job;
    for _ in 0..2 {
        // A spent process was retired right after its last answer (`handle`).
        if state.serving.is_none() {
            start(myself, state)
                .await
                .map_err(|err| ResolveFailure::Unavailable(err.to_string()))?;
        }
        let serving = state.serving.as_mut().expect("a resolver process was just started");
        serving.next_id += 1;
        let fresh = serving.next_id == 1;
        request["id"] = Value::from(serving.next_id);
        let why = match tokio::time::timeout(timeout, exchange(serving, &request)).await {
            Ok(Ok(reply)) => {
                state.args.registry.note_healthy();
                serving.retiring = reply.get("retiring") == Some(&Value::Bool(true));
                return answer_of(reply);
            }
            Ok(Err(why)) => why,
            Err(_) => {
                retire(state).await;
                return Err(ResolveFailure::TimedOut {
                    seconds: timeout.as_secs().max(1),
                });
            }
        };
        // A resolver that failed once is not trusted again.
        retire(state).await;
        if fresh {
            return Err(ResolveFailure::Unavailable(why));
        }
    }
    Err(ResolveFailure::Unavailable("the resolver failed twice".to_string()))
}

/// Start a resolver process owned by a linked `ProcessActor`.
async fn start(myself: &ActorRef<ResolverMsg>, state: &mut ResolverState) -> anyhow::Result<()> {
    let registry = &state.args.registry;
    let Some(program) = registry.program.as_ref() else {
        anyhow::bail!("the pi-workflows package or node was not found when the server started (see the server log)");
    };
    let log_stem = format!("resolver-e{}-{}", registry.server_epoch, registry.next_process_number());
    let (child, parent_end) = spawn_with_channel(&registry.settings, program, &log_stem, None)?;
    let config = ProcessConfig::adopt(child, Readiness::Immediate).with_details(state.args.details.clone());
    let (process, _) = Actor::spawn_linked(None, ProcessActor, config, myself.get_cell())
        .await
        .map_err(|err| anyhow::anyhow!("the resolver process could not be supervised: {err}"))?;
    let (read_half, writer) = socket::split(parent_end)?;
    state.serving = Some(Serving {
        process,
        reader: BufReader::new(read_half),
        writer,
        next_id: 0,
        started: Instant::now(),
        retiring: false,
    });
    Ok(())
}

/// Stop the serving process (if any) and forget it: its end is not a failure.
async fn retire(state: &mut ResolverState) {
    let Some(serving) = state.serving.take() else {
        return;
    };
    let grace = Duration::from_millis(REPLACE_GRACE_MS);
    let wait = Some(supervisors::process_shutdown_wait(grace));
    let _ = serving
        .process
        .call(|reply| ProcessMsg::Terminate(grace, reply), wait)
        .await;
}

async fn exchange(serving: &mut Serving, request: &Value) -> Result<Map<String, Value>, String> {
    let bytes = encode_frame(request).map_err(|err| err.to_string())?;
    serving.writer.write_all(&bytes).await.map_err(|err| err.to_string())?;
    let mut line = Vec::new();
    match read_line(&mut serving.reader, &mut line).await {
        Ok(LineRead::Line) => {}
        Ok(LineRead::TooLarge) => return Err("the resolver answered above the 1 MiB frame limit".to_string()),
        Ok(LineRead::Closed) => return Err("the resolver exited".to_string()),
        Err(err) => return Err(err.to_string()),
    }
    let reply = decode_frame(&line).map_err(|err| format!("the resolver answered a bad frame: {err}"))?;
    if reply.get("id") != request.get("id") {
        return Err("the resolver answered another request".to_string());
    }
    Ok(reply)
}

fn answer_of(reply: Map<String, Value>) -> Resolution {
    if let Some(error) = reply.get("error") {
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        return Err(ResolveFailure::Workflow {
            code: text("code"),
            message: text("message"),
        });
    }
    match reply.get("answer") {
        Some(Value::Object(answer)) => Ok(answer.clone()),
        _ => Err(ResolveFailure::Unavailable(
            "the resolver answered without an answer".to_string(),
        )),
    }
}

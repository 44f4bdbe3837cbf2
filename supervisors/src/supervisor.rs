//! The supervisor actor: OTP semantics on top of ractor's links.
//!
//! ractor only delivers `SupervisionEvent`s; its default handler stops the supervisor when any
//! child exits. This actor overrides it and implements strategies, restart types, restart
//! intensity with escalation, ordered start and reverse-ordered stop.
//!
//! Architecture Invariant: a supervisor knows children only through `ChildSpec`s; it never
//! knows what a child does (no workflow, run or database knowledge).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::mpsc;

use crate::snapshot::{DetailsCell, NodeState, TreeSnapshot};
use crate::spec::{ChildKind, ChildSpec, INTENSITY_RESTARTS_MAX, Intensity, Restart, Shutdown, Strategy};

/// Children per supervisor at most (runners are bounded by the scheduler well below this).
pub const CHILDREN_MAX: usize = 4_096;
/// How long a supervisor waits for a nested supervisor's snapshot.
pub const SNAPSHOT_CALL_TIMEOUT_MS: u64 = 1_000;
/// Reports buffered for an observer; later ones are dropped (and counted) rather than block.
pub const OBSERVER_QUEUE_LEN: usize = 256;

/// What a supervisor is started with.
#[derive(Debug, Clone)]
pub struct SupervisorSpec {
    pub id: String,
    pub strategy: Strategy,
    pub intensity: Intensity,
    pub children: Vec<ChildSpec>,
    /// Optional observer of lifecycle reports (tests, examples, the server's log).
    pub observer: Option<mpsc::Sender<Report>>,
    /// Facts the supervisor's owner shows on this node (e.g. the root's epoch).
    pub details: Option<DetailsCell>,
}

impl SupervisorSpec {
    pub fn new(id: impl Into<String>, strategy: Strategy) -> Self {
        Self {
            id: id.into(),
            strategy,
            intensity: Intensity::default(),
            children: Vec::new(),
            observer: None,
            details: None,
        }
    }

    pub fn with_details(mut self, details: DetailsCell) -> Self {
        self.details = Some(details);
        self
    }

    pub fn with_intensity(mut self, max_restarts: u32, period: Duration) -> Self {
        assert!(
            max_restarts <= INTENSITY_RESTARTS_MAX,
            "restart intensity above the maximum"
        );
        self.intensity = Intensity { max_restarts, period };
        self
    }

    pub fn with_child(mut self, child: ChildSpec) -> Self {
        self.children.push(child);
        self
    }

    pub fn with_observer(mut self, observer: mpsc::Sender<Report>) -> Self {
        self.observer = Some(observer);
        self
    }
}

/// A lifecycle fact reported to the observer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Started {
        supervisor: String,
        child: String,
    },
    Exited {
        supervisor: String,
        child: String,
        abnormal: bool,
        reason: Option<String>,
    },
    Restarted {
        supervisor: String,
        child: String,
        restarts: u32,
    },
    Stopped {
        supervisor: String,
        child: String,
    },
    /// Too many restarts: the supervisor stopped its children and failed.
    Escalated {
        supervisor: String,
        restarts_in_period: usize,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("a child named {0} already exists under this supervisor")]
    DuplicateChild(String),
    #[error("no child named {0} under this supervisor")]
    UnknownChild(String),
    #[error("this supervisor already has {CHILDREN_MAX} children")]
    TooManyChildren,
    #[error("child {id} failed to start: {reason}")]
    StartFailed { id: String, reason: String },
}

/// Messages of the supervisor actor.
pub enum SupervisorMsg {
    /// Add and start a child (e.g. one runner per run generation).
    StartChild(ChildSpec, RpcReplyPort<Result<(), SupervisorError>>),
    /// Stop a child with its shutdown spec and remove it.
    TerminateChild(String, RpcReplyPort<Result<(), SupervisorError>>),
    Snapshot(RpcReplyPort<TreeSnapshot>),
    /// The running instance of a child, if any (OTP's `which_children` for one id).
    Child(String, RpcReplyPort<Option<ActorCell>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChildStatus {
    Running,
    Stopping,
    Stopped,
}

struct Child {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    restarts: u32,
    status: ChildStatus,
    /// Added by `StartChild`: removed once it exits for good (as in OTP's
    /// simple_one_for_one), so short-lived children cannot pile up as stopped entries.
    dynamic: bool,
}

pub struct SupervisorState {
    id: String,
    strategy: Strategy,
    intensity: Intensity,
    observer: Option<mpsc::Sender<Report>>,
    details: Option<DetailsCell>,
    children: Vec<Child>,
    restart_times: VecDeque<Instant>,
    reports_dropped: u64,
}

/// The supervisor actor. Spawn it with a `SupervisorSpec`.
pub struct Supervisor;

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorSpec;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        spec: SupervisorSpec,
    ) -> Result<Self::State, ActorProcessingErr> {
        assert!(
            spec.children.len() <= CHILDREN_MAX,
            "too many children in a supervisor spec"
        );
        let mut state = SupervisorState {
            id: spec.id,
            strategy: spec.strategy,
            intensity: spec.intensity,
            observer: spec.observer,
            details: spec.details,
            children: Vec::with_capacity(spec.children.len()),
            restart_times: VecDeque::new(),
            reports_dropped: 0,
        };
        for child_spec in spec.children {
            state.children.push(Child {
                spec: child_spec,
                cell: None,
                restarts: 0,
                status: ChildStatus::Stopped,
                dynamic: false,
            });
        }
        // Start in order; if one fails, stop those already started (reverse) and fail.
        for index in 0..state.children.len() {
            if let Err(err) = start_child(&myself, &mut state, index).await {
                stop_children(&mut state, 0..index).await;
                return Err(Box::new(err));
            }
        }
        Ok(state)
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        let all = 0..state.children.len();
        stop_children(state, all).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::StartChild(spec, reply) => {
                let result = add_child(&myself, state, spec).await;
                let _ = reply.send(result);
            }
            SupervisorMsg::TerminateChild(id, reply) => {
                let result = terminate_child(state, &id).await;
                let _ = reply.send(result);
            }
            SupervisorMsg::Snapshot(reply) => {
                let _ = reply.send(snapshot(state).await);
            }
            SupervisorMsg::Child(id, reply) => {
                let cell = state
                    .children
                    .iter()
                    .find(|child| child.spec.id == id)
                    .and_then(|child| child.cell.clone());
                let _ = reply.send(cell);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, abnormal, reason) = match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => (cell, false, reason),
            SupervisionEvent::ActorFailed(cell, err) => (cell, true, Some(err.to_string())),
            _ => return Ok(()),
        };
        on_child_exit(&myself, state, cell.get_id(), abnormal, reason).await
    }
}

fn report(state: &mut SupervisorState, report: Report) {
    tracing::debug!(?report, "supervision");
    if let Some(observer) = &state.observer
        && observer.try_send(report).is_err()
    {
        state.reports_dropped += 1;
    }
}

async fn start_child(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    index: usize,
) -> Result<(), SupervisorError> {
    let child = &mut state.children[index];
    let started = (child.spec.start)(myself.get_cell()).await;
    let id = child.spec.id.clone();
    match started {
        Ok(cell) => {
            child.cell = Some(cell);
            child.status = ChildStatus::Running;
            let supervisor = state.id.clone();
            report(state, Report::Started { supervisor, child: id });
            Ok(())
        }
        Err(err) => Err(SupervisorError::StartFailed {
            id,
            reason: err.to_string(),
        }),
    }
}

async fn add_child(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    spec: ChildSpec,
) -> Result<(), SupervisorError> {
    if state.children.iter().any(|child| child.spec.id == spec.id) {
        return Err(SupervisorError::DuplicateChild(spec.id));
    }
    if state.children.len() >= CHILDREN_MAX {
        return Err(SupervisorError::TooManyChildren);
    }
    state.children.push(Child {
        spec,
        cell: None,
        restarts: 0,
        status: ChildStatus::Stopped,
        dynamic: true,
    });
    let index = state.children.len() - 1;
    let started = start_child(myself, state, index).await;
    if started.is_err() {
        state.children.pop();
    }
    started
}

async fn terminate_child(state: &mut SupervisorState, id: &str) -> Result<(), SupervisorError> {
    let index = state
        .children
        .iter()
        .position(|child| child.spec.id == id)
        .ok_or_else(|| SupervisorError::UnknownChild(id.to_string()))?;
    stop_children(state, index..index + 1).await;
    state.children.remove(index);
    Ok(())
}

/// Stop the running children in `range`, last first, each with its shutdown spec.
async fn stop_children(state: &mut SupervisorState, range: std::ops::Range<usize>) {
    for index in range.rev() {
        let Some(cell) = state.children[index].cell.take() else {
            continue;
        };
        state.children[index].status = ChildStatus::Stopping;
        let _ = stop_cell(&cell, state.children[index].spec.shutdown).await;
        state.children[index].status = ChildStatus::Stopped;
        let (supervisor, child) = (state.id.clone(), state.children[index].spec.id.clone());
        report(state, Report::Stopped { supervisor, child });
    }
}

/// How a child's stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopOutcome {
    /// It stopped within its wait (or was already stopping and ended within it).
    Stopped,
    /// It was killed: it did not stop within its wait, or its spec says `BrutalKill`.
    Killed,
}

async fn stop_cell(cell: &ActorCell, shutdown: Shutdown) -> StopOutcome {
    let wait = match shutdown {
        Shutdown::Timeout(wait) => wait,
        Shutdown::BrutalKill => {
            let _ = cell
                .kill_and_wait(Some(Duration::from_millis(crate::spec::SHUTDOWN_TIMEOUT_MS_DEFAULT)))
                .await;
            return StopOutcome::Killed;
        }
    };
    let stopped = match cell.stop_and_wait(Some("shutdown".to_string()), Some(wait)).await {
        Ok(()) => true,
        Err(ractor::RactorErr::Timeout) => false,
        // The stop could not be sent: the child is already ending on its own (a task that
        // ends with the server, say); wait for that as for any stop.
        Err(_) => cell.wait(Some(wait)).await.is_ok(),
    };
    if stopped {
        return StopOutcome::Stopped;
    }
    tracing::warn!(
        wait_ms = wait.as_millis() as u64,
        "child did not stop in time; killing it"
    );
    let _ = cell.kill_and_wait(Some(wait)).await;
    StopOutcome::Killed
}

async fn on_child_exit(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    exited: ActorId,
    abnormal: bool,
    reason: Option<String>,
) -> Result<(), ActorProcessingErr> {
    // Exits of children we are stopping ourselves, or of older instances, are expected.
    let Some(index) = state.children.iter().position(|child| {
        child.status == ChildStatus::Running && child.cell.as_ref().is_some_and(|cell| cell.get_id() == exited)
    }) else {
        return Ok(());
    };
    let child = &mut state.children[index];
    child.cell = None;
    child.status = ChildStatus::Stopped;
    let (supervisor, id, restart, dynamic) = (
        state.id.clone(),
        child.spec.id.clone(),
        child.spec.restart,
        child.dynamic,
    );
    report(
        state,
        Report::Exited {
            supervisor,
            child: id,
            abnormal,
            reason,
        },
    );
    match restart {
        Restart::Temporary => {
            state.children.remove(index);
            Ok(())
        }
        Restart::Transient if !abnormal && dynamic => {
            state.children.remove(index);
            Ok(())
        }
        Restart::Transient if !abnormal => Ok(()),
        Restart::Permanent | Restart::Transient => restart_after_exit(myself, state, index).await,
    }
}

/// Count the restart against the intensity, then apply the strategy.
async fn restart_after_exit(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    index: usize,
) -> Result<(), ActorProcessingErr> {
    let now = Instant::now();
    state.restart_times.push_back(now);
    while state
        .restart_times
        .front()
        .is_some_and(|at| now.duration_since(*at) > state.intensity.period)
    {
        state.restart_times.pop_front();
    }
    if state.restart_times.len() > state.intensity.max_restarts as usize {
        return escalate(state).await;
    }
    let range = match state.strategy {
        Strategy::OneForOne => index..index + 1,
        Strategy::OneForAll => 0..state.children.len(),
        Strategy::RestForOne => index..state.children.len(),
    };
    stop_children(state, range.clone()).await;
    // Temporary siblings stopped by the strategy are not restarted (OTP).
    let mut restart_range = range.clone();
    for position in range.rev() {
        if position != index && state.children[position].spec.restart == Restart::Temporary {
            state.children.remove(position);
            restart_range.end -= 1;
        }
    }
    for position in restart_range {
        if let Err(err) = start_child(myself, state, position).await {
            tracing::warn!(error = %err, "restart failed; escalating");
            return escalate(state).await;
        }
        let child = &mut state.children[position];
        child.restarts += 1;
        let (supervisor, id, restarts) = (state.id.clone(), child.spec.id.clone(), child.restarts);
        report(
            state,
            Report::Restarted {
                supervisor,
                child: id,
                restarts,
            },
        );
    }
    Ok(())
}

/// Stop every child (reverse order) and fail, so the parent applies its own strategy.
async fn escalate(state: &mut SupervisorState) -> Result<(), ActorProcessingErr> {
    let restarts_in_period = state.restart_times.len();
    let all = 0..state.children.len();
    stop_children(state, all).await;
    let supervisor = state.id.clone();
    report(
        state,
        Report::Escalated {
            supervisor: supervisor.clone(),
            restarts_in_period,
        },
    );
    Err(
        format!("supervisor {supervisor} reached its restart intensity ({restarts_in_period} restarts in the period)")
            .into(),
    )
}

async fn snapshot(state: &SupervisorState) -> TreeSnapshot {
    let mut children = Vec::with_capacity(state.children.len());
    for child in &state.children {
        children.push(child_snapshot(child).await);
    }
    TreeSnapshot {
        id: state.id.clone(),
        kind: ChildKind::Supervisor,
        strategy: Some(state.strategy),
        restart: None,
        state: NodeState::Running,
        restarts: 0,
        label: None,
        details: state.details.as_ref().map(DetailsCell::get).unwrap_or_default(),
        children,
    }
}

async fn child_snapshot(child: &Child) -> TreeSnapshot {
    let state = match child.status {
        ChildStatus::Running => NodeState::Running,
        ChildStatus::Stopping => NodeState::Stopping,
        ChildStatus::Stopped => NodeState::Stopped,
    };
    let leaf = TreeSnapshot {
        id: child.spec.id.clone(),
        kind: child.spec.kind,
        strategy: None,
        restart: Some(child.spec.restart),
        state,
        restarts: child.restarts,
        label: child.spec.label.clone(),
        // A stopped child owns nothing, whatever its cell last said.
        details: match (child.status, &child.spec.details) {
            (ChildStatus::Running | ChildStatus::Stopping, Some(cell)) => cell.get(),
            _ => Default::default(),
        },
        children: Vec::new(),
    };
    let (ChildKind::Supervisor, Some(cell)) = (child.spec.kind, child.cell.as_ref()) else {
        return leaf;
    };
    let nested: ActorRef<SupervisorMsg> = cell.clone().into();
    let timeout = Duration::from_millis(SNAPSHOT_CALL_TIMEOUT_MS);
    match nested.call(SupervisorMsg::Snapshot, Some(timeout)).await {
        Ok(ractor::rpc::CallResult::Success(inner)) => TreeSnapshot {
            id: leaf.id,
            restart: leaf.restart,
            restarts: leaf.restarts,
            label: leaf.label,
            details: if leaf.details.is_empty() {
                inner.details
            } else {
                leaf.details
            },
            ..inner
        },
        _ => TreeSnapshot {
            state: NodeState::Unresponsive,
            ..leaf
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that ends on its own when told, and takes `Arguments` to clean up when it stops.
    struct Worker;

    struct EndNow;

    impl Actor for Worker {
        type Msg = EndNow;
        type State = Duration;
        type Arguments = Duration;

        async fn pre_start(&self, _: ActorRef<EndNow>, cleanup: Duration) -> Result<Duration, ActorProcessingErr> {
            Ok(cleanup)
        }

        async fn handle(
            &self,
            myself: ActorRef<EndNow>,
            _: EndNow,
            _: &mut Duration,
        ) -> Result<(), ActorProcessingErr> {
            myself.stop(None);
            Ok(())
        }

        async fn post_stop(&self, _: ActorRef<EndNow>, cleanup: &mut Duration) -> Result<(), ActorProcessingErr> {
            tokio::time::sleep(*cleanup).await;
            Ok(())
        }
    }

    const WAIT: Duration = Duration::from_millis(200);

    #[tokio::test]
    async fn a_child_already_ending_on_its_own_is_stopped_not_killed() {
        let (worker, handle) = Actor::spawn(None, Worker, Duration::ZERO).await.expect("spawn");
        worker.cast(EndNow).expect("cast");
        handle.await.expect("the worker ended");
        assert_eq!(
            stop_cell(&worker.get_cell(), Shutdown::Timeout(WAIT)).await,
            StopOutcome::Stopped
        );
    }

    #[tokio::test]
    async fn a_child_that_does_not_stop_within_its_wait_is_killed() {
        let (worker, handle) = Actor::spawn(None, Worker, WAIT * 20).await.expect("spawn");
        assert_eq!(
            stop_cell(&worker.get_cell(), Shutdown::Timeout(WAIT)).await,
            StopOutcome::Killed
        );
        handle.await.expect("the worker ended");
        // A stop that ends within the wait is a stop.
        let (worker, handle) = Actor::spawn(None, Worker, Duration::ZERO).await.expect("spawn");
        assert_eq!(
            stop_cell(&worker.get_cell(), Shutdown::Timeout(WAIT)).await,
            StopOutcome::Stopped
        );
        handle.await.expect("the worker ended");
    }
}

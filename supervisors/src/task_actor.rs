//! A long-running async task as a supervised child: the actor starts the task and follows
//! it. The task returning `Ok` is a normal exit, an `Err` or a panic is a failure, so the
//! supervisor's restart type applies (a detached `tokio::spawn` would die unnoticed).
//! Stopping the actor aborts the task at its next await point.
//!
//! A task that must survive its own restart keeps what matters where the factory can find
//! it again (its inputs, a shared channel) and rebuilds the rest from its source of truth.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::{AbortHandle, JoinHandle};

use crate::spec::{ChildSpec, Restart};

pub type TaskFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
/// Builds the task anew at every (re)start.
pub type TaskFactory = Arc<dyn Fn() -> TaskFuture + Send + Sync>;

pub struct TaskActor;

pub enum TaskMsg {
    /// The task ended: `Ok` normally, `Err` with why (an error or a panic).
    Ended(Result<(), String>),
}

pub struct TaskState {
    /// The task itself and the watcher that reports its end.
    running: Option<(AbortHandle, JoinHandle<()>)>,
}

impl Actor for TaskActor {
    type Msg = TaskMsg;
    type State = TaskState;
    type Arguments = TaskFactory;

    async fn pre_start(
        &self,
        myself: ActorRef<TaskMsg>,
        factory: TaskFactory,
    ) -> Result<TaskState, ActorProcessingErr> {
        let work = tokio::spawn(factory());
        let abort = work.abort_handle();
        let watcher = tokio::spawn(async move {
            let ended = match work.await {
                Ok(result) => result,
                Err(err) if err.is_panic() => Err("the task panicked".to_string()),
                Err(_) => Err("the task was cancelled".to_string()),
            };
            let _ = myself.cast(TaskMsg::Ended(ended));
        });
        Ok(TaskState {
            running: Some((abort, watcher)),
        })
    }

    async fn post_stop(&self, _: ActorRef<TaskMsg>, state: &mut TaskState) -> Result<(), ActorProcessingErr> {
        if let Some((work, watcher)) = state.running.take() {
            watcher.abort();
            work.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<TaskMsg>,
        message: TaskMsg,
        state: &mut TaskState,
    ) -> Result<(), ActorProcessingErr> {
        let TaskMsg::Ended(ended) = message;
        state.running = None;
        match ended {
            Ok(()) => {
                myself.stop(Some("task ended".to_string()));
                Ok(())
            }
            Err(why) => Err(why.into()),
        }
    }
}

impl ChildSpec {
    /// A child that runs `factory()`'s future until it ends.
    pub fn task<F, Fut>(id: impl Into<String>, restart: Restart, factory: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let factory: TaskFactory = Arc::new(move || Box::pin(factory()));
        Self::worker(id, restart, move || (TaskActor, Arc::clone(&factory)))
    }
}

//! OTP-style supervision for actors and OS processes, on ractor.
//!
//! - `Supervisor` + `SupervisorSpec`: strategies (one_for_one, one_for_all, rest_for_one),
//!   restart types (permanent, transient, temporary), restart intensity with escalation,
//!   shutdown by timeout-then-kill or brutal kill, start in order and stop in reverse.
//! - `process`: one OS child process in its own process group, with a persisted start
//!   identity, bounded output capture, SIGTERM-then-SIGKILL of the whole group and reaping
//!   by exact pid.
//! - `ProcessActor`: one OS process as a supervised child (ready deadline, exit, SIGTERM then
//!   SIGKILL of its group, start identity, adoption of a pre-started process).
//! - `TaskActor` (`ChildSpec::task`): a long-running async task as a supervised child.
//! - `Fence`: epoch + generation stamps that refuse stale children's messages.
//! - `TreeSnapshot`: the live tree for introspection, with each child's details (its
//!   processes, generation, epoch).
//!
//! Architecture Invariant: this crate knows nothing about workflows, runs or databases.

pub mod fence;
pub mod process;
pub mod process_actor;
pub mod snapshot;
pub mod spec;
pub mod supervisor;
pub mod task_actor;

pub use fence::{Fence, Refused, Stamp};
pub use process_actor::{EndCause, ProcessActor, ProcessConfig, ProcessEnd, ProcessMsg, Readiness};
pub use snapshot::{ChildDetails, DetailsCell, NodeState, ProcessInfo, TreeSnapshot};
pub use spec::{ChildKind, ChildSpec, Intensity, Restart, Shutdown, Strategy, process_shutdown_wait};
pub use supervisor::{Report, Supervisor, SupervisorError, SupervisorMsg, SupervisorSpec};
pub use task_actor::{TaskActor, TaskMsg};

//! OTP-style supervision for actors and OS processes, on ractor.
//!
//! - `Supervisor` + `SupervisorSpec`: strategies (one_for_one, one_for_all, rest_for_one),
//!   restart types (permanent, transient, temporary), restart intensity with escalation,
//!   shutdown by timeout-then-kill or brutal kill, start in order and stop in reverse.
//! - `process`: one OS child process in its own process group, with a persisted start
//!   identity, bounded output capture, SIGTERM-then-SIGKILL of the whole group and reaping
//!   by exact pid.
//! - `TreeSnapshot`: the live tree for introspection.
//!
//! Architecture Invariant: this crate knows nothing about workflows, runs or databases.

pub mod fence;
pub mod process;
pub mod process_actor;
pub mod snapshot;
pub mod spec;
pub mod supervisor;

pub use fence::{Fence, Refused, Stamp};
pub use process_actor::{ProcessActor, ProcessConfig, ProcessMsg, Readiness};
pub use snapshot::{NodeState, TreeSnapshot};
pub use spec::{ChildKind, ChildSpec, Intensity, Restart, Shutdown, Strategy};
pub use supervisor::{Report, Supervisor, SupervisorError, SupervisorMsg, SupervisorSpec};

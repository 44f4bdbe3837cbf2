//! The resolver actors' messages and arguments, apart from the actors, so the handle and
//! the actors can both name them without importing each other.

use std::time::Duration;

use ractor::RpcReplyPort;
use serde_json::{Map, Value};

/// Why a resolution gave no answer.
#[derive(Debug)]
pub enum ResolveFailure {
    /// The workflow itself: not found, an invalid definition, rejected input.
    Workflow { code: String, message: String },
    /// The workflow did not finish loading in time (its resolver process was killed).
    TimedOut { seconds: u64 },
    /// Every resolver is busy loading other workflows.
    Busy,
    /// The resolver could not run (no Node, a crash).
    Unavailable(String),
}

pub type Resolution = Result<Map<String, Value>, ResolveFailure>;

/// One request for a resolver process and how long its answer may take (then the process is
/// killed: the workflow code did not finish).
pub struct ResolverJob {
    /// `{target, project, inputJson?}` (a resolution) or `{list: {...}}` (a listing).
    pub request: Value,
    pub timeout: Duration,
}

pub enum ResolverMsg {
    /// Answer one job.
    Resolve(ResolverJob, RpcReplyPort<Resolution>),
    /// Start the Node process ahead of the first request.
    Prewarm,
}

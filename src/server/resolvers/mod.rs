//! The `resolvers` subtree: the warm source resolver child and the handle `run.start` asks.
//!
//! Architecture Invariant: a resolver never touches the store and never runs a workflow.

pub mod handle;
pub mod mailbox;
pub mod registry;
pub mod resolver;
pub mod reuse;

//! Presentation shared by every renderer: the `display` rules, the
//! `pi-workflows.run-view.v1` document, run-list items and merge patches between views.
//!
//! Architecture Invariant: pure functions of facts read by `store::run_view`; no I/O, no
//! SQL, no server state. A renderer draws from these documents and never infers status
//! from durable rows.

pub mod display;
pub mod document;
pub mod list;
pub mod patch;

//! Live views: building run views (and caching what they show of definitions) and origin-session
//! views, and the feeds that rebuild them after commits for subscribed clients.
//!
//! Architecture Invariant: views only read, except storing the content a view names.

pub mod cache;
pub mod feeds;
pub mod pace;
pub mod sessions;

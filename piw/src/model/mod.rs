//! What piw knows about runs: typed readings of the server's documents, the attempts seen,
//! and the graph layout. No I/O.

pub mod attempts;
pub mod graph;
pub mod view;

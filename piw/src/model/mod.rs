//! What piw knows about runs: typed readings of the server's documents, the attempts seen,
//! the attempt values read, and the graph layout. No I/O.

pub mod attempts;
pub mod graph;
pub mod older;
pub mod values;
pub mod view;

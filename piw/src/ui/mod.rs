//! The terminal UI: state (`app`), drawing (`draw` and one module per pane), input
//! (`keys`), themes, and the plain-text frame of `--once`.

pub mod app;
pub mod browser;
pub mod draw;
pub mod graph;
pub mod inspector;
pub mod keys;
pub mod text;
pub mod theme;
pub mod timeline;

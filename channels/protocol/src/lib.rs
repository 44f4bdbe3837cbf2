//! The private channel protocol v1 between the pi-workflows server and one channel adapter
//! child (docs/CHANNEL-PROTOCOL.md).
//!
//! An adapter is transport only: it receives a complete presentation, shows it on its channel
//! and reports what happened and what allowed people answered. This crate is the shared
//! vocabulary of both ends:
//!
//! - [`launch`]: the launch envelope the server puts in [`launch::LAUNCH_ENV`];
//! - [`frame`]: the envelope every line carries ([`Frame`]), canonical encoding
//!   ([`encode_line`]) and strict decoding ([`decode_line`]);
//! - [`reader`]: a bounded line reader over any [`std::io::BufRead`] ([`LineReader`]);
//! - [`payload`]: one struct per message kind, closed enums for operations, outcomes, error
//!   codes and exit reasons, and [`Message`] (a kind with its typed payload);
//! - [`limits`]: the checks a presentation must pass before an adapter shows it;
//! - [`exit`]: the adapter's process exit codes.
//!
//! Nothing here does I/O beyond reading from a caller's reader.

pub mod exit;
pub mod frame;
pub mod launch;
pub mod limits;
pub mod payload;
pub mod reader;

pub use frame::{FRAME_BYTES_MAX, Frame, FrameError, Header, Kind, PROTOCOL, decode_line, encode_line};
pub use launch::{ChannelLaunch, LaunchError};
pub use limits::PayloadError;
pub use payload::{
    Answer, AnswerFrom, Block, BotIdentity, Choice, ChoiceInput, Closed, ErrorCode, ExitReason, Exiting, Field,
    Message, Operation, Outcome, Present, Presentation, Ready, Settle, SettleError, Stage, TelegramRef,
};
pub use reader::{LineReader, ReadError};

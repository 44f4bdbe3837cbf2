//! The server's half of the channel: frames from stdin, and the fence every frame passes
//! before its payload is read.

use crate::adapter::Event;
use crate::streams::Reader;
use channel_protocol::{ChannelLaunch, Header, LineReader, ReadError};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::SyncSender;
use std::thread;

/// Starts the reader thread of the server's half of the channel (stdin, or the inherited
/// socket: [`crate::streams`]). It ends at the end of input or at the first bad line.
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn_stdin_reader(events: SyncSender<Event>, input: Reader) -> io::Result<thread::JoinHandle<()>> {
    thread::Builder::new().name("channel-stdin".to_owned()).spawn(move || {
        if panic::catch_unwind(AssertUnwindSafe(|| read_loop(&events, input))).is_err() {
            let _ = events.send(Event::ThreadFailed("stdin"));
        }
    })
}

fn read_loop(events: &SyncSender<Event>, input: Reader) {
    let mut reader = LineReader::new(io::BufReader::new(input));
    loop {
        let event = match reader.read_frame() {
            Ok(Some(frame)) => Event::Frame(Box::new(frame)),
            Ok(None) | Err(ReadError::Io(_)) => Event::StdinClosed,
            Err(ReadError::Frame(error)) => Event::Violation(error.code()),
        };
        let last = !matches!(event, Event::Frame(_));
        if events.send(event).is_err() || last {
            return;
        }
    }
}

/// Why a frame was refused before its payload was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Another adapter epoch: a frame for an earlier (or later) launch.
    StaleEpoch,
    /// Another profile.
    WrongProfile,
    /// A sequence not above the last accepted one.
    StaleSequence,
}

impl Refusal {
    /// A log-safe name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StaleEpoch => "staleEpoch",
            Self::WrongProfile => "wrongProfile",
            Self::StaleSequence => "staleSequence",
        }
    }
}

/// Epoch, profile and sequence of the frames the server sends.
#[derive(Debug)]
pub struct InboundFence {
    adapter_epoch: u64,
    profile: String,
    last_sequence: u64,
}

impl InboundFence {
    /// The fence of `launch`; the first accepted frame may have any sequence ≥ 1.
    #[must_use]
    pub fn new(launch: &ChannelLaunch) -> Self {
        Self {
            adapter_epoch: launch.adapter_epoch,
            profile: launch.profile.clone(),
            last_sequence: 0,
        }
    }

    /// Admits a frame: its epoch and profile are this launch's and its sequence is above the
    /// last admitted one (gaps are allowed; a repeat or a step back is not).
    ///
    /// # Errors
    ///
    /// [`Refusal`] saying which check failed; a refused frame changes nothing.
    pub fn admit(&mut self, header: &Header) -> Result<(), Refusal> {
        if header.adapter_epoch != self.adapter_epoch {
            return Err(Refusal::StaleEpoch);
        }
        if header.profile != self.profile {
            return Err(Refusal::WrongProfile);
        }
        if header.sequence <= self.last_sequence {
            return Err(Refusal::StaleSequence);
        }
        self.last_sequence = header.sequence;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use channel_protocol::launch::{API_BASE_URL_DEFAULT, LAUNCH_SCHEMA};

    fn header(adapter_epoch: u64, profile: &str, sequence: u64) -> Header {
        Header {
            adapter_epoch,
            profile: profile.to_owned(),
            sequence,
            channel_revision: 0,
            attempt_id: None,
        }
    }

    #[test]
    fn admits_increasing_sequences_of_this_launch_only() {
        let launch = ChannelLaunch {
            schema: LAUNCH_SCHEMA.to_owned(),
            adapter_epoch: 4,
            profile: "ops".to_owned(),
            api_base_url: API_BASE_URL_DEFAULT.to_owned(),
            token_file: "/t".to_owned(),
            allowed_user_ids: vec![1],
            allowed_chat_ids: vec![1],
            poll_timeout_s: 1,
        };
        let mut fence = InboundFence::new(&launch);
        assert_eq!(fence.admit(&header(3, "ops", 1)), Err(Refusal::StaleEpoch));
        assert_eq!(fence.admit(&header(4, "other", 1)), Err(Refusal::WrongProfile));
        assert_eq!(fence.admit(&header(4, "ops", 1)), Ok(()));
        assert_eq!(fence.admit(&header(4, "ops", 1)), Err(Refusal::StaleSequence));
        assert_eq!(fence.admit(&header(4, "ops", 3)), Ok(()));
        assert_eq!(fence.admit(&header(4, "ops", 2)), Err(Refusal::StaleSequence));
    }
}

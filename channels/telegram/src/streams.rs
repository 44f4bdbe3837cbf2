//! Where the channel runs: the inherited descriptor the server gives a supervised adapter
//! (`PI_WORKFLOWS_CHANNEL_FD`, a Unix socket, so the adapter's stdout and stderr stay
//! captured logs like every other child's), or stdin/stdout when started by hand or by the
//! adapter's own tests.

use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Names the inherited channel descriptor (≥ 3).
pub const CHANNEL_FD_ENV: &str = "PI_WORKFLOWS_CHANNEL_FD";

pub type Reader = Box<dyn Read + Send>;
pub type Writer = Box<dyn Write + Send>;

/// The channel's two halves.
///
/// # Errors
///
/// When `PI_WORKFLOWS_CHANNEL_FD` is set but is not a descriptor number ≥ 3, or the socket
/// cannot be duplicated for reading.
pub fn open() -> io::Result<(Reader, Writer)> {
    let Some(value) = std::env::var_os(CHANNEL_FD_ENV) else {
        return Ok((Box::new(io::stdin()), Box::new(io::stdout())));
    };
    let fd: i32 = value
        .to_str()
        .and_then(|text| text.parse().ok())
        .filter(|fd| *fd >= 3)
        .ok_or_else(|| io::Error::other(format!("{CHANNEL_FD_ENV} must be a descriptor number of 3 or more")))?;
    // SAFETY: the launch contract (docs/CHANNEL-PROTOCOL.md) hands this process the channel
    // socket at this number, inherited without close-on-exec and used by nothing else; it is
    // taken exactly once, here, before any thread starts.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let socket = UnixStream::from(owned);
    let reader = socket.try_clone()?;
    Ok((Box::new(reader), Box::new(socket)))
}

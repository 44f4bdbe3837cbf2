//! Waiting for input on a descriptor until a deadline, without reading it: the CLI's client
//! before each read of its socket, and `server start` for the new server's "ready" line.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// `Ok(true)` when `fd` has input, its end or an error (a read then says which, without
/// blocking); `Ok(false)` when `deadline` passed first. A signal does not end the wait.
pub fn wait_for_input(fd: BorrowedFd<'_>, deadline: Instant) -> nix::Result<bool> {
    loop {
        // Rounded up: a wait of less than a millisecond must not become "do not wait".
        let left_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_micros()
            .div_ceil(1_000);
        let timeout = PollTimeout::try_from(left_ms).unwrap_or(PollTimeout::MAX);
        let mut wanted = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut wanted, timeout) {
            Ok(ready) => return Ok(ready > 0),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => return Err(errno),
        }
    }
}

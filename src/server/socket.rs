//! The server's end of a Unix stream socket (a client connection, or the channel of a
//! runner, resolver or adapter), registered with the async reactor for reading only.
//!
//! Why not `tokio::net::UnixStream`: it registers every socket for reading and writing
//! (edge-triggered), and the kernel signals "writable" each time the peer reads something
//! this end wrote. So every answer, status or launch the server sent woke its async worker
//! again once the peer had read it, for nothing. Here a write goes straight to the socket;
//! only a write the socket refuses (the peer's buffer is full) registers a second handle of
//! the socket for "writable", until a write succeeds again.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Split `stream` into its two halves, registered for reading only (see the module's doc).
/// Dropping the write half shuts down the socket's sending side, as `tokio`'s does; the
/// socket closes when both halves are gone.
pub fn split(stream: UnixStream) -> io::Result<(ReadHalf, WriteHalf)> {
    stream.set_nonblocking(true)?;
    // SAFETY: the `AsyncFd` owns the stream, whose descriptor stays open and the same until
    // the `AsyncFd` is dropped (nothing here replaces or closes it).
    let socket = Arc::new(unsafe { AsyncFd::register_with_interest(stream, Interest::READABLE)? });
    let write = WriteHalf {
        socket: Arc::clone(&socket),
        space: None,
        shut_down: false,
    };
    Ok((ReadHalf { socket }, write))
}

/// Reads of the socket, woken by the reactor when data (or the peer's end) arrives.
pub struct ReadHalf {
    socket: Arc<AsyncFd<UnixStream>>,
}

impl AsyncRead for ReadHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.socket.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            match guard.try_io(|socket| socket.get_ref().read(unfilled)) {
                Ok(Ok(read)) => {
                    // A short read drained the socket: the next arrival raises a new edge, so
                    // the next read waits for it instead of trying and failing first (as
                    // `tokio`'s own streams do on epoll).
                    if 0 < read && read < wanted {
                        guard.clear_ready();
                    }
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// Writes to the socket: straight through while it takes them.
pub struct WriteHalf {
    socket: Arc<AsyncFd<UnixStream>>,
    /// A second handle of the socket, registered for "writable", only while a write waits
    /// for the peer to make room.
    space: Option<AsyncFd<OwnedFd>>,
    shut_down: bool,
}

/// One write of `bytes`, retried only when a signal interrupted it.
fn write_now(socket: &AsyncFd<UnixStream>, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match socket.get_ref().write(bytes) {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

/// A second handle of `socket`, registered for "writable". Registering reports the socket's
/// state at once, so room made between a refused write and the registration is not missed.
fn register_space(socket: &AsyncFd<UnixStream>) -> io::Result<AsyncFd<OwnedFd>> {
    let handle = socket.get_ref().as_fd().try_clone_to_owned()?;
    // SAFETY: as in `split`: the `AsyncFd` owns the duplicate descriptor until it is dropped.
    Ok(unsafe { AsyncFd::register_with_interest(handle, Interest::WRITABLE)? })
}

impl AsyncWrite for WriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.space.is_none() {
            match write_now(&this.socket, bytes) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => this.space = Some(register_space(&this.socket)?),
                result => return Poll::Ready(result),
            }
        }
        loop {
            let (Some(space), socket) = (&this.space, &this.socket) else {
                unreachable!("a write waits for room only through its registered handle");
            };
            let mut guard = ready!(space.poll_write_ready(cx))?;
            let written = guard.try_io(|_| write_now(socket, bytes));
            drop(guard);
            match written {
                Ok(Ok(count)) => {
                    // Room again: stop hearing of it.
                    this.space = None;
                    return Poll::Ready(Ok(count));
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.shut_down = true;
        Poll::Ready(this.socket.get_ref().shutdown(Shutdown::Write))
    }
}

impl Drop for WriteHalf {
    fn drop(&mut self) {
        if !self.shut_down {
            // The peer may already be gone; its end is what matters, not ours.
            let _ = self.socket.get_ref().shutdown(Shutdown::Write);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    #[tokio::test]
    async fn lines_cross_both_ways() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (read, mut write) = split(ours).unwrap();
        let (their_read, mut their_write) = split(theirs).unwrap();
        write.write_all(b"ping\n").await.unwrap();
        let mut line = String::new();
        BufReader::new(their_read).read_line(&mut line).await.unwrap();
        assert_eq!(line, "ping\n");
        their_write.write_all(b"pong\n").await.unwrap();
        line.clear();
        BufReader::new(read).read_line(&mut line).await.unwrap();
        assert_eq!(line, "pong\n");
    }

    const EPOLLIN: u32 = 0x1;
    const EPOLLOUT: u32 = 0x4;

    /// The event masks this process's epoll instances hold for `socket`, under any of its
    /// descriptors (read from `/proc/self/fdinfo`, where the kernel lists each registration;
    /// an instance reached through two descriptors, as the reactor's is, lists them twice).
    fn registrations(socket: &impl AsRawFd) -> Vec<u32> {
        let target = |fd: &str| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
        let ours = target(&socket.as_raw_fd().to_string()).expect("the socket is open");
        let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        let socket_fds: Vec<&String> = fds.iter().filter(|fd| target(fd).as_ref() == Some(&ours)).collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut masks = Vec::new();
        for epoll in fds
            .iter()
            .filter(|fd| target(fd).is_some_and(|path| path.as_os_str() == "anon_inode:[eventpoll]"))
        {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{epoll}")).unwrap_or_default();
            for line in info.lines() {
                // "tfd:        9 events:       19 data: ..."
                let words: Vec<&str> = line.split_whitespace().collect();
                if let ["tfd:", fd, "events:", mask, ..] = words[..]
                    && socket_fds.iter().any(|socket_fd| socket_fd.as_str() == fd)
                    && seen.insert(line.to_owned())
                {
                    masks.push(u32::from_str_radix(mask, 16).unwrap());
                }
            }
        }
        masks
    }

    #[tokio::test]
    async fn the_socket_is_registered_for_reading_only() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let raw = ours.try_clone().unwrap();
        let (_read, _write) = split(ours).unwrap();
        assert_eq!(registrations(&raw).len(), 1);
        assert!(
            registrations(&raw)
                .iter()
                .all(|mask| mask & EPOLLIN != 0 && mask & EPOLLOUT == 0)
        );
        // What `tokio`'s own stream registers, which the check above must be able to see.
        theirs.set_nonblocking(true).unwrap();
        let tokio_stream = tokio::net::UnixStream::try_from(theirs).unwrap();
        assert!(registrations(&tokio_stream).iter().any(|mask| mask & EPOLLOUT != 0));
    }

    #[tokio::test]
    async fn a_write_the_peer_has_no_room_for_waits_and_then_completes() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let raw = ours.try_clone().unwrap();
        let (_read, mut write) = split(ours).unwrap();
        // Far more than a socket buffers: the write must wait for the reader.
        let sent: Vec<u8> = (0..8 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            write.write_all(&sent).await.unwrap();
            write
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!writer.is_finished(), "the peer's buffer holds far less than 8 MiB");
        assert!(
            registrations(&raw).iter().any(|mask| mask & EPOLLOUT != 0),
            "a waiting write listens for room"
        );
        let (mut their_read, _their_write) = split(theirs).unwrap();
        let mut received = vec![0; expected.len()];
        their_read.read_exact(&mut received).await.unwrap();
        let write = writer.await.unwrap();
        assert_eq!(received, expected);
        assert!(
            write.space.is_none(),
            "the room handle is dropped once writes pass again"
        );
        assert!(registrations(&raw).iter().all(|mask| mask & EPOLLOUT == 0));
    }

    #[tokio::test]
    async fn dropping_the_write_half_ends_the_peers_reading() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (_read, write) = split(ours).unwrap();
        drop(write);
        let (mut their_read, _their_write) = split(theirs).unwrap();
        let mut rest = Vec::new();
        assert_eq!(their_read.read_to_end(&mut rest).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn the_peers_end_is_a_read_of_nothing_and_a_write_error() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (mut read, mut write) = split(ours).unwrap();
        drop(theirs);
        let mut buf = [0u8; 16];
        assert_eq!(read.read(&mut buf).await.unwrap(), 0);
        let err = write.write_all(b"late\n").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}

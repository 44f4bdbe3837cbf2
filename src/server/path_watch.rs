//! Says when files a server holds may have changed, so an idle server makes no periodic
//! `stat` calls: inotify on the directories that hold them (and on those directories
//! themselves) wakes the caller when an entry is created, removed or renamed there. An event
//! only says "look now": the caller's own check (device and inode compared with what it
//! holds) decides. A slow backstop still wakes the caller for what inotify cannot report (a
//! directory above the watched ones renamed); where inotify is unavailable (its per-user
//! limits reached) the caller is woken at the polling interval instead.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use rustix::io::Errno;
use tokio::io::unix::AsyncFd;

/// With inotify, the longest wait between two checks: what no event reports is found this late.
pub const CHECK_BACKSTOP_MS: u64 = 30_000;
/// Without inotify, how often the caller checks (the polling it replaces).
pub const CHECK_POLL_MS: u64 = 1_000;
/// One read of pending events; more are read until none is left.
const EVENT_BUFFER_BYTES: usize = 4096;
/// Reads of one wake-up at most: events arriving faster than they are read cannot hold it.
const DRAIN_READS_MAX: usize = 64;

/// Watches the directories holding some paths; `next` waits for a reason to check them.
pub struct PathWatch {
    inotify: Option<AsyncFd<OwnedFd>>,
}

impl PathWatch {
    /// Watch each path that is a directory, and the directory of each other path. Never
    /// fails: without inotify `next` simply waits `CHECK_POLL_MS`.
    pub fn new<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Self {
        match watch(paths) {
            Ok(inotify) => Self { inotify: Some(inotify) },
            Err(err) => {
                tracing::warn!(error = %err, "file changes cannot be watched (inotify); checking every second instead");
                Self { inotify: None }
            }
        }
    }

    /// Whether events wake the caller (false: it is polled).
    #[cfg(test)]
    fn is_watching(&self) -> bool {
        self.inotify.is_some()
    }

    /// Returns when a watched directory reported a change, or when the backstop (with
    /// inotify) or the polling interval (without) has passed.
    pub async fn next(&mut self) {
        let Some(inotify) = &self.inotify else {
            tokio::time::sleep(Duration::from_millis(CHECK_POLL_MS)).await;
            return;
        };
        tokio::select! {
            ready = inotify.readable() => match ready {
                Ok(mut guard) => match drain(guard.get_inner()) {
                    Ok(true) => guard.clear_ready(),
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, "the file watch failed; checking every second instead");
                        self.inotify = None;
                    }
                },
                Err(err) => {
                    tracing::warn!(error = %err, "the file watch failed; checking every second instead");
                    self.inotify = None;
                }
            },
            () = tokio::time::sleep(Duration::from_millis(CHECK_BACKSTOP_MS)) => {}
        }
    }
}

fn watch<'a>(paths: impl IntoIterator<Item = &'a Path>) -> std::io::Result<AsyncFd<OwnedFd>> {
    let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
    let entries = WatchFlags::CREATE | WatchFlags::DELETE | WatchFlags::MOVED_FROM | WatchFlags::MOVED_TO;
    let itself = WatchFlags::DELETE_SELF | WatchFlags::MOVE_SELF;
    for path in paths {
        // A directory's own removal or rename is an event on it; a file's is one on its directory.
        let watched = if path.is_dir() { Some(path) } else { path.parent() };
        if let Some(directory) = watched.filter(|directory| !directory.as_os_str().is_empty()) {
            inotify::add_watch(&inotify, directory, entries | itself)?;
        }
    }
    // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which owns it until it is dropped; the
    // fd is neither replaced nor closed while registered.
    Ok(unsafe { AsyncFd::register(inotify)? })
}

/// Read pending events until none is left; their content does not matter (the caller checks
/// every path). `Ok(false)` when events were still arriving after `DRAIN_READS_MAX` reads:
/// the fd stays ready, and the next `next` returns at once.
fn drain(inotify: &OwnedFd) -> Result<bool, Errno> {
    let mut buffer = [MaybeUninit::<u8>::uninit(); EVENT_BUFFER_BYTES];
    for _ in 0..DRAIN_READS_MAX {
        match rustix::io::read(inotify, &mut buffer) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => return Ok(true),
            Err(err) => return Err(err),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_removed_file_wakes_the_watch_and_a_quiet_directory_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let held = dir.path().join("held");
        std::fs::write(&held, b"x").unwrap();
        let mut watch = PathWatch::new([dir.path(), held.as_path()]);
        assert!(watch.is_watching());
        let quiet = tokio::time::timeout(Duration::from_millis(200), watch.next()).await;
        assert!(quiet.is_err(), "nothing changed, yet the watch woke");
        std::fs::remove_file(&held).unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
        assert!(woke.is_ok(), "removing a held file did not wake the watch");
        let quiet_again = tokio::time::timeout(Duration::from_millis(200), watch.next()).await;
        assert!(
            quiet_again.is_err(),
            "the events were not drained: the watch woke again"
        );
    }

    #[tokio::test]
    async fn a_renamed_watched_directory_wakes_the_watch() {
        let parent = tempfile::tempdir().unwrap();
        let state = parent.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let mut watch = PathWatch::new([state.as_path()]);
        std::fs::rename(&state, parent.path().join("moved")).unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
        assert!(woke.is_ok(), "renaming the watched directory did not wake the watch");
    }
}

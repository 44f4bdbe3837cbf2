//! What makes this process the one server of a state directory: the private directories,
//! the global lock file held for the server's lifetime, and the socket path.
//!
//! Proof that an older server is gone: the lock is an `flock` on `server/server.lock`. The
//! kernel releases it when the holding process exits for any reason (including SIGKILL), so
//! a new server that obtains it knows no other server of this directory is alive and takes
//! the SQLite server lease over at once with epoch + 1, without waiting for it to expire.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::paths::ensure_private_dir;

/// The files that make this process the server of its directory, by device and inode: if
/// any is removed or replaced (`rm -rf` of the state directory under a live server), this
/// server no longer owns what a new `server start` would find, and must stop.
#[derive(Debug, Clone)]
pub struct HeldFiles {
    held: Vec<(&'static str, PathBuf, FileIdentity)>,
}

/// Device and inode of a file.
pub type FileIdentity = (u64, u64);

/// The device and inode of `path`, if it exists.
pub fn file_identity(path: &Path) -> Option<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

impl HeldFiles {
    /// Remember the state directory, the server directory, the lock and the database.
    pub fn snapshot(paths: &ServerPaths) -> anyhow::Result<Self> {
        let named = [
            ("state directory", &paths.state_dir),
            ("server directory", &paths.server_dir),
            ("lock file", &paths.lock),
            ("database", &paths.database),
        ];
        let mut held = Vec::with_capacity(named.len());
        for (what, path) in named {
            let identity = file_identity(path).with_context(|| format!("the {what} is missing right after start"))?;
            held.push((what, path.clone(), identity));
        }
        Ok(Self { held })
    }

    /// The held paths, to watch.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.held.iter().map(|(_, path, _)| path.as_path())
    }

    /// The first held file that is gone or is another file now.
    pub fn changed(&self) -> Option<&'static str> {
        self.held
            .iter()
            .find(|(_, path, identity)| file_identity(path) != Some(*identity))
            .map(|(what, _, _)| *what)
    }
}

/// `sockaddr_un.sun_path` holds 108 bytes including the terminating NUL.
pub const SOCKET_PATH_BYTES_MAX: usize = 107;
const LOCK_FILE_MODE: u32 = 0o600;

/// The files of one state directory.
#[derive(Debug, Clone)]
pub struct ServerPaths {
    pub state_dir: PathBuf,
    pub server_dir: PathBuf,
    pub socket: PathBuf,
    pub lock: PathBuf,
    pub logs_dir: PathBuf,
    pub database: PathBuf,
    /// Bundled workflow code of unchanged sources (`PI_WORKFLOWS_CACHE_DIR` of resolvers
    /// and runners); user-only, safe to delete.
    pub cache_dir: PathBuf,
}

impl ServerPaths {
    pub fn new(state_dir: &Path) -> Self {
        let server_dir = state_dir.join("server");
        Self {
            state_dir: state_dir.to_path_buf(),
            socket: server_dir.join("server.sock"),
            lock: server_dir.join("server.lock"),
            server_dir,
            logs_dir: state_dir.join("logs"),
            database: state_dir.join(crate::paths::DATABASE_FILE),
            cache_dir: state_dir.join("cache"),
        }
    }

    /// Refuse a socket path the kernel cannot bind, with what to do about it.
    pub fn check_socket_path(&self) -> anyhow::Result<()> {
        let bytes = self.socket.as_os_str().len();
        if bytes > SOCKET_PATH_BYTES_MAX {
            bail!(
                "the server socket path is {bytes} bytes, above the {SOCKET_PATH_BYTES_MAX}-byte limit of Unix sockets: {}; \
                 set PI_CODING_AGENT_DIR (or --state-dir) to a shorter directory",
                self.socket.display()
            );
        }
        Ok(())
    }

    pub fn create_dirs(&self) -> anyhow::Result<()> {
        self.check_writable()?;
        for dir in [&self.state_dir, &self.server_dir, &self.logs_dir] {
            ensure_private_dir(dir)?;
        }
        Ok(())
    }

    /// Refuse, before any file is touched, a state directory the server could not write:
    /// on a read-only file system (root included) or not writable by this user.
    fn check_writable(&self) -> anyhow::Result<()> {
        use rustix::fs::{Access, access};
        let dir = self.state_dir.display();
        match access(&self.state_dir, Access::WRITE_OK) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(rustix::io::Errno::ROFS) => bail!(
                "the state directory {dir} is on a read-only file system; the server must write there, so nothing was \
                 started or changed. Remount it read-write, or use a writable directory (--state-dir or \
                 PI_CODING_AGENT_DIR), and start again"
            ),
            Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => bail!(
                "the state directory {dir} is not writable by this user; the server must write there, so nothing was \
                 started or changed. Give it back to this user (mode 0700), or use another directory (--state-dir or \
                 PI_CODING_AGENT_DIR), and start again"
            ),
            Err(_) => Ok(()),
        }
    }
}

/// The held global lock; released when dropped or when the process dies.
pub struct ServerLock {
    _claim: Option<std::os::unix::net::UnixListener>,
    _file: File,
}

/// Take the global lock, or explain who holds it.
pub fn take_lock(paths: &ServerPaths) -> anyhow::Result<ServerLock> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(LOCK_FILE_MODE)
        .open(&paths.lock)
        .with_context(|| format!("could not open the server lock {}", paths.lock.display()))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            bail!(
                "another pi-workflows server is already running for this state directory{}; \
                 use `pi-workflows server status` or `pi-workflows server stop`",
                lock_holder(paths)
                    .map(|pid| format!(" (pid {pid})"))
                    .unwrap_or_default()
            );
        }
        Err(err) => return Err(err).context("could not lock the server lock file"),
    }
    let claim = claim_directory_name(paths)?;
    file.set_len(0)?;
    writeln!(file, "{}", std::process::id())?;
    Ok(ServerLock {
        _file: file,
        _claim: claim,
    })
}

/// How long a new server waits for an older one whose state directory was removed to
/// notice it and exit (it checks every second).
const CLAIM_WAIT_MS: u64 = 3_000;
const CLAIM_POLL_MS: u64 = 50;

/// The second lock: an abstract Unix socket named after the user and the state directory's
/// path. Unlike the lock file it survives an `rm -rf` of the directory, so a new server for a
/// path never runs next to an old one still running on the deleted files; the kernel frees
/// the name when its holder exits, however it exits.
fn claim_directory_name(paths: &ServerPaths) -> anyhow::Result<Option<std::os::unix::net::UnixListener>> {
    use std::os::linux::net::SocketAddrExt;
    let canonical = std::fs::canonicalize(&paths.state_dir).unwrap_or_else(|_| paths.state_dir.clone());
    let digest = crate::digest::sha256_hex(canonical.as_os_str().as_encoded_bytes());
    let name = format!("pi-workflows-{}-{}", rustix::process::getuid().as_raw(), &digest[..32]);
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(CLAIM_WAIT_MS);
    loop {
        match std::os::unix::net::UnixListener::bind_addr(&address) {
            Ok(listener) => return Ok(Some(listener)),
            Err(err) if err.kind() != std::io::ErrorKind::AddrInUse => {
                return Err(err).context("could not claim the state directory");
            }
            // Abstract names have no permissions: a name held by another user is no server
            // of ours, so it must not keep this one from starting (the lock file still holds).
            Err(_) if !held_by_this_user(&address) => {
                tracing::warn!("the state directory's claim name is held by another user; relying on the lock file");
                return Ok(None);
            }
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(CLAIM_POLL_MS));
            }
            Err(_) => bail!(
                "another pi-workflows server is still running for this state directory (its files were \
                 removed or replaced); it stops by itself within seconds, or stop it with `kill`, then retry"
            ),
        }
    }
}

/// Whether the process listening on `address` runs as this user (its `SO_PEERCRED`).
fn held_by_this_user(address: &std::os::unix::net::SocketAddr) -> bool {
    let Ok(stream) = std::os::unix::net::UnixStream::connect_addr(address) else {
        // Gone meanwhile: the next bind will tell.
        return true;
    };
    rustix::net::sockopt::socket_peercred(&stream).is_ok_and(|peer| peer.uid == rustix::process::getuid())
}

/// The pid the lock file names (the server that holds the lock writes its pid there).
pub fn lock_holder(paths: &ServerPaths) -> Option<i32> {
    std::fs::read_to_string(&paths.lock).ok()?.trim().parse().ok()
}

/// True when no process holds the global lock (no server is alive for these paths).
pub fn lock_is_free(paths: &ServerPaths) -> bool {
    let Ok(file) = std::fs::File::open(&paths.lock) else {
        return true;
    };
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = rustix::fs::flock(&file, rustix::fs::FlockOperation::Unlock);
            true
        }
        Err(_) => false,
    }
}

//! One stable client ID per installation: the ID a client's commands carry, stored user-only
//! next to the state so every process of that client kind sends the same one.
//!
//! Why it must be stable: the server keys durable receipts by (client ID, idempotency key).
//! A retry after a lost connection adopts the stored receipt only if it carries the same
//! client ID, and a submission awaiting its verdict is found again by the same identity
//! (docs/CLIENT-PROTOCOL.md, "Client identity and reconnects").
//!
//! Where: `<state dir>/clients/<kind>.id` (directory 0700, file 0600), one file per client
//! kind (`cli.id` for this Rust client, `pi.id` for the TypeScript client). A directory of its
//! own keeps client files apart from the server's (database, `server/`, `logs/`, `cache/`),
//! so nothing that maintains those ever touches them; one file per kind means the two
//! implementations never share a file or race on it, and `host_commands` rows show which kind
//! of client sent a command. The ID is not a secret (any client of the user's socket may
//! send any ID); user-only is hygiene, like every other file of the state directory.
//!
//! Created atomically: the ID is written to a temporary file, synced, then hard-linked to
//! its name, which fails if another process created it first (then that one is read, so two
//! first uses agree). A corrupt file (not a regular file, too long, not a valid ID) is
//! replaced by rename with a warning; it never stops the client.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::digest::hex_lower;
use crate::protocol::{OPAQUE_ID_BYTES_MAX, OpaqueId};

/// The directory of client identity files, inside the state directory.
pub const CLIENTS_DIR: &str = "clients";
const CLIENTS_DIR_MODE: u32 = 0o700;
const ID_FILE_MODE: u32 = 0o600;
/// An identity file holds one ID and a newline; anything longer is corrupt.
const ID_FILE_BYTES_MAX: usize = OPAQUE_ID_BYTES_MAX + 1;
/// Rounds of "missing, create, someone else won, read theirs": a file that keeps vanishing
/// between link and read is an error, not a loop.
const CREATE_ROUNDS_MAX: usize = 3;
/// Random bytes of a new ID (96 bits: no two installations collide).
const ID_RANDOM_BYTES: usize = 12;

/// A client kind: its identity file and the prefix of its IDs.
#[derive(Debug, Clone, Copy)]
pub struct ClientKind {
    pub file: &'static str,
    pub prefix: &'static str,
}

/// The CLI (this crate's [`super::Client`]).
pub const CLI: ClientKind = ClientKind {
    file: "cli.id",
    prefix: "cli",
};

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("could not prepare {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("could not read the client ID file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("could not write the client ID file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("the client ID file {path} keeps disappearing while it is created")]
    Unstable { path: PathBuf },
    #[error("no randomness for a client ID")]
    NoRandomness,
}

/// How the ID was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loaded {
    Existing(OpaqueId),
    Created(OpaqueId),
    /// The file was corrupt (`why`) and now holds a new ID.
    Replaced {
        id: OpaqueId,
        why: String,
    },
}

impl Loaded {
    pub fn id(&self) -> &OpaqueId {
        match self {
            Self::Existing(id) | Self::Created(id) | Self::Replaced { id, .. } => id,
        }
    }
}

/// The identity file of `kind` in `state_dir`.
pub fn id_file(state_dir: &Path, kind: &ClientKind) -> PathBuf {
    state_dir.join(CLIENTS_DIR).join(kind.file)
}

/// Read the installation's ID of `kind`, creating it on first use and replacing a corrupt
/// file.
pub fn load_or_create(state_dir: &Path, kind: &ClientKind) -> Result<Loaded, IdentityError> {
    let dir = state_dir.join(CLIENTS_DIR);
    ensure_private_dir(&dir)?;
    let path = dir.join(kind.file);
    for _ in 0..CREATE_ROUNDS_MAX {
        match read_id(&path) {
            Ok(Some(id)) => return Ok(Loaded::Existing(id)),
            Ok(None) => {
                let id = new_id(kind.prefix)?;
                if publish(&dir, &path, &id, Publish::IfAbsent)? {
                    return Ok(Loaded::Created(id));
                }
                // Another process created it between our read and our link: use theirs.
            }
            Err(ReadFailure::Corrupt(why)) => {
                let id = new_id(kind.prefix)?;
                publish(&dir, &path, &id, Publish::Replace)?;
                return Ok(Loaded::Replaced { id, why });
            }
            Err(ReadFailure::Io(source)) => return Err(IdentityError::Read { path, source }),
        }
    }
    Err(IdentityError::Unstable { path })
}

/// Identities found in this process, per state directory and kind: a warning is printed
/// once, and a fallback ID stays the same for the whole process. Bounded: when full it
/// starts over (a stored ID reads back the same; only a fallback ID would change).
const CACHED_IDS_MAX: usize = 16;
static CACHED_IDS: std::sync::Mutex<Vec<(PathBuf, OpaqueId)>> = std::sync::Mutex::new(Vec::new());

/// The installation's ID of `kind` for `state_dir`, never failing: when the file cannot be
/// read or written (a read-only state directory), a random ID for this process, with a
/// warning (a retry in this process still adopts its receipts; a later process cannot).
pub fn installation_id(state_dir: &Path, kind: &ClientKind) -> OpaqueId {
    let path = id_file(state_dir, kind);
    let mut cached = CACHED_IDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, id)) = cached.iter().find(|(known, _)| *known == path) {
        return id.clone();
    }
    let id = match load_or_create(state_dir, kind) {
        Ok(Loaded::Existing(id) | Loaded::Created(id)) => id,
        Ok(Loaded::Replaced { id, why }) => {
            warn(&format!(
                "the client ID file {} was unusable ({why}); it was replaced with a new ID",
                path.display()
            ));
            id
        }
        Err(err) => {
            let id = process_id(kind.prefix);
            warn(&format!(
                "{err}; this process uses the temporary client ID {}: commands still retry \
                 safely, but a later process cannot adopt their receipts",
                id.as_str()
            ));
            id
        }
    };
    if cached.len() >= CACHED_IDS_MAX {
        cached.clear();
    }
    cached.push((path, id.clone()));
    id
}

/// A warning the user sees: the CLI has no log subscriber, so it goes to stderr as well.
fn warn(message: &str) {
    tracing::warn!("{message}");
    eprintln!("pi-workflows: warning: {}", crate::printable::printable(message));
}

/// A random ID; without randomness from time and pid (it then only differs from other
/// processes' IDs and from this process's earlier ones).
pub(crate) fn process_id(prefix: &str) -> OpaqueId {
    if let Ok(id) = new_id(prefix) {
        return id;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let text = format!("{prefix}-t{:x}-p{}", nanos as u64, std::process::id());
    OpaqueId::new(text).unwrap_or_else(|_| unreachable!("hex digits and a safe prefix form a valid ID"))
}

/// A new random ID: `<prefix>-<24 hex digits>`.
pub fn new_id(prefix: &str) -> Result<OpaqueId, IdentityError> {
    let mut bytes = [0u8; ID_RANDOM_BYTES];
    getrandom::fill(&mut bytes).map_err(|_| IdentityError::NoRandomness)?;
    OpaqueId::new(format!("{prefix}-{}", hex_lower(&bytes))).map_err(|_| IdentityError::NoRandomness)
}

enum ReadFailure {
    Corrupt(String),
    Io(std::io::Error),
}

/// The stored ID; `None` when there is no file yet.
fn read_id(path: &Path) -> Result<Option<OpaqueId>, ReadFailure> {
    // O_NOFOLLOW: a symbolic link in place of the file is corrupt, never followed.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) if err.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            return Err(ReadFailure::Corrupt("it is a symbolic link".to_string()));
        }
        Err(err) => return Err(ReadFailure::Io(err)),
    };
    let metadata = file.metadata().map_err(ReadFailure::Io)?;
    if !metadata.is_file() {
        return Err(ReadFailure::Corrupt("it is not a regular file".to_string()));
    }
    let mut bytes = Vec::new();
    file.take(ID_FILE_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadFailure::Io)?;
    if bytes.len() > ID_FILE_BYTES_MAX {
        return Err(ReadFailure::Corrupt(format!(
            "it holds more than {ID_FILE_BYTES_MAX} bytes"
        )));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| ReadFailure::Corrupt("it is not text".to_string()))?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let id = OpaqueId::new(text).map_err(|err| ReadFailure::Corrupt(format!("it holds no valid client ID ({err})")))?;
    // Made user-only if someone widened it (the ID is no secret; keep the directory tidy).
    if metadata.permissions().mode() & 0o777 != ID_FILE_MODE {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(ID_FILE_MODE));
    }
    Ok(Some(id))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Publish {
    /// Only if no file exists (first use): false when another process was first.
    IfAbsent,
    /// Over a corrupt file.
    Replace,
}

/// Write `id` to a temporary file (0600, synced) and give it its name atomically.
fn publish(dir: &Path, path: &Path, id: &OpaqueId, how: Publish) -> Result<bool, IdentityError> {
    let suffix = new_id("tmp")?;
    let temporary = dir.join(format!(".{}.{}", file_name(path), suffix.as_str()));
    let write_error = |source| IdentityError::Write {
        path: path.to_path_buf(),
        source,
    };
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(ID_FILE_MODE)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&temporary)?;
        // Exact, whatever the umask.
        file.set_permissions(std::fs::Permissions::from_mode(ID_FILE_MODE))?;
        file.write_all(format!("{}\n", id.as_str()).as_bytes())?;
        file.sync_all()
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(write_error(source));
    }
    let published = match how {
        Publish::IfAbsent => match std::fs::hard_link(&temporary, path) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(err) => Err(err),
        },
        Publish::Replace => std::fs::rename(&temporary, path).map(|()| true),
    };
    // After a link (or a failed rename) the temporary name is left over.
    let _ = std::fs::remove_file(&temporary);
    let published = published.map_err(write_error)?;
    // The new name survives a crash (were it lost, the next use would only create another ID).
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(published)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Create `dir` user-only (0700) if needed, and make an existing one user-only.
fn ensure_private_dir(dir: &Path) -> Result<(), IdentityError> {
    let error = |source| IdentityError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::DirBuilder::new().mode(CLIENTS_DIR_MODE).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(error(err)),
    }
    let metadata = std::fs::symlink_metadata(dir).map_err(error)?;
    if !metadata.is_dir() {
        return Err(error(std::io::Error::other("it is not a directory")));
    }
    if metadata.permissions().mode() & 0o777 != CLIENTS_DIR_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(CLIENTS_DIR_MODE)).map_err(error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_created_once_and_read_back() {
        let dir = tempfile::tempdir().expect("dir");
        let first = load_or_create(dir.path(), &CLI).expect("create");
        assert!(matches!(first, Loaded::Created(_)), "{first:?}");
        assert!(first.id().as_str().starts_with("cli-"));
        let again = load_or_create(dir.path(), &CLI).expect("read");
        assert_eq!(again, Loaded::Existing(first.id().clone()));
        let path = id_file(dir.path(), &CLI);
        let mode = std::fs::metadata(&path).expect("file").permissions().mode() & 0o777;
        assert_eq!(mode, ID_FILE_MODE);
        let dir_mode = std::fs::metadata(path.parent().expect("dir"))
            .expect("dir")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, CLIENTS_DIR_MODE);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(
            leftovers,
            vec![std::ffi::OsString::from("cli.id")],
            "no temporary file is left"
        );
    }

    #[test]
    fn a_corrupt_file_is_replaced_and_says_why() {
        for (content, why) in [
            (b"has spaces\n".to_vec(), "no valid client ID"),
            (b"\n".to_vec(), "no valid client ID"),
            (vec![b'a'; 300], "more than"),
            (vec![0xff, 0xfe], "not text"),
        ] {
            let dir = tempfile::tempdir().expect("dir");
            let path = id_file(dir.path(), &CLI);
            std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
            std::fs::write(&path, &content).expect("write");
            let Loaded::Replaced { id, why: found } = load_or_create(dir.path(), &CLI).expect("replace") else {
                panic!("a corrupt file must be replaced");
            };
            assert!(found.contains(why), "{found}");
            assert_eq!(load_or_create(dir.path(), &CLI).expect("read"), Loaded::Existing(id));
        }
    }

    #[test]
    fn a_symbolic_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("dir");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "cli-target\n").expect("target");
        let path = id_file(dir.path(), &CLI);
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::os::unix::fs::symlink(&target, &path).expect("link");
        let loaded = load_or_create(dir.path(), &CLI).expect("replace");
        assert!(matches!(loaded, Loaded::Replaced { .. }), "{loaded:?}");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "cli-target\n");
    }

    #[test]
    fn an_unusable_directory_falls_back_to_one_id_for_the_process() {
        let dir = tempfile::tempdir().expect("dir");
        // `clients` is a file: nothing can be created there (like a read-only directory,
        // which root could still write to).
        std::fs::write(dir.path().join(CLIENTS_DIR), "not a directory").expect("write");
        assert!(load_or_create(dir.path(), &CLI).is_err());
        let first = installation_id(dir.path(), &CLI);
        assert!(first.as_str().starts_with("cli-"), "{first:?}");
        assert_eq!(installation_id(dir.path(), &CLI), first, "stable within the process");
        assert!(dir.path().join(CLIENTS_DIR).is_file(), "nothing was replaced");
    }
}

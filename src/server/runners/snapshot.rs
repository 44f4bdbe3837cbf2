//! The runners' V8 startup snapshot (owned by the warm pool): a Node runner started from it
//! finds the runtime's modules already evaluated and its run's path already compiled
//! (packages/pi-workflows/src/runner-snapshot.ts), which saves each runner process about a
//! fifth of its CPU.
//!
//! A snapshot fits one Node binary and one build of the package, so it is built on this
//! machine, once per (Node binary, snapshot entry) pair: the pool's first start with a new
//! pair builds it in the background (`node --snapshot-blob B.tmp --build-snapshot
//! dist/runner-snapshot.cjs`, a child of its own process group, bounded in time and size),
//! checks it (`node --snapshot-blob B.tmp pi-workflows-runner --check`: this Node accepts
//! it, its rehearsal completed, `import()` works), and only then renames it into the cache
//! directory. Until then, and whenever anything fails, runners start the plain way.
//!
//! Every build gets its own random V8 hash seed, and the snapshot is built and started with
//! it fixed (`--hash-seed=S --no-rehash-snapshot`). Why: V8 otherwise draws a new seed in
//! every process and rehashes the snapshot's strings and dictionaries to it at each start,
//! and derives the seed's secrets anew, about a seventh of a snapshot runner's CPU here. The
//! seed is kept in the snapshot's file name (a user-only directory). Node refuses a snapshot
//! started with other V8 flags than it was built with (exit code 14, "different V8
//! configurations"), so a runner never runs on hashes of another seed. The cost: all runners of
//! one snapshot share its seed (what a hash-flooding input would have to be crafted against;
//! it changes with every build), and it is visible on their command lines.
//!
//! The stored blob has an empty code cache (`code_cache.rs`): Node's bytecode of its built-in
//! modules, more than half of a blob, which a runner read and copied at every start without
//! compiling any of those modules (about 1 ms of a runner's CPU).
//!
//! Architecture Invariant: a snapshot is used only under the name of the exact pair it was
//! built from ([`SnapshotSource::find`]: the Node binary's identity and the entry's bytes,
//! and the blob's form),
//! only with the hash seed in its name, and only after its check passed; a failed build leaves
//! no file under that name.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use supervisors::process::ExitOutcome;

use super::code_cache;
use crate::server::config::{Program, RunnerSettings};
use crate::server::spawn::spawn_helper;

/// How long a snapshot's build may take (~0.25 s of CPU here) before it is stopped.
const BUILD_MS_MAX: u64 = 60_000;
/// How long a new snapshot's check may take.
const CHECK_MS_MAX: u64 = 30_000;
/// The largest snapshot kept (a runner's is ~5–7 MB).
const BLOB_BYTES_MAX: u64 = 128 * 1024 * 1024;
/// How long a build or a check that overran gets to stop.
const STOP_GRACE_MS: u64 = 1_000;
/// Where snapshots are kept, below the cache directory (nothing else is there).
const SNAPSHOTS_DIR: &str = "runner-snapshots";
/// Snapshot files are named `<PREFIX><key>-<hash seed><SUFFIX>`.
const BLOB_PREFIX: &str = "runner-snapshot-";
const BLOB_SUFFIX: &str = ".blob";
/// Hex digits of the pair's digest in a snapshot's name.
const KEY_HEX_LEN: usize = 32;
/// Hex digits of the hash seed in a snapshot's name (all of its 64 bits).
const SEED_HEX_LEN: usize = 16;
/// Draws of a random hash seed before a build gives up (one fails with odds of 2^-63).
const SEED_DRAWS_MAX: usize = 8;
/// What the pool makes of a built blob, part of its key: a blob stored before the code
/// cache was removed is never found again, and is rebuilt without it.
const BLOB_FORM: &[u8] = b"node code cache removed";
/// What Node shows as the script of a runner started from a snapshot (it runs none).
const RUNNER_ARGV1: &str = "pi-workflows-runner";
/// Tells the snapshot's main to check itself instead of serving a run (runner-snapshot.ts).
pub const SNAPSHOT_CHECK_FLAG: &str = "--check";

/// Where a snapshot comes from: the Node binary and the package's snapshot entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSource {
    pub node: PathBuf,
    pub entry: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("could not read the Node binary or the snapshot entry: {0}")]
    Source(std::io::Error),
    #[error("could not prepare the cache directory: {0}")]
    CacheDir(String),
    #[error("could not start node: {0}")]
    Spawn(#[from] crate::server::spawn::SpawnError),
    #[error("the {step} did not end within {ms} ms")]
    Timeout { step: &'static str, ms: u64 },
    #[error("the {step} failed ({outcome}); see {log_stem}.err in the runner logs")]
    Failed {
        step: &'static str,
        outcome: String,
        log_stem: &'static str,
    },
    #[error("the snapshot is {bytes} bytes, over the {BLOB_BYTES_MAX} allowed")]
    TooLarge { bytes: u64 },
    #[error("could not store the snapshot: {0}")]
    Store(std::io::Error),
    #[error("could not wait for node: {0}")]
    Wait(#[from] supervisors::process::ProcessError),
    #[error("the system gave no random bytes for the snapshot's hash seed")]
    NoRandomness,
}

/// The V8 hash seed a snapshot is built and started with: never 0 (V8's "draw one in every
/// process") and at most `i64::MAX` (Node 20 refuses the top of the `u64` range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HashSeed(u64);

impl HashSeed {
    const MAX: u64 = i64::MAX as u64;

    fn new(value: u64) -> Option<Self> {
        (1..=Self::MAX).contains(&value).then_some(Self(value))
    }

    fn random() -> Result<Self, SnapshotError> {
        for _ in 0..SEED_DRAWS_MAX {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).map_err(|_| SnapshotError::NoRandomness)?;
            if let Some(seed) = Self::new(u64::from_le_bytes(bytes) & Self::MAX) {
                return Ok(seed);
            }
        }
        Err(SnapshotError::NoRandomness)
    }

    /// The V8 flags of a build and of every start of its snapshot: the same seed, and no
    /// rehash (the snapshot's hashes are already this seed's).
    fn v8_flags(self) -> [OsString; 2] {
        [format!("--hash-seed={}", self.0).into(), "--no-rehash-snapshot".into()]
    }
}

/// A built and checked snapshot: its file and the hash seed it was built with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub blob: PathBuf,
    seed: HashSeed,
}

/// The file name of the snapshot of the pair `key` built with `seed`.
fn blob_name(key: &str, seed: HashSeed) -> String {
    format!(
        "{BLOB_PREFIX}{key}-{:0width$x}{BLOB_SUFFIX}",
        seed.0,
        width = SEED_HEX_LEN
    )
}

/// The hash seed in `name` if it is the name of a snapshot of the pair `key` (`blob_name`).
fn seed_in_name(key: &str, name: &OsStr) -> Option<HashSeed> {
    let hex = name
        .to_str()?
        .strip_prefix(BLOB_PREFIX)?
        .strip_prefix(key)?
        .strip_prefix('-')?
        .strip_suffix(BLOB_SUFFIX)?;
    let lower_hex = |byte: u8| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
    if hex.len() != SEED_HEX_LEN || !hex.bytes().all(lower_hex) {
        return None;
    }
    HashSeed::new(u64::from_str_radix(hex, 16).ok()?)
}

impl SnapshotSource {
    /// The snapshot source of the package's Node runner `program` (`node dist/runner-main.js`),
    /// if the package was built with its snapshot entry beside it.
    pub fn of_runner(program: &Program) -> Option<Self> {
        let script = program.1.first().map(Path::new)?;
        let entry = script.with_file_name("runner-snapshot.cjs");
        entry.is_file().then(|| Self {
            node: program.0.clone(),
            entry,
        })
    }

    /// The stored snapshot of exactly this Node binary and these entry bytes (`key`), if one
    /// was built and checked.
    pub fn find(&self, cache_dir: &Path) -> Result<Option<Snapshot>, SnapshotError> {
        let key = self.key()?;
        let Ok(entries) = std::fs::read_dir(cache_dir.join(SNAPSHOTS_DIR)) else {
            return Ok(None);
        };
        Ok(entries.flatten().find_map(|entry| {
            let seed = seed_in_name(&key, &entry.file_name())?;
            let blob = entry.path();
            blob.is_file().then_some(Snapshot { blob, seed })
        }))
    }

    /// The name of the pair: exactly this Node binary (path, device, inode, size, change
    /// time) and these entry bytes, so a replaced Node or a rebuilt package gets another; and
    /// the blob's form (`BLOB_FORM`), so a blob stored in another form is never used.
    fn key(&self) -> Result<String, SnapshotError> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let node = std::fs::metadata(&self.node).map_err(SnapshotError::Source)?;
        let entry = std::fs::read(&self.entry).map_err(SnapshotError::Source)?;
        let mut digest = Sha256::new();
        for part in [self.node.as_os_str().as_bytes(), self.entry.as_os_str().as_bytes()] {
            digest.update((part.len() as u64).to_le_bytes());
            digest.update(part);
        }
        for number in [
            node.dev(),
            node.ino(),
            node.size(),
            node.ctime() as u64,
            node.ctime_nsec() as u64,
        ] {
            digest.update(number.to_le_bytes());
        }
        digest.update(Sha256::digest(&entry));
        digest.update(BLOB_FORM);
        let key = crate::digest::hex_lower(&digest.finalize());
        Ok(key[..KEY_HEX_LEN].to_string())
    }

    /// A runner started from `snapshot` (the pool may append its flags).
    pub fn runner_program(&self, snapshot: &Snapshot) -> Program {
        (self.node.clone(), snapshot_args(&snapshot.blob, snapshot.seed, &[]))
    }
}

fn snapshot_args(blob: &Path, seed: HashSeed, rest: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = seed.v8_flags().into();
    args.extend(["--snapshot-blob".into(), blob.into(), RUNNER_ARGV1.into()]);
    args.extend(rest.iter().map(OsString::from));
    args
}

/// Build, check and store a snapshot of `source` below `cache_dir` (see the module's doc).
pub async fn build(
    settings: &RunnerSettings,
    source: &SnapshotSource,
    cache_dir: &Path,
) -> Result<Snapshot, SnapshotError> {
    let key = source.key()?;
    let seed = HashSeed::random()?;
    let snapshots_dir = cache_dir.join(SNAPSHOTS_DIR);
    crate::paths::ensure_private_dir(&snapshots_dir).map_err(|err| SnapshotError::CacheDir(format!("{err:#}")))?;
    let blob = snapshots_dir.join(blob_name(&key, seed));
    let mut pending = blob.as_os_str().to_owned();
    pending.push(format!(".tmp-{}", std::process::id()));
    let pending = PathBuf::from(pending);
    let built = build_and_check(settings, source, seed, &pending).await;
    if let Err(err) = built {
        let _ = std::fs::remove_file(&pending);
        return Err(err);
    }
    std::fs::rename(&pending, &blob).map_err(SnapshotError::Store)?;
    remove_stale(&snapshots_dir, &blob);
    Ok(Snapshot { blob, seed })
}

async fn build_and_check(
    settings: &RunnerSettings,
    source: &SnapshotSource,
    seed: HashSeed,
    pending: &Path,
) -> Result<(), SnapshotError> {
    let mut build_args: Vec<OsString> = seed.v8_flags().into();
    build_args.extend([
        "--snapshot-blob".into(),
        pending.into(),
        "--build-snapshot".into(),
        source.entry.clone().into_os_string(),
    ]);
    run_step(settings, (source.node.clone(), build_args), Step::Build).await?;
    let bytes = std::fs::metadata(pending).map_err(SnapshotError::Store)?.len();
    if bytes > BLOB_BYTES_MAX {
        return Err(SnapshotError::TooLarge { bytes });
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(pending, std::fs::Permissions::from_mode(0o600)).map_err(SnapshotError::Store)?;
    }
    strip_code_cache(pending.to_path_buf()).await?;
    let check = (
        source.node.clone(),
        snapshot_args(pending, seed, &[SNAPSHOT_CHECK_FLAG]),
    );
    run_step(settings, check, Step::Check).await
}

/// Drop Node's code cache from a built blob (`code_cache.rs`: a runner reads and copies it
/// at every start and uses none of it), before the check, so only a stripped blob that
/// passed its check is ever stored. A blob of another layout is kept whole.
async fn strip_code_cache(pending: PathBuf) -> Result<(), SnapshotError> {
    let stripped = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
        let blob = std::fs::read(&pending)?;
        let Some(stripped) = code_cache::strip(&blob) else {
            return Ok(false);
        };
        std::fs::write(&pending, stripped)?;
        Ok(true)
    })
    .await
    .map_err(|err| SnapshotError::Store(std::io::Error::other(err)))?
    .map_err(SnapshotError::Store)?;
    if !stripped {
        tracing::info!("the runners' snapshot keeps Node's code cache: its blob's layout was not recognized");
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Build,
    Check,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Build => "snapshot build",
            Step::Check => "snapshot check",
        }
    }

    /// One capture name per step: the last attempt's words are what an operator needs.
    fn log_stem(self) -> &'static str {
        match self {
            Step::Build => "snapshot-build",
            Step::Check => "snapshot-check",
        }
    }

    fn ms_max(self) -> u64 {
        match self {
            Step::Build => BUILD_MS_MAX,
            Step::Check => CHECK_MS_MAX,
        }
    }
}

/// Run one step to its end within its time; only a clean exit passes.
async fn run_step(settings: &RunnerSettings, program: Program, step: Step) -> Result<(), SnapshotError> {
    let mut child = spawn_helper(settings, &program, step.log_stem())?;
    let ms = step.ms_max();
    let outcome = match tokio::time::timeout(Duration::from_millis(ms), child.wait_exit()).await {
        Ok(outcome) => outcome?,
        Err(_elapsed) => {
            let _ = child.terminate(Duration::from_millis(STOP_GRACE_MS)).await;
            return Err(SnapshotError::Timeout { step: step.name(), ms });
        }
    };
    // Reap the group (a build leaves nothing running; this makes sure).
    let _ = child.terminate(Duration::from_millis(STOP_GRACE_MS)).await;
    if outcome.success() {
        return Ok(());
    }
    Err(SnapshotError::Failed {
        step: step.name(),
        outcome: describe(outcome),
        log_stem: step.log_stem(),
    })
}

fn describe(outcome: ExitOutcome) -> String {
    match (outcome.code(), outcome.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "no exit status".to_string(),
    }
}

/// Snapshots of other Node binaries or package builds (and pending files a killed server
/// left): they are never used again.
fn remove_stale(snapshots_dir: &Path, kept: &Path) {
    let Ok(entries) = std::fs::read_dir(snapshots_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(BLOB_PREFIX) && path != kept {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(dir: &Path) -> SnapshotSource {
        let node = dir.join("node");
        let entry = dir.join("runner-snapshot.cjs");
        std::fs::write(&node, b"#!/bin/sh\n").unwrap();
        std::fs::write(&entry, b"// entry v1\n").unwrap();
        SnapshotSource { node, entry }
    }

    /// A rebuilt package or a replaced Node must never be given an older snapshot.
    #[test]
    fn the_key_changes_with_the_entry_bytes_and_the_node_binary() {
        let dir = tempfile::tempdir().unwrap();
        let source = source(dir.path());
        let first = source.key().unwrap();
        assert_eq!(first, source.key().unwrap(), "the same pair, the same key");
        assert_eq!(first.len(), KEY_HEX_LEN);

        std::fs::write(&source.entry, b"// entry v2\n").unwrap();
        let rebuilt = source.key().unwrap();
        assert_ne!(first, rebuilt, "new entry bytes");

        std::fs::remove_file(&source.node).unwrap();
        std::fs::write(&source.node, b"#!/bin/sh\n").unwrap();
        assert_ne!(rebuilt, source.key().unwrap(), "a replaced node binary (new inode)");
    }

    /// Only a file named for this pair, with a seed V8 takes, is a stored snapshot; the seed a
    /// runner starts with is the one in the name.
    #[test]
    fn find_takes_only_a_snapshot_of_this_pair_and_its_seed_from_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let source = source(dir.path());
        let snapshots = dir.path().join(SNAPSHOTS_DIR);
        std::fs::create_dir(&snapshots).unwrap();
        let key = source.key().unwrap();
        let other_key = "0".repeat(KEY_HEX_LEN);
        for name in [
            format!("{BLOB_PREFIX}{key}.blob"),                        // no seed (older servers)
            format!("{BLOB_PREFIX}{key}-0000000000000000.blob"),       // seed 0: V8 draws one
            format!("{BLOB_PREFIX}{key}-8000000000000000.blob"),       // above i64::MAX
            format!("{BLOB_PREFIX}{key}-00000000000000AB.blob"),       // not the lower-case form
            format!("{BLOB_PREFIX}{key}-00000000000000ab.blob.tmp-7"), // a pending build
            format!("{BLOB_PREFIX}{other_key}-00000000000000ab.blob"), // another pair
        ] {
            std::fs::write(snapshots.join(name), b"").unwrap();
        }
        std::fs::create_dir(snapshots.join(format!("{BLOB_PREFIX}{key}-00000000000000cd.blob"))).unwrap();
        assert_eq!(source.find(dir.path()).unwrap(), None);

        let seed = HashSeed::new(0xab).unwrap();
        let blob = snapshots.join(blob_name(&key, seed));
        std::fs::write(&blob, b"").unwrap();
        let found = source.find(dir.path()).unwrap().expect("the stored snapshot");
        assert_eq!(
            found,
            Snapshot {
                blob: blob.clone(),
                seed
            }
        );
        let (_, args) = source.runner_program(&found);
        let args: Vec<String> = args.iter().map(|arg| arg.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "--hash-seed=171",
                "--no-rehash-snapshot",
                "--snapshot-blob",
                &blob.to_string_lossy(),
                RUNNER_ARGV1
            ]
        );
    }

    #[test]
    fn a_hash_seed_is_never_zero_and_fits_an_i64() {
        assert_eq!(HashSeed::new(0), None, "0 makes V8 draw a seed in every process");
        assert_eq!(HashSeed::new(HashSeed::MAX + 1), None);
        assert_eq!(HashSeed::new(u64::MAX), None);
        assert_eq!(HashSeed::new(HashSeed::MAX), Some(HashSeed(i64::MAX as u64)));
        let drawn: Vec<HashSeed> = (0..64).map(|_| HashSeed::random().unwrap()).collect();
        assert!(drawn.iter().all(|seed| HashSeed::new(seed.0).is_some()));
        let key = "f".repeat(KEY_HEX_LEN);
        for seed in &drawn {
            assert_eq!(seed_in_name(&key, OsStr::new(&blob_name(&key, *seed))), Some(*seed));
        }
        assert!(
            drawn.windows(2).any(|pair| pair[0] != pair[1]),
            "each build draws its own"
        );
    }

    #[test]
    fn only_a_built_package_has_a_snapshot_source() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("runner-main.js");
        std::fs::write(&script, b"").unwrap();
        let program: Program = ("/usr/bin/node".into(), vec![script.into_os_string()]);
        assert_eq!(SnapshotSource::of_runner(&program), None);
        std::fs::write(dir.path().join("runner-snapshot.cjs"), b"").unwrap();
        assert_eq!(
            SnapshotSource::of_runner(&program).map(|s| s.entry),
            Some(dir.path().join("runner-snapshot.cjs"))
        );
    }
}

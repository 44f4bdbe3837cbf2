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
//! Architecture Invariant: a snapshot is used only under the name of the exact pair it was
//! built from ([`SnapshotSource::blob_path`]: the Node binary's identity and the entry's
//! bytes), and only after its check passed; a failed build leaves no file under that name.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use supervisors::process::ExitOutcome;

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
/// Snapshot files are named `<PREFIX><key>.blob`.
const BLOB_PREFIX: &str = "runner-snapshot-";
/// Hex digits of the pair's digest in a snapshot's name.
const KEY_HEX_LEN: usize = 32;
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

    /// The snapshot's file for exactly this Node binary (path, device, inode, size, change
    /// time) and these entry bytes: a replaced Node or a rebuilt package gets another name.
    pub fn blob_path(&self, cache_dir: &Path) -> Result<PathBuf, SnapshotError> {
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
        let key = crate::digest::hex_lower(&digest.finalize());
        Ok(cache_dir
            .join(SNAPSHOTS_DIR)
            .join(format!("{BLOB_PREFIX}{}.blob", &key[..KEY_HEX_LEN])))
    }

    /// A runner started from the snapshot `blob` (the pool may append its flags).
    pub fn runner_program(&self, blob: &Path) -> Program {
        (self.node.clone(), snapshot_args(blob, &[]))
    }
}

fn snapshot_args(blob: &Path, rest: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--snapshot-blob".into(), blob.into(), RUNNER_ARGV1.into()];
    args.extend(rest.iter().map(OsString::from));
    args
}

/// Build, check and store the snapshot of `source` at `blob` (see the module's doc).
pub async fn build(settings: &RunnerSettings, source: &SnapshotSource, blob: &Path) -> Result<(), SnapshotError> {
    let snapshots_dir = blob.parent().expect("a snapshot's path is in its directory");
    crate::paths::ensure_private_dir(snapshots_dir).map_err(|err| SnapshotError::CacheDir(format!("{err:#}")))?;
    let mut pending = blob.as_os_str().to_owned();
    pending.push(format!(".tmp-{}", std::process::id()));
    let pending = PathBuf::from(pending);
    let built = build_and_check(settings, source, &pending).await;
    if built.is_err() {
        let _ = std::fs::remove_file(&pending);
        return built;
    }
    std::fs::rename(&pending, blob).map_err(SnapshotError::Store)?;
    remove_stale(snapshots_dir, blob);
    Ok(())
}

async fn build_and_check(
    settings: &RunnerSettings,
    source: &SnapshotSource,
    pending: &Path,
) -> Result<(), SnapshotError> {
    let build_args = vec![
        "--snapshot-blob".into(),
        pending.into(),
        "--build-snapshot".into(),
        source.entry.clone().into_os_string(),
    ];
    run_step(settings, (source.node.clone(), build_args), Step::Build).await?;
    let bytes = std::fs::metadata(pending).map_err(SnapshotError::Store)?.len();
    if bytes > BLOB_BYTES_MAX {
        return Err(SnapshotError::TooLarge { bytes });
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(pending, std::fs::Permissions::from_mode(0o600)).map_err(SnapshotError::Store)?;
    }
    let check = (source.node.clone(), snapshot_args(pending, &[SNAPSHOT_CHECK_FLAG]));
    run_step(settings, check, Step::Check).await
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
    fn the_blob_name_changes_with_the_entry_bytes_and_the_node_binary() {
        let dir = tempfile::tempdir().unwrap();
        let source = source(dir.path());
        let first = source.blob_path(dir.path()).unwrap();
        assert_eq!(
            first,
            source.blob_path(dir.path()).unwrap(),
            "the same pair, the same name"
        );
        assert!(first.file_name().unwrap().to_string_lossy().starts_with(BLOB_PREFIX));
        assert_eq!(first.parent(), Some(dir.path().join(SNAPSHOTS_DIR).as_path()));

        std::fs::write(&source.entry, b"// entry v2\n").unwrap();
        let rebuilt = source.blob_path(dir.path()).unwrap();
        assert_ne!(first, rebuilt, "new entry bytes");

        std::fs::remove_file(&source.node).unwrap();
        std::fs::write(&source.node, b"#!/bin/sh\n").unwrap();
        assert_ne!(
            rebuilt,
            source.blob_path(dir.path()).unwrap(),
            "a replaced node binary (new inode)"
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

//! Store errors. Every message says what happened and what to do; none contains a claim
//! token, a token hash, a payload or a project path.

use std::path::PathBuf;

/// Why a protected write or renewal was refused. Exactly one reason per refusal, checked in
/// this order: authority present, owner, generation, token, then expiry. Generation comes
/// before token so that a claim re-taken by the same owner reads as `generationChanged`;
/// `tokenChanged` then means a token that never belonged to this claim generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimLostReason {
    /// No claim is held on the resource (never acquired, or released).
    MissingAuthority,
    /// The claim's expiry time has passed; it cannot renew itself.
    Expired,
    /// Another owner type or owner ID holds the claim.
    OwnerChanged,
    /// The same owner holds a claim with another token.
    TokenChanged,
    /// The claim was taken again (or released and re-acquired) under a newer generation.
    GenerationChanged,
}

impl ClaimLostReason {
    pub const ALL: [ClaimLostReason; 5] = [
        Self::MissingAuthority,
        Self::Expired,
        Self::OwnerChanged,
        Self::TokenChanged,
        Self::GenerationChanged,
    ];

    /// The protocol name of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingAuthority => "missingAuthority",
            Self::Expired => "expired",
            Self::OwnerChanged => "ownerChanged",
            Self::TokenChanged => "tokenChanged",
            Self::GenerationChanged => "generationChanged",
        }
    }
}

impl std::fmt::Display for ClaimLostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A claim was lost: a handoff, not a run failure. Carries only the resource ID, the
/// generation the caller presented and the reason (what logs may show).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "claim lost on {resource_id} (generation {generation}): {reason}; another owner may hold it now, so stop writing and exit"
)]
pub struct ClaimLostError {
    pub resource_id: String,
    pub generation: i64,
    pub reason: ClaimLostReason,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    ClaimLost(#[from] ClaimLostError),

    #[error("run {run_id} is at revision {actual}, not the expected {expected}; reload the run and retry")]
    RevisionMismatch { run_id: String, expected: i64, actual: i64 },

    #[error("run {run_id} was not found; check the run ID with `pi-workflows runs`")]
    RunNotFound { run_id: String },

    #[error("run {run_id} already exists; choose a new run ID")]
    RunExists { run_id: String },

    #[error(
        "cannot {transition} run {run_id} while it is {run_status} (queue {queue_status}{paused}); no change was made",
        paused = if *paused { ", paused" } else { "" }
    )]
    InvalidTransition {
        transition: &'static str,
        run_id: String,
        run_status: String,
        queue_status: String,
        paused: bool,
    },

    #[error("{what} is invalid: {detail}")]
    InvalidInput { what: &'static str, detail: String },

    #[error(
        "this Pi session (digest {session_digest}) already has an active interactive run; wait for it to finish or cancel it"
    )]
    SessionBusy { session_digest: String },

    #[error(
        "this turn was first reported with another workflow message or end; a Pi turn serves one message and ends \
         once, so repeat the report exactly as first sent (nothing was changed)"
    )]
    TurnConflict,

    #[error("the submission was rejected by the step's checks: {message}")]
    SubmissionRejected { message: String },

    #[error("{resource_id} is claimed by a live owner; wait for its claim to expire or be released")]
    ClaimHeld { resource_id: String },

    #[error(
        "effect key {idempotency_key} of run {run_id} already names another request; \
         the workflow computed a different request for the same node visit, so it is refused"
    )]
    EffectRequestChanged { run_id: String, idempotency_key: String },

    #[error("run {run_id} has no effect {effect_id}; list its effects with `pi-workflows run review {run_id}`")]
    EffectNotFound { run_id: String, effect_id: String },

    #[error(
        "effect {effect_id} is {status}, not ambiguous: only an ambiguous effect can be reviewed; nothing was changed"
    )]
    EffectNotAmbiguous { effect_id: String, status: String },

    #[error(
        "run {run_id} has {count} ambiguous effect(s): inspect the external system, then settle each with \
         `pi-workflows run review {run_id}` before resuming"
    )]
    EffectsAmbiguous { run_id: String, count: i64 },

    #[error("node attempt {attempt_id} is not the unfinished attempt of run {run_id}")]
    AttemptNotActive { run_id: String, attempt_id: String },

    #[error(
        "state database {path} has schema digest {found}, but this pi-workflows expects {expected}. Nothing was changed. \
         Back up and reset it: stop any pi-workflows server, then `mv {path} {path}.bak` \
         (with its -wal and -shm files if present) and start again; the old file stays untouched"
    )]
    SchemaMismatch {
        path: PathBuf,
        found: String,
        expected: String,
    },

    #[error(
        "{path} is not a pi-workflows state database ({detail}). Nothing was changed. \
         Move it aside (`mv {path} {path}.bak`) and start again"
    )]
    NotStateDatabase { path: PathBuf, detail: String },

    #[error(transparent)]
    Blob(#[from] super::blobs::BlobError),

    #[error(transparent)]
    Settings(#[from] crate::settings::SettingsError),

    #[error(transparent)]
    Decision(#[from] crate::decision::DecisionError),

    #[error(transparent)]
    Channel(#[from] super::channels::ChannelError),

    #[error(
        "the settings of run {run_id} are at change {current}, not the expected {expected}; \
         read them again (`pi-workflows run settings {run_id}`) and retry"
    )]
    SettingsChanged {
        run_id: String,
        expected: i64,
        current: i64,
    },

    #[error("{what} is {bytes} bytes, above the limit of {max} bytes")]
    TooLarge {
        what: &'static str,
        bytes: usize,
        max: usize,
    },

    #[error("state database error: {0}")]
    Sqlite(#[from] rusqlite::Error),

    #[error("could not commit to the state database: {0}; the change was not applied, retry")]
    CommitFailed(String),

    /// The disk holding the database refused a write for space (`SQLITE_FULL`, a quota,
    /// a failed write): the transaction was rolled back. Not a refusal: the same write
    /// succeeds once space returns, without a restart.
    #[error(
        "the disk holding the state directory {dir} is full (or refuses writes); nothing was changed. \
         Free space on it and retry"
    )]
    DiskFull { dir: PathBuf },

    /// The database file cannot be opened for writing (a read-only file system, or a file
    /// that is not the user's to write); found when the server starts, before any change.
    #[error(
        "the state database {path} cannot be written (its file system is read-only, or the file is not writable by \
         this user); nothing was changed. Make it writable (remount the file system read-write, or give the file \
         back to this user with mode 0600) and start again"
    )]
    ReadOnly { path: PathBuf },

    #[error("the state store writer has stopped; restart the pi-workflows server")]
    WriterStopped,

    #[error("state file I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// The error code a client or runner gets for a failure that is not a refusal
    /// (`refusal_code` is `None`): `diskFull` while the disk is full, else `unavailable`.
    pub fn failure_code(&self) -> &'static str {
        match self {
            StoreError::DiskFull { .. } => "diskFull",
            StoreError::ReadOnly { .. } => "readOnly",
            _ => "unavailable",
        }
    }

    /// Whether this is the disk refusing a write for space (`DiskFull`).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::DiskFull { .. })
    }

    /// `DiskFull` for an SQLite or file error that says the disk refused a write for space in
    /// `dir` (`ENOSPC`, `EDQUOT`); any other error unchanged.
    pub(crate) fn with_disk_full_in(self, dir: &std::path::Path) -> StoreError {
        use std::io::ErrorKind;
        match self {
            StoreError::Sqlite(err) if sqlite_disk_full(&err) => StoreError::DiskFull { dir: dir.to_path_buf() },
            StoreError::Io(err) if matches!(err.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded) => {
                StoreError::DiskFull { dir: dir.to_path_buf() }
            }
            other => other,
        }
    }

    /// The claim-loss reason when this error is a claim loss.
    pub fn claim_lost_reason(&self) -> Option<ClaimLostReason> {
        match self {
            StoreError::ClaimLost(lost) => Some(lost.reason),
            _ => None,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Whether SQLite failed a write for lack of space: `SQLITE_FULL` (its Unix VFS reports
/// `ENOSPC` so), a write error (`SQLITE_IOERR_WRITE`: a quota, or a device that refuses the
/// write) or a shared-memory file it could not grow (`SQLITE_IOERR_SHMSIZE`).
pub(crate) fn sqlite_disk_full(err: &rusqlite::Error) -> bool {
    match err {
        rusqlite::Error::SqliteFailure(failure, _) => {
            failure.code == rusqlite::ErrorCode::DiskFull
                || matches!(
                    failure.extended_code,
                    rusqlite::ffi::SQLITE_IOERR_WRITE | rusqlite::ffi::SQLITE_IOERR_SHMSIZE
                )
        }
        _ => false,
    }
}

impl StoreError {
    /// The code of a domain refusal (the request itself cannot be applied; a retry gets the
    /// same answer, so it is stored), or `None` for an infrastructure failure that a retry
    /// may get past (never stored as an answer).
    pub fn refusal_code(&self) -> Option<&'static str> {
        Some(match self {
            StoreError::ClaimLost(_) => "claimLost",
            StoreError::RevisionMismatch { .. } => "revisionMismatch",
            StoreError::RunNotFound { .. } => "notFound",
            StoreError::RunExists { .. } => "runExists",
            StoreError::InvalidTransition { .. } => "invalidTransition",
            StoreError::AttemptNotActive { .. } => "attemptNotActive",
            StoreError::EffectRequestChanged { .. } => "effectRequestChanged",
            StoreError::EffectNotFound { .. } => "notFound",
            StoreError::EffectNotAmbiguous { .. } => "effectNotAmbiguous",
            StoreError::EffectsAmbiguous { .. } => "effectsAmbiguous",
            StoreError::Blob(_) => "invalidContent",
            StoreError::TooLarge { .. } => "tooLarge",
            StoreError::InvalidInput { .. } => "invalidInput",
            StoreError::SessionBusy { .. } => "sessionBusy",
            StoreError::TurnConflict => "turnConflict",
            StoreError::SubmissionRejected { .. } => "submissionRejected",
            StoreError::Settings(err) => err.code(),
            StoreError::Decision(err) => err.code(),
            StoreError::Channel(err) => err.code(),
            StoreError::SettingsChanged { .. } => "settingsChanged",
            _ => return None,
        })
    }
}

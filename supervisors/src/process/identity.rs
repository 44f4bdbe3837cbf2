//! Start identity of a process (boot id + pid + start time) and /proc scanning.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::str::FromStr;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::error::ProcessError;
use super::spec::ProcessSignal;
use super::{PROC_FILE_BYTES_MAX, sys};

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
/// Longest accepted boot id (a UUID is 36 characters).
const BOOT_ID_CHARS_MAX: usize = 64;
/// Index of `starttime` (field 22 of `/proc/<pid>/stat`) counted from `state` (field 3).
const STAT_START_TIME_INDEX: usize = 22 - 3;

/// Identifies one process incarnation across PID reuse and reboots: the kernel boot id, the pid
/// and the start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
///
/// Its stable string form is `boot_id:pid:starttime` ([`fmt::Display`] and [`FromStr`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StartIdentity {
    /// `/proc/sys/kernel/random/boot_id` when the process was recorded.
    pub boot_id: String,
    /// The process id (also its process group id for children started by this module).
    pub pid: i32,
    /// Start time in clock ticks after boot.
    pub start_time_ticks: u64,
}

impl fmt::Display for StartIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.boot_id, self.pid, self.start_time_ticks)
    }
}

impl FromStr for StartIdentity {
    type Err = ProcessError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |what: &str| ProcessError::IdentityParse(what.to_owned());
        let mut parts = s.split(':');
        let (Some(boot_id), Some(pid), Some(ticks), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("wrong number of fields"));
        };
        if !valid_boot_id(boot_id) {
            return Err(bad("malformed boot id"));
        }
        let pid: i32 = pid.parse().map_err(|_| bad("malformed pid"))?;
        if pid <= 1 {
            return Err(bad("pid out of range"));
        }
        let start_time_ticks = ticks.parse().map_err(|_| bad("malformed start time"))?;
        Ok(Self {
            boot_id: boot_id.to_owned(),
            pid,
            start_time_ticks,
        })
    }
}

fn valid_boot_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= BOOT_ID_CHARS_MAX && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// What happened to a signal request checked against a recorded identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalOutcome {
    /// The identity matched and the group was signaled.
    Signaled,
    /// No process with that pid exists (or its group is gone); nothing was sent.
    NotRunning,
    /// A process with that pid exists but is a different incarnation (or another boot); nothing was sent.
    IdentityMismatch,
}

/// The fields of `/proc/<pid>/stat` this module needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatFields {
    pub(crate) state: u8,
    pub(crate) ppid: i32,
    pub(crate) pgrp: i32,
    pub(crate) start_time_ticks: u64,
}

impl StatFields {
    pub(crate) fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses one `/proc/<pid>/stat` line. `comm` may contain spaces and `)`, so fields are counted
/// after the LAST `)`.
pub(crate) fn parse_stat(line: &str) -> Option<StatFields> {
    let after_comm = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_ascii_whitespace().collect();
    let state = *fields.first()?.as_bytes().first()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let pgrp = fields.get(2)?.parse().ok()?;
    let start_time_ticks = fields.get(STAT_START_TIME_INDEX)?.parse().ok()?;
    Some(StatFields {
        state,
        ppid,
        pgrp,
        start_time_ticks,
    })
}

fn read_small_file(path: &str) -> std::io::Result<String> {
    // Room for the whole file up front: `take` hides the size, so an empty `String` would be
    // filled by growing reads (32, 32, 64, 128, … bytes: six `read`s for a stat line, on
    // every spawn and settle); this way one `read` and the one that finds its end.
    let mut text = String::with_capacity(PROC_FILE_BYTES_MAX as usize);
    File::open(path)?.take(PROC_FILE_BYTES_MAX).read_to_string(&mut text)?;
    Ok(text)
}

pub(crate) fn read_stat(pid: i32) -> Option<StatFields> {
    if pid <= 0 {
        return None;
    }
    parse_stat(&read_small_file(&format!("/proc/{pid}/stat")).ok()?)
}

/// The current kernel boot id (`/proc/sys/kernel/random/boot_id`), read once per process: a
/// reboot ends this process, so the id cannot change while it runs.
pub fn current_boot_id() -> Result<String, ProcessError> {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    if let Some(id) = BOOT_ID.get() {
        return Ok(id.clone());
    }
    let reason = |r: String| ProcessError::Identity { pid: 0, reason: r };
    let text = read_small_file(BOOT_ID_PATH).map_err(|e| reason(format!("reading {BOOT_ID_PATH}: {e}")))?;
    let id = text.trim();
    if !valid_boot_id(id) {
        return Err(reason(format!("{BOOT_ID_PATH} is malformed")));
    }
    Ok(BOOT_ID.get_or_init(|| id.to_owned()).clone())
}

/// Reads the start identity of a live (or not yet reaped) process.
pub(crate) fn read_identity(pid: i32) -> Result<StartIdentity, ProcessError> {
    let boot_id = current_boot_id()?;
    let stat = read_stat(pid).ok_or_else(|| ProcessError::Identity {
        pid,
        reason: "/proc/<pid>/stat is missing or malformed".to_owned(),
    })?;
    Ok(StartIdentity {
        boot_id,
        pid,
        start_time_ticks: stat.start_time_ticks,
    })
}

/// The start identity of process `pid` now, or `None` if it does not exist (or cannot be read).
pub fn identity_of(pid: i32) -> Option<StartIdentity> {
    read_identity(pid).ok()
}

/// Whether the process `identity` names still runs: same pid and start time, not a zombie
/// (a zombie has exited; its parent may be slow to reap it, or never do).
pub fn is_running(identity: &StartIdentity) -> bool {
    read_stat(identity.pid).is_some_and(|stat| stat.start_time_ticks == identity.start_time_ticks && !stat.is_dead())
}

/// Signals the process group led by `identity.pid` only if the live process has the same boot id,
/// pid and start time; otherwise sends nothing.
///
/// Residual race: if the process exits and its pid is reused between the check and the `kill`
/// (microseconds, and only after a full pid wrap-around), the signal could reach the new group.
/// Processes still owned by a [`super::ProcessChild`] are never at risk: their leader stays
/// unreaped until cleanup.
pub fn signal_group_if_identity_matches(
    identity: &StartIdentity,
    signal: ProcessSignal,
) -> Result<SignalOutcome, ProcessError> {
    if identity.pid <= 1 {
        return Ok(SignalOutcome::IdentityMismatch);
    }
    if identity.boot_id != current_boot_id()? {
        return Ok(SignalOutcome::IdentityMismatch);
    }
    let Some(stat) = read_stat(identity.pid) else {
        return Ok(SignalOutcome::NotRunning);
    };
    if stat.start_time_ticks != identity.start_time_ticks {
        return Ok(SignalOutcome::IdentityMismatch);
    }
    match sys::kill_group(identity.pid, signal.to_rustix()) {
        Ok(true) => Ok(SignalOutcome::Signaled),
        Ok(false) => Ok(SignalOutcome::NotRunning),
        Err(e) => Err(ProcessError::os(identity.pid, "kill(-pgid)", e)),
    }
}

/// The parent pid of process `pid` and whether it still runs (false for a zombie), or
/// `None` when no such process exists. A server uses it to accept a registration only for
/// a direct child of a runner.
pub fn parent_of(pid: i32) -> Option<(i32, bool)> {
    read_stat(pid).map(|stat| (stat.ppid, !stat.is_dead()))
}

/// Live (non-zombie) processes whose process group is `pgid`, found by scanning `/proc`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| read_stat(pid).is_some_and(|s| s.pgrp == pgid && !s.is_dead()))
        .collect();
    members.sort_unstable();
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(comm: &str) -> String {
        let tail: Vec<String> = (4..=52)
            .map(|n| if n == 22 { "987654".into() } else { n.to_string() })
            .collect();
        format!("1234 ({comm}) S {}", tail.join(" "))
    }

    #[test]
    fn parses_start_time_after_last_paren() {
        for comm in ["sleep", "a b c", "evil) S 1 2 3", "x)(y", ")"] {
            let fields = parse_stat(&stat_line(comm)).expect("parse");
            assert_eq!(fields.start_time_ticks, 987_654, "comm {comm:?}");
            assert_eq!(fields.state, b'S');
            assert_eq!(fields.pgrp, 5);
        }
    }

    #[test]
    fn rejects_truncated_stat() {
        assert_eq!(parse_stat("1234 (x) S 1 2 3"), None);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn identity_string_rejects_bad_input() {
        for bad in [
            "",
            "a:b",
            "abc:12",
            "abc:12:x",
            "abc:-5:1",
            "abc:1:1",
            "ab:c:12:34",
            "zz:12:34",
            ":12:34",
        ] {
            assert!(bad.parse::<StartIdentity>().is_err(), "{bad:?}");
        }
        let ok: StartIdentity = "0123-abcd:42:77".parse().expect("valid");
        assert_eq!(ok.to_string(), "0123-abcd:42:77");
    }
}

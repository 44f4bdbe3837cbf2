//! Orphans: processes reparented to this process because it is a child subreaper
//! (`set_child_subreaper`) after their parent died. Nobody else waits for them, so without
//! this module an orphan that exits stays a zombie for good.
//!
//! The leaders this crate spawned are direct children too, and they must stay unreaped
//! until their `ProcessChild` reaps them (their pid and group stay reserved while they may
//! be signalled). So every spawn records its leader here, under the same lock the reaper
//! takes, and only children that no `ProcessChild` owns are ever reaped by `reap_orphans`.
//!
//! `orphans_with_env` finds the orphans (and their descendants) that still carry a marker
//! in their environment, so an owner can stop what escaped a process group it owned (a
//! detached `setsid` child, a double fork). A process that cleared its environment, or one
//! whose parent still lives outside this process's descendants, is not found.

use std::collections::{BTreeSet, VecDeque};
use std::io::Read;
use std::sync::{Mutex, MutexGuard};

use rustix::process::{Pid, WaitOptions};

use super::identity::read_stat;

/// Processes one orphan search visits at most.
pub const ORPHAN_SCAN_PROCESSES_MAX: usize = 4_096;
/// Bytes of a process's environment read at most.
pub const ENVIRON_BYTES_MAX: u64 = 256 * 1024;

/// Leaders spawned by this crate and not reaped yet.
static OWNED: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

pub(crate) fn owned() -> MutexGuard<'static, BTreeSet<i32>> {
    OWNED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The leader `pid` was lost (reaped elsewhere): it is no longer ours to keep.
pub(crate) fn disown(pid: i32) {
    owned().remove(&pid);
}

/// The direct children of process `pid` (every thread's), from `/proc/<pid>/task/*/children`.
fn children_of(pid: &str) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        children.extend(children_in(&task.path().join("children")));
    }
    children
}

/// The pids a `/proc/.../task/<tid>/children` file lists (none if it cannot be read).
fn children_in(path: &std::path::Path) -> Vec<i32> {
    let mut text = String::new();
    match std::fs::File::open(path).and_then(|file| file.take(64 * 1024).read_to_string(&mut text)) {
        Ok(_) => text
            .split_ascii_whitespace()
            .filter_map(|pid| pid.parse::<i32>().ok())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Whether this process has a direct child that no `ProcessChild` owns (an orphan, live or
/// exited): one small `/proc` read per thread of this process, cheap enough to ask in place
/// before a search that may be long (usually there is none).
pub fn has_orphans() -> bool {
    !unowned_children(&owned()).is_empty()
}

/// This process's direct children that no `ProcessChild` owns. Only the main thread's list
/// is read: the kernel gives an orphan to the subreaper's first live thread, which is the
/// main thread (`find_new_reaper`, `find_alive_thread`), and so are the children of a thread
/// that exits. Every other thread's list holds only children it spawned itself, which their
/// spawner waits for. One small read instead of one per thread at every runner's end.
fn unowned_children(owned: &BTreeSet<i32>) -> Vec<i32> {
    let main = format!("/proc/self/task/{}/children", std::process::id());
    children_in(std::path::Path::new(&main))
        .into_iter()
        .filter(|pid| !owned.contains(pid))
        .collect()
}

/// Reap every exited direct child that no `ProcessChild` owns; how many were reaped.
pub fn reap_orphans() -> usize {
    let owned = owned();
    let mut reaped = 0;
    for pid in unowned_children(&owned) {
        if !read_stat(pid).is_some_and(|stat| stat.is_dead()) {
            continue;
        }
        let Some(target) = Pid::from_raw(pid) else { continue };
        if matches!(rustix::process::waitpid(Some(target), WaitOptions::NOHANG), Ok(Some(_))) {
            reaped += 1;
        }
    }
    reaped
}

/// Live orphans, and their live descendants, whose environment holds `marker` exactly
/// (`NAME=VALUE`).
pub fn orphans_with_env(marker: &str) -> Vec<i32> {
    let roots = unowned_children(&owned());
    let mut queue: VecDeque<i32> = roots.into();
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    while let Some(pid) = queue.pop_front() {
        if seen.len() >= ORPHAN_SCAN_PROCESSES_MAX || !seen.insert(pid) {
            continue;
        }
        if read_stat(pid).is_none_or(|stat| stat.is_dead()) {
            continue;
        }
        if environ_holds(pid, marker) {
            found.push(pid);
        }
        queue.extend(children_of(&pid.to_string()));
    }
    found
}

fn environ_holds(pid: i32, marker: &str) -> bool {
    let mut bytes = Vec::new();
    let read = std::fs::File::open(format!("/proc/{pid}/environ"))
        .and_then(|file| file.take(ENVIRON_BYTES_MAX).read_to_end(&mut bytes));
    read.is_ok() && bytes.split(|byte| *byte == 0).any(|entry| entry == marker.as_bytes())
}

/// SIGKILL every orphan (and descendant) that carries `marker`; how many were signalled.
/// Each becomes a zombie child of this process, reaped by the next `reap_orphans`.
pub fn kill_orphans_with_env(marker: &str) -> usize {
    let mut killed = 0;
    for pid in orphans_with_env(marker) {
        let Some(target) = Pid::from_raw(pid) else { continue };
        if rustix::process::kill_process(target, rustix::process::Signal::KILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

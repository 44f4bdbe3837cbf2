//! Memory a quiet server gives back. A burst of runs grows SQLite's page and statement
//! caches and the allocator's per-thread arenas; without this a server idling after a busy
//! hour kept about twice its fresh RSS (see docs/PERFORMANCE.md, tenth round). And the
//! allocator's settings a server starts with (`tune_allocator`).

use crate::server::spawn::GLIBC_TUNABLES_ENV;
use crate::store::Store;

/// glibc's allocator as a server keeps memory after a burst of runs. Both settings stop free
/// chunks from pinning pages that `malloc_trim` could otherwise return (docs/PERFORMANCE.md,
/// thirty-fourth and thirty-fifth rounds), measured on the benchmark's idle server after its load:
/// - one arena for all threads (`arena_max`): by default each thread that allocates gets an
///   arena of its own, and each of the five or six kept pages holding a few live chunks
///   (12,396–14,260 KiB → 11,480–12,196 KiB, for ~3 % more server CPU a run);
/// - no per-thread cache of freed chunks (`tcache_count`): glibc counts a cached chunk as in
///   use, so the async worker's and the store writer's caches, up to seven chunks of each of
///   64 sizes, pinned ~1.6 MB of scattered heap pages (~11,500 → ~10,000 KiB).
const SERVER_MALLOC_TUNABLES: [(&str, &str); 2] = [(ARENA_MAX_TUNABLE, "1"), ("glibc.malloc.tcache_count", "0")];
const ARENA_MAX_TUNABLE: &str = "glibc.malloc.arena_max";
/// glibc's older name for `glibc.malloc.arena_max`; a user's setting wins over ours.
const MALLOC_ARENA_MAX_ENV: &str = "MALLOC_ARENA_MAX";
/// Set on the server's second start (`tune_allocator`), which then removes it.
const TUNED_ENV: &str = "PI_WORKFLOWS_SERVER_TUNED";
/// The user's own `GLIBC_TUNABLES` across the second start, if they set one: the server gives
/// its children the environment the user gave it.
const USER_TUNABLES_ENV: &str = "PI_WORKFLOWS_USER_GLIBC_TUNABLES";

/// Runs the server with [`SERVER_MALLOC_TUNABLES`]. glibc reads tunables only when a process
/// starts (no call sets the cache count later), so unless the user set them all, this starts
/// the same program again, with the same arguments, open files and process ID, and the
/// tunables added to `GLIBC_TUNABLES`; the second start then puts the user's environment
/// back. Call it first thing in `server run`, while the process has one thread (it changes
/// the environment). If the program cannot start again, the server runs untuned: that costs
/// memory, not correctness, and the returned message says so.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator() -> Option<String> {
    use std::os::unix::process::CommandExt;

    if std::env::var_os(TUNED_ENV).is_some() {
        restore_user_environment();
        restore_process_name();
        return None;
    }
    let user_tunables = std::env::var_os(GLIBC_TUNABLES_ENV);
    let user_text = user_tunables
        .as_deref()
        .map(|value| value.to_string_lossy().into_owned());
    let added = tunables_to_add(user_text.as_deref(), std::env::var_os(MALLOC_ARENA_MAX_ENV).is_some());
    if added.is_empty() {
        return None;
    }
    let combined = match &user_text {
        Some(user) if !user.is_empty() => format!("{user}:{added}"),
        _ => added,
    };
    let mut args = std::env::args_os();
    let program_name = args.next().unwrap_or_default();
    // `/proc/self/exe` is this very program even if its file was replaced since it started.
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0(program_name)
        .args(args)
        .env(GLIBC_TUNABLES_ENV, combined)
        .env(TUNED_ENV, "1");
    if let Some(user_tunables) = user_tunables {
        command.env(USER_TUNABLES_ENV, user_tunables);
    }
    let err = command.exec();
    Some(format!(
        "could not restart the server with its allocator settings ({err}); it runs with glibc's defaults and keeps more memory when idle"
    ))
}

/// The kernel names a process after the file it started (`ps`, `top`, `/proc/<pid>/comm`),
/// which for the second start is `exe`; give it back the name it started with, the last part
/// of its program name (the kernel keeps 15 bytes of it).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn restore_process_name() {
    use std::os::unix::ffi::OsStrExt;

    const PROCESS_NAME_BYTES_MAX: usize = 15;
    let Some(program_name) = std::env::args_os().next() else {
        return;
    };
    let Some(file_name) = std::path::Path::new(&program_name).file_name() else {
        return;
    };
    let bytes = file_name.as_bytes();
    let name = &bytes[..bytes.len().min(PROCESS_NAME_BYTES_MAX)];
    if let Ok(name) = std::ffi::CString::new(name) {
        // Only the name `ps` shows: nothing depends on it.
        let _ = rustix::thread::set_name(&name);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() -> Option<String> {
    None
}

/// The server's tunables the user did not set, joined as glibc reads them (`name=value:…`).
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
fn tunables_to_add(user_tunables: Option<&str>, arena_max_env_set: bool) -> String {
    let set_by_user = |name: &str| {
        user_tunables.is_some_and(|tunables| {
            tunables
                .split(':')
                .any(|entry| entry.split_once('=').is_some_and(|(user_name, _)| user_name == name))
        })
    };
    SERVER_MALLOC_TUNABLES
        .iter()
        .filter(|(name, _)| !set_by_user(name))
        .filter(|(name, _)| !(arena_max_env_set && *name == ARENA_MAX_TUNABLE))
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The user's `GLIBC_TUNABLES` as it was before [`tune_allocator`] added the server's: the
/// server's children (runners, resolvers) see the user's environment, not the server's
/// allocator settings.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn restore_user_environment() {
    debug_assert!(
        has_one_thread(),
        "the environment changes only while the process has one thread"
    );
    let user_tunables = std::env::var_os(USER_TUNABLES_ENV);
    // SAFETY: `tune_allocator` runs first in `server run`, before the server starts a thread,
    // so nothing reads the environment concurrently.
    unsafe {
        std::env::remove_var(TUNED_ENV);
        std::env::remove_var(USER_TUNABLES_ENV);
        match user_tunables {
            Some(user_tunables) => std::env::set_var(GLIBC_TUNABLES_ENV, user_tunables),
            None => std::env::remove_var(GLIBC_TUNABLES_ENV),
        }
    }
}

/// Whether this process runs one thread, the only time changing its environment is sound.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn has_one_thread() -> bool {
    std::fs::read_dir("/proc/self/task").map_or(true, |tasks| tasks.count() == 1)
}

/// Release the store's caches, then return the allocator's free pages to the kernel.
/// Cheap enough for once per quiet spell (well under a millisecond of CPU), and never
/// called while runs are arriving: re-growing the caches is the cost.
pub async fn release(store: &Store) {
    if let Err(err) = store.release_memory().await {
        tracing::warn!(error = %err, "could not release the store's cache memory");
    }
    trim_allocator();
    tracing::debug!("released cache memory after a quiet spell");
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_allocator() {
    // SAFETY: `malloc_trim` takes no pointer and only returns free memory that glibc's
    // allocator owns to the kernel; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_allocator() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_adds_only_the_tunables_the_user_did_not_set() {
        let all = "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0";
        assert_eq!(tunables_to_add(None, false), all);
        assert_eq!(tunables_to_add(Some(""), false), all);
        assert_eq!(tunables_to_add(Some("glibc.malloc.hugetlb=1"), false), all);
        assert_eq!(
            tunables_to_add(Some("glibc.malloc.tcache_count=7"), false),
            "glibc.malloc.arena_max=1"
        );
        assert_eq!(tunables_to_add(None, true), "glibc.malloc.tcache_count=0");
        assert_eq!(
            tunables_to_add(Some("glibc.malloc.hugetlb=1:glibc.malloc.arena_max=4"), false),
            "glibc.malloc.tcache_count=0"
        );
        // A name that only starts like one of ours is not ours.
        assert_eq!(tunables_to_add(Some("glibc.malloc.arena_max_x=2"), false), all);
        assert_eq!(
            tunables_to_add(Some("glibc.malloc.tcache_count=3:glibc.malloc.arena_max=2"), true),
            ""
        );
    }
}

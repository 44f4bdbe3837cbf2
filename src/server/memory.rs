//! Memory a quiet server gives back. A burst of runs grows SQLite's page and statement
//! caches and the allocator's per-thread arenas; without this a server idling after a busy
//! hour kept about twice its fresh RSS (see docs/PERFORMANCE.md, tenth round). And the
//! allocator's arenas a server may have at all: one.

use crate::store::Store;

/// glibc's malloc arenas a server keeps: one for all its threads. By default each new thread
/// that allocates gets an arena of its own (up to eight per core); after a burst of runs each
/// of the server's five or six arenas kept pages that hold a few live chunks, and `malloc_trim`
/// cannot return a page that holds one. With one arena an idle server after the benchmark's
/// load keeps 11,480–12,196 KiB instead of 12,396–14,260, for about 3 % more server CPU a
/// run: the async worker and the store writer share the arena's lock for what their thread
/// caches do not serve (docs/PERFORMANCE.md, thirty-fourth round).
const ALLOCATOR_ARENAS_MAX: i32 = 1;

/// Limit the allocator to `ALLOCATOR_ARENAS_MAX` arenas, unless the user set a count in the
/// environment. Call it before the server starts a thread: a thread that already has an arena
/// keeps it.
pub fn limit_allocator_arenas() {
    if arena_count_set_by_user() {
        return;
    }
    set_arena_max(ALLOCATOR_ARENAS_MAX);
}

/// glibc's own two ways to set the arena count; a user's setting wins over ours.
fn arena_count_set_by_user() -> bool {
    std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var_os("GLIBC_TUNABLES")
            .is_some_and(|tunables| tunables.to_string_lossy().contains("glibc.malloc.arena_max"))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(arenas: i32) {
    assert!(arenas >= 1, "an allocator needs an arena");
    // SAFETY: `mallopt` takes no pointer; M_ARENA_MAX only caps how many arenas glibc makes
    // from now on. It returns 0 on a bad value, which `arenas >= 1` rules out.
    let accepted = unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    debug_assert_eq!(accepted, 1, "glibc accepts an arena count of {arenas}");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_arenas: i32) {}

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

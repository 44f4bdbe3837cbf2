//! Memory a quiet server gives back. A burst of runs grows SQLite's page and statement
//! caches and the allocator's per-thread arenas; without this a server idling after a busy
//! hour kept about twice its fresh RSS (see docs/PERFORMANCE.md, tenth round).

use crate::store::Store;

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

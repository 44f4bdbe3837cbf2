//! Warm runners: runner processes started ahead of need, each waiting (on its fd 3 channel)
//! for a launch envelope, so a run's first node does not wait for a Node start-up.
//!
//! The pool refills when the server starts and when its last runner ends, not when a warm
//! runner is taken: a Node start-up takes a core for ~50–100 ms, which on a small machine
//! measurably slowed the run that had just begun (per-node overhead 0.4 → 1.0 ms on 2 cores).
//! A warm runner still booting when taken is used as is (the start-up is already under way).
//!
//! Architecture Invariant: a warm runner holds nothing: no claim, no runner epoch, no
//! workflow code. It becomes a run's runner only after that run's epoch is recorded; if the
//! server dies first, the channel closes and the warm runner exits on its own (end of file
//! before any launch). On a graceful stop the pool's processes are stopped with the tree.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;

use supervisors::process::ProcessChild;

use super::context::ServerContext;

/// Warm runners kept at most (`PI_WORKFLOWS_WARM_RUNNERS`, default 1 with the Node runner).
pub const WARM_RUNNERS_MAX: usize = 4;

/// One started runner process and the server's end of its channel.
pub struct WarmRunner {
    child: ProcessChild,
    channel: StdUnixStream,
    log_stem: String,
}

impl WarmRunner {
    /// Hand the process to a run: its captures are renamed after the run's runner epoch
    /// (where operators look for them).
    pub fn assign(self, logs_dir: &Path, runner_epoch: &str) -> (ProcessChild, StdUnixStream) {
        for extension in ["out", "err"] {
            let from = logs_dir.join(format!("{}.{extension}", self.log_stem));
            let to = logs_dir.join(format!("{runner_epoch}.{extension}"));
            if let Err(err) = std::fs::rename(&from, &to) {
                tracing::debug!(error = %err, "warm runner capture not renamed");
            }
        }
        (self.child, self.channel)
    }
}

#[derive(Default)]
pub struct RunnerPool {
    warm: Mutex<Vec<WarmRunner>>,
    started: std::sync::atomic::AtomicU64,
    /// One refill at a time, so the pool never grows past its target.
    filling: std::sync::atomic::AtomicBool,
}

impl RunnerPool {
    /// A live warm runner, if one is ready.
    pub fn take(&self) -> Option<WarmRunner> {
        let mut warm = self.warm.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while let Some(mut runner) = warm.pop() {
            // One that exited on its own (e.g. a broken installation) is dropped, not used.
            if matches!(runner.child.try_exit(), Ok(None)) {
                return Some(runner);
            }
        }
        None
    }

    /// Start warm runners until `target` are waiting (never while the server stops).
    pub fn refill(&self, ctx: &Arc<ServerContext>) {
        let target = ctx.runner_settings.warm_runners.min(WARM_RUNNERS_MAX);
        let Some(program) = ctx.runner_settings.program.as_ref() else {
            return;
        };
        if self.filling.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.fill_to(ctx, program, target);
        self.filling.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn fill_to(
        &self,
        ctx: &Arc<ServerContext>,
        program: &(std::path::PathBuf, Vec<std::ffi::OsString>),
        target: usize,
    ) {
        while self.len() < target && ctx.stop_requested().is_none() {
            match self.start_one(ctx, program) {
                Ok(runner) => self
                    .warm
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(runner),
                Err(err) => {
                    tracing::warn!(error = %err, "could not start a warm runner; runners start on demand");
                    return;
                }
            }
        }
    }

    fn start_one(
        &self,
        ctx: &Arc<ServerContext>,
        program: &(std::path::PathBuf, Vec<std::ffi::OsString>),
    ) -> anyhow::Result<WarmRunner> {
        let number = self.started.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let log_stem = format!("warm-e{}-{number}", ctx.epoch);
        let (child, channel) = super::runner::spawn_with_channel(&ctx.runner_settings, program, &log_stem, None)
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        Ok(WarmRunner {
            child,
            channel,
            log_stem,
        })
    }

    fn len(&self) -> usize {
        self.warm.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }

    /// Stop every warm runner (graceful server stop).
    pub async fn shutdown(&self) {
        let runners: Vec<WarmRunner> = std::mem::take(&mut *self.warm.lock().unwrap_or_else(|p| p.into_inner()));
        for mut runner in runners {
            let _ = runner.child.terminate(std::time::Duration::from_millis(500)).await;
        }
    }
}

/// Refill the pool off the launch path (a spawn costs a fork and an exec), after `delay`.
pub fn refill_soon(ctx: &Arc<ServerContext>, delay: std::time::Duration) {
    if ctx.runner_settings.warm_runners == 0 {
        return;
    }
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        ctx.runner_pool.refill(&ctx)
    });
}

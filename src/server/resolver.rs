//! The warm source resolver: one Node child (`resolver-main.js --serve`) kept started, so
//! `run.start` resolves a workflow (source identity, definition snapshot and digest,
//! normalized input) without a Node start-up. Requests go one at a time over its private
//! channel (fd 3), each bounded in time and size; a resolver that fails, times out or has
//! served its quota is stopped and replaced.
//!
//! Architecture Invariant: the resolver only reads workflow sources and answers; it never
//! touches the store. Its answer is checked like any client payload (`run.start`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use supervisors::process::ProcessChild;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::context::ServerContext;
use super::frames::{LineRead, read_line};
use crate::protocol::{decode_frame, encode_frame};

/// How long one resolution may take (loading a large workflow tree included).
pub const RESOLVE_TIMEOUT_MS: u64 = 60_000;
/// Requests one resolver serves before it is replaced (it keeps every workflow version it
/// imported in memory); the same bound as `SERVED_REQUESTS_MAX` in `resolver-main.ts`.
pub const SERVED_REQUESTS_MAX: u64 = 64;

/// Why a resolution gave no answer.
#[derive(Debug)]
pub enum ResolveFailure {
    /// The workflow itself: not found, an invalid definition, rejected input.
    Workflow { code: String, message: String },
    /// The resolver could not run (no Node, a crash, a timeout).
    Unavailable(String),
}

struct Warm {
    child: ProcessChild,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
}

#[derive(Default)]
pub struct ResolverPool {
    warm: tokio::sync::Mutex<Option<Warm>>,
    started: std::sync::atomic::AtomicU64,
}

impl ResolverPool {
    /// Start the resolver ahead of the first `run.start`.
    pub async fn prewarm(&self, ctx: &Arc<ServerContext>) {
        let mut warm = self.warm.lock().await;
        if warm.is_none() {
            *warm = self
                .start(ctx)
                .map_err(|err| tracing::warn!(error = %err, "no warm resolver"))
                .ok();
        }
    }

    /// Resolve `target` for `project` with the raw `input_json` (if any). A resolver that
    /// fails is replaced; one that had served before is retried once with a fresh one.
    pub async fn resolve(
        &self,
        ctx: &Arc<ServerContext>,
        target: &str,
        project: &str,
        input_json: Option<&str>,
    ) -> Result<Map<String, Value>, ResolveFailure> {
        let mut request = json!({"target": target, "project": project});
        if let Some(input) = input_json {
            request["inputJson"] = Value::String(input.to_string());
        }
        let mut slot = self.warm.lock().await;
        for _ in 0..2 {
            if slot.as_ref().is_some_and(|warm| warm.next_id >= SERVED_REQUESTS_MAX) {
                // Its quota is spent (it exits by itself after it): replace it first.
                stop(slot.take()).await;
            }
            if slot.is_none() {
                *slot = Some(
                    self.start(ctx)
                        .map_err(|err| ResolveFailure::Unavailable(err.to_string()))?,
                );
            }
            let warm = slot.as_mut().expect("a resolver was just started");
            warm.next_id += 1;
            let fresh = warm.next_id == 1;
            request["id"] = Value::from(warm.next_id);
            let limit = Duration::from_millis(RESOLVE_TIMEOUT_MS);
            let why = match tokio::time::timeout(limit, exchange(warm, &request)).await {
                Ok(Ok(reply)) => return answer_of(reply),
                Ok(Err(why)) => why,
                Err(_) => format!("no answer within {} s", RESOLVE_TIMEOUT_MS / 1_000),
            };
            // A resolver that failed once is not trusted again.
            stop(slot.take()).await;
            if fresh {
                return Err(ResolveFailure::Unavailable(why));
            }
        }
        Err(ResolveFailure::Unavailable("the resolver failed twice".to_string()))
    }

    fn start(&self, ctx: &Arc<ServerContext>) -> anyhow::Result<Warm> {
        let Some(program) = ctx.runner_settings.resolver.as_ref() else {
            anyhow::bail!(
                "the pi-workflows package or node was not found when the server started (see the server log)"
            );
        };
        let number = self.started.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let log_stem = format!("resolver-e{}-{number}", ctx.epoch);
        let (child, parent_end) = super::runner::spawn_with_channel(&ctx.runner_settings, program, &log_stem, None)
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        parent_end.set_nonblocking(true)?;
        let (read_half, writer) = tokio::net::UnixStream::from_std(parent_end)?.into_split();
        Ok(Warm {
            child,
            reader: BufReader::new(read_half),
            writer,
            next_id: 0,
        })
    }

    /// Stop the resolver (graceful server stop).
    pub async fn shutdown(&self) {
        stop(self.warm.lock().await.take()).await;
    }
}

async fn stop(warm: Option<Warm>) {
    if let Some(mut warm) = warm {
        let _ = warm.child.terminate(Duration::from_millis(500)).await;
    }
}

async fn exchange(warm: &mut Warm, request: &Value) -> Result<Map<String, Value>, String> {
    let bytes = encode_frame(request).map_err(|err| err.to_string())?;
    warm.writer.write_all(&bytes).await.map_err(|err| err.to_string())?;
    let mut line = Vec::new();
    match read_line(&mut warm.reader, &mut line).await {
        Ok(LineRead::Line) => {}
        Ok(LineRead::TooLarge) => return Err("the resolver answered above the 1 MiB frame limit".to_string()),
        Ok(LineRead::Closed) => return Err("the resolver exited".to_string()),
        Err(err) => return Err(err.to_string()),
    }
    let reply = decode_frame(&line).map_err(|err| format!("the resolver answered a bad frame: {err}"))?;
    if reply.get("id") != request.get("id") {
        return Err("the resolver answered another request".to_string());
    }
    Ok(reply)
}

fn answer_of(reply: Map<String, Value>) -> Result<Map<String, Value>, ResolveFailure> {
    if let Some(error) = reply.get("error") {
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        return Err(ResolveFailure::Workflow {
            code: text("code"),
            message: text("message"),
        });
    }
    match reply.get("answer") {
        Some(Value::Object(answer)) => Ok(answer.clone()),
        _ => Err(ResolveFailure::Unavailable(
            "the resolver answered without an answer".to_string(),
        )),
    }
}

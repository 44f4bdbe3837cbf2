//! Benchmark: protected writes per second next to raw SQLite commits per second, measured
//! in the same run on the same filesystem, both WAL + `synchronous = FULL`.
//!
//! `cargo run --release --example bench_store [-- --writes N]`
//!
//! Figures printed:
//! - raw: `BEGIN IMMEDIATE; INSERT; COMMIT` on a plain table, one caller;
//! - protected, sequential: one caller through the writer thread, each write doing the
//!   spec's eight steps (claim check and renewal, event, viewer delta, revision bump);
//! - protected, 8 callers: concurrent writers on separate runs, sharing commits (group
//!   commit), which is how the server meets load from many runners;
//! - status reads (`run.status`: the run row, its counts, current node and pending request),
//!   each after a protected write of the same run, as a poll during a live run meets them
//!   (every commit empties a reader's page cache), and back to back with no write between;
//! - the deadline task's look (its five reads: open intervals, unobserved steps, expired
//!   steps, overdue runs, the next deadline), which it makes every second while anything
//!   commits: on this fresh store, then with a history of finished runs of ten steps each,
//!   and their ratio (a look that reads only live rows stays near 1); the same for the idle
//!   rule's count of unsettled work (each history run also settled one effect).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_workflows::store::attempts::{self, AttemptOutcome, NewAttempt, SettledAttempt};
use pi_workflows::store::claims::{self, ClaimAuthority};
use pi_workflows::store::deadlines;
use pi_workflows::store::effects::{self, EffectRecovery, EffectRequest, Settlement};
use pi_workflows::store::events::{Actor, RunEvent};
use pi_workflows::store::run_summary;
use pi_workflows::store::runs::{self, ExecutionMode, NewRun};
use pi_workflows::store::verify;
use pi_workflows::store::{Store, SystemClock};
use rusqlite::Connection;

const WRITES_DEFAULT: usize = 5_000;
const CONCURRENT_CALLERS: usize = 8;
/// Deadline looks timed per measurement.
const DEADLINE_LOOKS: usize = 200;
/// Finished runs in the history the deadline looks are timed against, and their steps.
const HISTORY_RUNS: usize = 5_000;
const HISTORY_STEPS_PER_RUN: usize = 10;

fn main() -> anyhow::Result<()> {
    let writes = parse_writes()?;
    let dir = tempfile::tempdir_in(std::env::current_dir()?)?;
    println!("bench_store: {writes} writes per measurement, WAL + synchronous=FULL, dir on the project filesystem");

    let raw = measure_raw(&dir.path().join("raw.sqlite"), writes)?;
    report("raw SQLite commits", writes, raw);

    let store = Store::open(&dir.path().join("state.sqlite"), Arc::new(SystemClock))?;
    let sequential = measure_protected(&store, 1, writes)?;
    report("protected writes, 1 caller", writes, sequential);
    let concurrent = measure_protected(&store, CONCURRENT_CALLERS, writes)?;
    report(
        &format!("protected writes, {CONCURRENT_CALLERS} callers"),
        writes,
        concurrent,
    );

    let (after_write, back_to_back) = measure_status_reads(&store, writes)?;
    report("status reads, after a write", writes, after_write);
    report("status reads, back to back", writes, back_to_back);

    let fresh = measure_deadline_looks(&store, DEADLINE_LOOKS)?;
    report("deadline looks, fresh store", DEADLINE_LOOKS, fresh);
    let idle_fresh = measure_idle_checks(&store, DEADLINE_LOOKS)?;
    report("idle checks, fresh store", DEADLINE_LOOKS, idle_fresh);
    add_history(&store, HISTORY_RUNS)?;
    let with_history = measure_deadline_looks(&store, DEADLINE_LOOKS)?;
    report(
        &format!("deadline looks, {HISTORY_RUNS} runs done"),
        DEADLINE_LOOKS,
        with_history,
    );
    let idle_history = measure_idle_checks(&store, DEADLINE_LOOKS)?;
    report(
        &format!("idle checks, {HISTORY_RUNS} runs done"),
        DEADLINE_LOOKS,
        idle_history,
    );
    println!(
        "ratio deadline look with {} attempts / fresh = {:.2}",
        HISTORY_RUNS * HISTORY_STEPS_PER_RUN,
        with_history.as_secs_f64() / fresh.as_secs_f64()
    );
    println!(
        "ratio idle check with {HISTORY_RUNS} settled effects / fresh = {:.2}",
        idle_history.as_secs_f64() / idle_fresh.as_secs_f64()
    );

    let rate = |elapsed: Duration| writes as f64 / elapsed.as_secs_f64();
    println!("ratio protected(1 caller) / raw = {:.2}", rate(sequential) / rate(raw));
    println!(
        "ratio protected({CONCURRENT_CALLERS} callers) / raw = {:.2}",
        rate(concurrent) / rate(raw)
    );
    Ok(())
}

fn parse_writes() -> anyhow::Result<usize> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(WRITES_DEFAULT),
        [flag, value] if flag == "--writes" => Ok(value.parse()?),
        _ => anyhow::bail!("usage: bench_store [--writes N]"),
    }
}

fn report(label: &str, writes: usize, elapsed: Duration) {
    let per_second = writes as f64 / elapsed.as_secs_f64();
    let micros = elapsed.as_secs_f64() * 1e6 / writes as f64;
    println!("{label:<32} {per_second:>9.0} /s  ({micros:.1} µs each)");
}

fn measure_raw(path: &std::path::Path, writes: usize) -> anyhow::Result<Duration> {
    let conn = Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT;",
    )?;
    let started = Instant::now();
    for index in 0..writes {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO t (body) VALUES (?1)")?
            .execute([format!("row {index}")])?;
        conn.execute_batch("COMMIT")?;
    }
    Ok(started.elapsed())
}

/// Start one live run per caller, then time `writes` protected writes split among them.
fn measure_protected(store: &Store, callers: usize, writes: usize) -> anyhow::Result<Duration> {
    let authorities: Vec<ClaimAuthority> = (0..callers)
        .map(|caller| start_live_run(store, &format!("bench-{callers}-{caller}")))
        .collect::<anyhow::Result<_>>()?;
    let per_caller = writes / callers;
    let started = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = authorities
            .into_iter()
            .map(|authority| scope.spawn(move || protected_writes(store, authority, per_caller)))
            .collect();
        for handle in handles {
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("a bench caller panicked"))??;
        }
        Ok(())
    })?;
    Ok(started.elapsed())
}

/// Time `reads` status reads of one live run: each after a protected write of that run (the
/// write untimed), then back to back.
fn measure_status_reads(store: &Store, reads: usize) -> anyhow::Result<(Duration, Duration)> {
    let run_id = "bench-status";
    let authority = start_live_run(store, run_id)?;
    let mut after_write = Duration::ZERO;
    for _ in 0..reads {
        protected_writes(store, authority.clone(), 1)?;
        let started = Instant::now();
        std::hint::black_box(store.read(|conn| run_summary::run_summary(conn, run_id))?);
        after_write += started.elapsed();
    }
    let started = Instant::now();
    for _ in 0..reads {
        std::hint::black_box(store.read(|conn| run_summary::run_summary(conn, run_id))?);
    }
    Ok((after_write, started.elapsed()))
}

/// Time `looks` deadline looks, each read in its own read transaction as the task makes them.
fn measure_deadline_looks(store: &Store, looks: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for _ in 0..looks {
        let now_ms = store.now_ms();
        std::hint::black_box(store.read(deadlines::observation)?);
        std::hint::black_box(store.read(|conn| deadlines::expired(conn, now_ms, 1))?);
        std::hint::black_box(store.read(|conn| deadlines::overdue_runs(conn, now_ms, deadlines::OVERDUE_BATCH_MAX))?);
        std::hint::black_box(store.read(deadlines::next_due_ms)?);
    }
    Ok(started.elapsed())
}

/// Time `checks` of the idle rule's count of unsettled work (an idle server without clients
/// makes one every few seconds).
fn measure_idle_checks(store: &Store, checks: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for _ in 0..checks {
        std::hint::black_box(store.read(verify::unsettled_work)?);
    }
    Ok(started.elapsed())
}

/// `runs` runs of `HISTORY_STEPS_PER_RUN` settled steps and one applied effect each, left
/// completed.
fn add_history(store: &Store, runs: usize) -> anyhow::Result<()> {
    for run in 0..runs {
        let run_id = format!("history-{run}");
        let authority = start_live_run(store, &run_id)?;
        let settled: Vec<SettledAttempt> = (0..HISTORY_STEPS_PER_RUN)
            .map(|step| SettledAttempt {
                attempt: NewAttempt {
                    attempt_id: format!("{run_id}-{step}"),
                    node_id: format!("s{step}"),
                    node_path: format!("s{step}"),
                    visit: 1,
                    node_type: "compute".to_string(),
                    deadline_at: None,
                    timeout_ms: None,
                    settings_change_number: None,
                },
                outcome: AttemptOutcome::Completed { output: None },
            })
            .collect();
        let effect = EffectRequest {
            effect_type: "shell".to_string(),
            idempotency_key: format!("{run_id}-0"),
            request_fingerprint: "0".repeat(64),
            recovery: EffectRecovery::Idempotent,
            attempt_id: None,
            request_summary: None,
        };
        store.write(move |tx| {
            attempts::record_settled(tx, &authority, None, &settled)?;
            let reserved = effects::reserve(tx, &authority, None, &effect)?.value;
            effects::settle(tx, &authority, None, &reserved.effect_id, Settlement::Applied, None)?;
            runs::complete_run(tx, &authority, None, None)
        })?;
    }
    Ok(())
}

fn protected_writes(store: &Store, authority: ClaimAuthority, count: usize) -> anyhow::Result<()> {
    for _ in 0..count {
        let authority = authority.clone();
        store.write(move |tx| {
            claims::protected_write(tx, &authority, None, |_| {
                Ok(((), RunEvent::new("bench.write", Actor::Host)))
            })
        })?;
    }
    Ok(())
}

fn start_live_run(store: &Store, run_id: &str) -> anyhow::Result<ClaimAuthority> {
    let new_run = NewRun {
        run_id: run_id.to_string(),
        workflow_name: "bench".to_string(),
        project_path: "/bench".to_string(),
        parent_run_id: None,
        root_run_id: None,
        definition_digest: "sha256:bench".to_string(),
        origin: Default::default(),
        workflow_source_json: "{}".to_string(),
        input_hash: "0".repeat(64),
        execution: ExecutionMode::Headless,
    };
    store.write(move |tx| runs::queue_run(tx, &new_run))?;
    let id = run_id.to_string();
    let authority = store.write(move |tx| runs::start_run(tx, &id, "bench-server"))?.value;
    let live = authority.clone();
    store.write(move |tx| runs::mark_running(tx, &live, None))?;
    Ok(authority)
}

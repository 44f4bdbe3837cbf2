//! Claim fencing: acquisition, the five claim-loss reasons (each changing nothing),
//! renewal rules, and token secrecy in storage and logs.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{open_store, snapshot};
use pi_workflows::store::claims::{self, ClaimAuthority, OwnerType, RUN_CLAIM_LEASE_MS, ResourceType};
use pi_workflows::store::runs::{self, ParkReason};
use pi_workflows::store::{ClaimLostReason, Store, StoreError};

const SERVER_A: &str = "server-a";
const SERVER_B: &str = "server-b";

fn queue(store: &Store, run_id: &str) {
    let new_run = common::new_run(run_id);
    store.write(move |tx| runs::queue_run(tx, &new_run)).expect("queue run");
}

fn start(store: &Store, run_id: &str, owner: &str) -> ClaimAuthority {
    let run_id = run_id.to_string();
    let owner = owner.to_string();
    store
        .write(move |tx| runs::start_run(tx, &run_id, &owner))
        .expect("start run")
        .value
}

fn mark_running(store: &Store, authority: &ClaimAuthority) -> Result<i64, StoreError> {
    let authority = authority.clone();
    store.write(move |tx| runs::mark_running(tx, &authority, None))
}

/// Attempt a protected write with `authority` and assert it is refused for `reason` without
/// changing a single row.
fn assert_refused_without_change(store: &Store, authority: &ClaimAuthority, reason: ClaimLostReason) {
    let before = snapshot(store);
    let err = mark_running(store, authority).expect_err("a stale authority must be refused");
    assert_eq!(err.claim_lost_reason(), Some(reason), "unexpected error: {err}");
    assert_eq!(snapshot(store), before, "a refused protected write changed rows");
    let renew_authority = authority.clone();
    let err = store
        .write(move |tx| claims::renew(tx, &renew_authority, RUN_CLAIM_LEASE_MS))
        .expect_err("a stale authority cannot renew");
    assert_eq!(err.claim_lost_reason(), Some(reason));
    assert_eq!(snapshot(store), before, "a refused renewal changed rows");
}

#[test]
fn acquire_increments_generation_and_refuses_a_live_claim() {
    let t = open_store();
    queue(&t.store, "run-1");
    let first = start(&t.store, "run-1", SERVER_A);
    assert_eq!(first.generation, 1);
    let err = t
        .store
        .write(|tx| {
            claims::acquire(
                tx,
                ResourceType::Run,
                "run-1",
                OwnerType::Control,
                "ctl",
                RUN_CLAIM_LEASE_MS,
            )
        })
        .expect_err("a live claim cannot be taken");
    assert!(matches!(err, StoreError::ClaimHeld { .. }), "{err}");
    t.clock.advance_ms(RUN_CLAIM_LEASE_MS);
    let second = t
        .store
        .write(|tx| {
            claims::acquire(
                tx,
                ResourceType::Run,
                "run-1",
                OwnerType::Control,
                "ctl",
                RUN_CLAIM_LEASE_MS,
            )
        })
        .expect("an expired claim can be taken");
    assert_eq!(second.generation, 2);
}

#[test]
fn missing_authority_when_never_claimed_or_released() {
    let t = open_store();
    queue(&t.store, "run-1");
    let authority = start(&t.store, "run-1", SERVER_A);
    mark_running(&t.store, &authority).expect("live claim writes");
    let park_authority = authority.clone();
    t.store
        .write(move |tx| runs::park_run(tx, &park_authority, None, ParkReason::Boundary))
        .expect("park releases the claim");
    assert_refused_without_change(&t.store, &authority, ClaimLostReason::MissingAuthority);
}

#[test]
fn expired_claim_cannot_write_or_renew_even_with_matching_owner_and_token() {
    let t = open_store();
    queue(&t.store, "run-1");
    let authority = start(&t.store, "run-1", SERVER_A);
    t.clock.advance_ms(RUN_CLAIM_LEASE_MS);
    assert_refused_without_change(&t.store, &authority, ClaimLostReason::Expired);
}

#[test]
fn owner_changed_after_another_owner_took_the_expired_claim() {
    let t = open_store();
    queue(&t.store, "run-1");
    let old = start(&t.store, "run-1", SERVER_A);
    t.clock.advance_ms(RUN_CLAIM_LEASE_MS + 1);
    t.store
        .write(|tx| {
            claims::acquire(
                tx,
                ResourceType::Run,
                "run-1",
                OwnerType::Host,
                SERVER_B,
                RUN_CLAIM_LEASE_MS,
            )
        })
        .expect("take over the expired claim");
    assert_refused_without_change(&t.store, &old, ClaimLostReason::OwnerChanged);
}

#[test]
fn generation_changed_after_the_same_owner_claimed_again() {
    let t = open_store();
    queue(&t.store, "run-1");
    let old = start(&t.store, "run-1", SERVER_A);
    t.clock.advance_ms(RUN_CLAIM_LEASE_MS + 1);
    let new = t
        .store
        .write(|tx| {
            claims::acquire(
                tx,
                ResourceType::Run,
                "run-1",
                OwnerType::Host,
                SERVER_A,
                RUN_CLAIM_LEASE_MS,
            )
        })
        .expect("same owner re-claims");
    assert_eq!(new.generation, old.generation + 1);
    assert_refused_without_change(&t.store, &old, ClaimLostReason::GenerationChanged);
    mark_running(&t.store, &new).expect("the new generation writes");
}

#[test]
fn token_changed_when_a_token_does_not_match() {
    let t = open_store();
    queue(&t.store, "run-1");
    let authority = start(&t.store, "run-1", SERVER_A);
    let forged = authority.with_forged_token_for_test().expect("forge");
    assert_refused_without_change(&t.store, &forged, ClaimLostReason::TokenChanged);
    mark_running(&t.store, &authority).expect("the real token still writes");
}

#[test]
fn renewal_extends_a_live_claim_without_a_revision() {
    let t = open_store();
    queue(&t.store, "run-1");
    let authority = start(&t.store, "run-1", SERVER_A);
    let revision_before = t
        .store
        .read(|conn| runs::read_run_on(conn, "run-1"))
        .expect("read")
        .revision;
    for _ in 0..3 {
        t.clock.advance_ms(RUN_CLAIM_LEASE_MS - 1);
        let renew = authority.clone();
        t.store
            .write(move |tx| claims::renew(tx, &renew, RUN_CLAIM_LEASE_MS))
            .expect("renew a live claim");
    }
    let run = t.store.read(|conn| runs::read_run_on(conn, "run-1")).expect("read");
    assert_eq!(run.revision, revision_before, "renewal is not a domain change");
    mark_running(&t.store, &authority).expect("still live after renewals");
}

/// Heartbeat and expiry of a run's claim row.
fn lease_times(store: &Store, run_id: &str) -> (i64, i64) {
    let run_id = run_id.to_string();
    store
        .read(move |conn| {
            Ok(conn.query_row(
                "SELECT heartbeat_at, expires_at FROM leases WHERE resource_type = 'run' AND resource_id = ?1",
                [&run_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?)
        })
        .expect("read the lease")
}

/// A protected write that changes no status: a progress note of update `n`.
fn note(tx: &pi_workflows::store::WriteTx<'_>, authority: &ClaimAuthority, n: u64) -> Result<i64, StoreError> {
    let update = pi_workflows::store::blobs::put_json(tx, &serde_json::json!({ "n": n }), 1024)?;
    runs::note_run(tx, authority, None, "node.updated", &update)
}

#[test]
fn every_protected_write_leaves_the_claim_renewed_at_its_own_time() {
    let t = open_store();
    queue(&t.store, "run-1");
    let authority = start(&t.store, "run-1", SERVER_A);
    let started = t.store.now_ms();
    assert_eq!(lease_times(&t.store, "run-1"), (started, started + RUN_CLAIM_LEASE_MS));
    // Two protected writes in one transaction at one clock reading (as in a group commit).
    t.clock.advance_ms(5);
    let both = authority.clone();
    let revision = t
        .store
        .write(move |tx| {
            runs::mark_running(tx, &both, None)?;
            note(tx, &both, 1)
        })
        .expect("two protected writes");
    let now = t.store.now_ms();
    assert_eq!(lease_times(&t.store, "run-1"), (now, now + RUN_CLAIM_LEASE_MS));
    // A later write renews again, from its own time.
    t.clock.advance_ms(1);
    let later = authority.clone();
    let next = t
        .store
        .write(move |tx| note(tx, &later, 2))
        .expect("a later protected write");
    assert_eq!(next, revision + 1);
    let now = t.store.now_ms();
    assert_eq!(lease_times(&t.store, "run-1"), (now, now + RUN_CLAIM_LEASE_MS));
}

#[test]
fn tokens_are_stored_only_as_hashes() {
    let t = open_store();
    queue(&t.store, "run-1");
    let authority = start(&t.store, "run-1", SERVER_A);
    let rows = snapshot(&t.store).join("\n");
    assert!(!rows.contains(authority.token().expose_for_test()), "raw token stored");
    assert!(
        rows.contains(&authority.token().hash_for_test()),
        "token hash missing from leases"
    );
    assert!(
        !format!("{authority:?}").contains(authority.token().expose_for_test()),
        "Debug leaks the token"
    );
}

/// A `tracing` writer that appends to a shared buffer.
#[derive(Clone, Default)]
struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn logs_contain_neither_token_nor_token_hash() {
    let logs = CapturedLogs::default();
    let make_writer = {
        let logs = logs.clone();
        move || logs.clone()
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(make_writer)
        .with_ansi(false)
        .finish();
    // The store logs from its writer thread, so the subscriber must be global.
    tracing::subscriber::set_global_default(subscriber).expect("only this test installs a subscriber");

    let t = open_store();
    queue(&t.store, "run-logged");
    let authority = start(&t.store, "run-logged", SERVER_A);
    let forged = authority.with_forged_token_for_test().expect("forge");
    mark_running(&t.store, &forged).expect_err("forged token refused");
    t.clock.advance_ms(RUN_CLAIM_LEASE_MS);
    mark_running(&t.store, &authority).expect_err("expired claim refused");

    let text = String::from_utf8(logs.0.lock().expect("log buffer").clone()).expect("utf-8 logs");
    assert!(
        text.contains("run-logged"),
        "claim events were not logged at all:\n{text}"
    );
    assert!(
        text.contains("tokenChanged") && text.contains("expired"),
        "reasons missing:\n{text}"
    );
    for secret in [
        authority.token().expose_for_test().to_string(),
        authority.token().hash_for_test(),
        forged.token().expose_for_test().to_string(),
        forged.token().hash_for_test(),
    ] {
        assert!(!text.contains(&secret), "a token or token hash reached the logs");
    }
}

#[test]
fn a_wall_clock_step_back_keeps_a_live_claim_writable() {
    let t = open_store();
    queue(&t.store, "run-1");
    let authority = start(&t.store, "run-1", SERVER_A);
    // ManualClock never goes back, so model the NTP step with a run started "in the future".
    t.store
        .write(|tx| {
            tx.conn().execute(
                "UPDATE leases SET acquired_at = acquired_at + 1000, heartbeat_at = heartbeat_at + 1000",
                [],
            )?;
            Ok(())
        })
        .expect("shift the claim times forward");
    mark_running(&t.store, &authority).expect("a live claim still writes after the clock stepped back");
}

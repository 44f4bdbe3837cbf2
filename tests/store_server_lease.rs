//! The server lease: epoch + 1 on every takeover, re-armed after a suspend when nobody took
//! it over, lost when another server did.

mod common;

use pi_workflows::store::server_lease::{self, Renewal, SERVER_LEASE_MS};
use pi_workflows::store::{ClaimLostReason, StoreError};

#[test]
fn each_takeover_increases_the_epoch_even_over_a_live_lease() {
    let t = common::open_store();
    let first = t
        .store
        .write(|tx| server_lease::take_server_lease(tx, "server-a"))
        .expect("first");
    assert_eq!(first.epoch, 1);
    // The caller holds the global lock, which proves the old server is gone: no waiting.
    let second = t
        .store
        .write(|tx| server_lease::take_server_lease(tx, "server-b"))
        .expect("takeover");
    assert_eq!(second.epoch, 2);
    let err = t
        .store
        .write(move |tx| server_lease::renew_server_lease(tx, &first))
        .expect_err("old epoch fenced");
    assert!(matches!(err, StoreError::ClaimLost(_)), "{err}");
    assert_eq!(t.store.read(server_lease::current_epoch).expect("epoch"), Some(2));
}

#[test]
fn after_a_long_suspend_the_server_rearms_its_own_lease() {
    let t = common::open_store();
    let lease = t
        .store
        .write(|tx| server_lease::take_server_lease(tx, "server-a"))
        .expect("take");
    t.clock.advance_ms(SERVER_LEASE_MS * 10);
    let held = lease.clone();
    let renewal = t
        .store
        .write(move |tx| server_lease::renew_server_lease(tx, &held))
        .expect("re-armed");
    assert_eq!(renewal, Renewal::Rearmed);
    let held = lease.clone();
    assert_eq!(
        t.store
            .write(move |tx| server_lease::renew_server_lease(tx, &held))
            .expect("renew"),
        Renewal::Renewed
    );
    assert_eq!(
        t.store.read(server_lease::current_epoch).expect("epoch"),
        Some(lease.epoch),
        "same epoch"
    );
}

#[test]
fn an_expired_lease_taken_by_another_server_is_lost_not_rearmed() {
    let t = common::open_store();
    let old = t
        .store
        .write(|tx| server_lease::take_server_lease(tx, "server-a"))
        .expect("take");
    t.clock.advance_ms(SERVER_LEASE_MS * 2);
    t.store
        .write(|tx| server_lease::take_server_lease(tx, "server-b"))
        .expect("another server");
    let err = t
        .store
        .write(move |tx| server_lease::renew_server_lease(tx, &old))
        .expect_err("lost");
    assert_eq!(err.claim_lost_reason(), Some(ClaimLostReason::OwnerChanged));
}

#[test]
fn a_released_lease_keeps_its_epoch() {
    let t = common::open_store();
    let lease = t
        .store
        .write(|tx| server_lease::take_server_lease(tx, "server-a"))
        .expect("take");
    t.store
        .write(move |tx| server_lease::release_server_lease(tx, &lease))
        .expect("release");
    let next = t
        .store
        .write(|tx| server_lease::take_server_lease(tx, "server-a"))
        .expect("next");
    assert_eq!(next.epoch, 2);
}

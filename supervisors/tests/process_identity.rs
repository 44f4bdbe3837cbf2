//! Start identity: string form, lookup, and identity-checked group signaling.

use std::path::Path;
use std::time::Duration;

use supervisors::process::{
    ExitOutcome, ProcessSignal, ProcessSpec, SignalOutcome, StartIdentity, current_boot_id, group_members, identity_of,
    signal_group_if_identity_matches, spawn,
};

fn assert_serde<T: serde::Serialize + serde::de::DeserializeOwned>() {}

#[tokio::test]
async fn identity_round_trips_and_tampered_identity_sends_nothing() {
    assert_serde::<StartIdentity>();
    let mut child = spawn(ProcessSpec::new("sleep").arg("60")).expect("spawn");
    let identity = child.identity().clone();
    assert_eq!(identity.pid, child.pid());
    assert_eq!(identity.boot_id, current_boot_id().expect("boot id"));
    assert_eq!(identity_of(child.pid()).as_ref(), Some(&identity));

    let text = identity.to_string();
    assert_eq!(
        text,
        format!("{}:{}:{}", identity.boot_id, identity.pid, identity.start_time_ticks)
    );
    assert_eq!(text.parse::<StartIdentity>().expect("parse"), identity);

    let tampered_time = StartIdentity {
        start_time_ticks: identity.start_time_ticks + 1,
        ..identity.clone()
    };
    let tampered_boot = StartIdentity {
        boot_id: "00000000-0000-0000-0000-000000000000".to_owned(),
        ..identity.clone()
    };
    for tampered in [&tampered_time, &tampered_boot] {
        let outcome = signal_group_if_identity_matches(tampered, ProcessSignal::Kill).expect("check");
        assert_eq!(outcome, SignalOutcome::IdentityMismatch);
    }
    // Nothing was sent: the sleep is still alive and still the only group member.
    assert_eq!(child.try_exit().expect("peek"), None);
    assert_eq!(group_members(child.pgid()), vec![child.pid()]);

    // The genuine identity is honored (SIGTERM ends `sleep`).
    let outcome = signal_group_if_identity_matches(&identity, ProcessSignal::Term).expect("signal");
    assert_eq!(outcome, SignalOutcome::Signaled);
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait_exit())
        .await
        .expect("bound");
    assert_eq!(exit.expect("wait"), ExitOutcome::Signaled(15));
    child.terminate(Duration::from_secs(5)).await.expect("cleanup");
}

#[test]
fn absent_process_is_not_running() {
    let pid_max: i32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32_768);
    let pid = pid_max - 1;
    if Path::new(&format!("/proc/{pid}")).exists() {
        return; // astronomically unlikely; nothing meaningful to check
    }
    assert_eq!(identity_of(pid), None);
    let identity = StartIdentity {
        boot_id: current_boot_id().expect("boot id"),
        pid,
        start_time_ticks: 1,
    };
    let outcome = signal_group_if_identity_matches(&identity, ProcessSignal::Kill).expect("check");
    assert_eq!(outcome, SignalOutcome::NotRunning);
}

#[test]
fn dangerous_pids_are_never_signaled() {
    for pid in [-1, 0, 1] {
        let identity = StartIdentity {
            boot_id: current_boot_id().expect("boot id"),
            pid,
            start_time_ticks: identity_of(1).map_or(0, |i| i.start_time_ticks),
        };
        let outcome = signal_group_if_identity_matches(&identity, ProcessSignal::Cont).expect("check");
        assert_eq!(outcome, SignalOutcome::IdentityMismatch, "pid {pid}");
    }
    assert!("abc-1:1:5".parse::<StartIdentity>().is_err());
    assert!("abc-1:0:5".parse::<StartIdentity>().is_err());
}

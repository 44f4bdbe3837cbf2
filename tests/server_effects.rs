//! Managed effects on the real server: an applied effect is never applied again after a
//! runner crash and resume; an effect interrupted while applying becomes ambiguous, is
//! never retried automatically, and blocks resume until an operator reviews it. The "external system" is a file that must get one line.

mod common;

use common::{pi_workflows as cli, query_db as query, wait_for_db as wait_for};

use std::path::Path;
use std::time::Duration;

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().count()
}

struct Stop<'a>(&'a Path);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        let _ = cli(self.0, &["server", "stop"], "");
    }
}

#[test]
fn an_applied_effect_is_adopted_not_repeated_after_a_runner_crash() {
    let root = tempfile::Builder::new().prefix("piwe").tempdir_in("/tmp").expect("dir");
    let (dir, external) = (root.path(), root.path().join("external.log"));
    common::queue_runs_in(dir, ["run-e".to_string()]);
    // ready, node.started, effect.reserve, effect.settle → crash before node.finished, so
    // the resumed runner runs step 1 again and must adopt the applied effect.
    let script = format!(
        "steps=3,effect-file={},crash-after=4,crash-first-only",
        external.display()
    );
    assert!(cli(dir, &["server", "start"], &script).status.success());
    let _stop = Stop(dir);
    wait_for(
        dir,
        "the runner crashed",
        "SELECT count(*) FROM run_workers WHERE status = 'crashed'",
    );
    assert_eq!(query::<String>(dir, "SELECT status FROM effects"), "applied");
    assert_eq!(query::<String>(dir, "SELECT status_detail FROM runs"), "workerCrashed");
    assert_eq!(lines(&external), 1);

    let resume = cli(dir, &["run", "resume", "run-e"], "");
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    wait_for(
        dir,
        "the resumed run completes",
        "SELECT count(*) FROM runs WHERE status = 'completed'",
    );
    assert_eq!(lines(&external), 1, "the effect was applied twice");
    assert_eq!(query::<i64>(dir, "SELECT count(*) FROM effects"), 1);
    assert_eq!(
        query::<i64>(dir, "SELECT count(*) FROM events WHERE event_type = 'effect.adopted'"),
        1
    );
}

#[test]
fn an_effect_interrupted_while_applying_is_ambiguous_and_never_retried() {
    let root = tempfile::Builder::new().prefix("piwe").tempdir_in("/tmp").expect("dir");
    let (dir, external) = (root.path(), root.path().join("external.log"));
    common::queue_runs_in(dir, ["run-a".to_string()]);
    let script = format!("steps=2,effect-file={},crash-in-effect", external.display());
    assert!(cli(dir, &["server", "start"], &script).status.success());
    let _stop = Stop(dir);
    wait_for(
        dir,
        "the run parks",
        "SELECT count(*) FROM run_queue WHERE status = 'parked'",
    );
    assert_eq!(query::<String>(dir, "SELECT status FROM effects"), "ambiguous");
    assert_eq!(query::<String>(dir, "SELECT outcome FROM effect_attempts"), "ambiguous");
    assert_eq!(
        query::<String>(dir, "SELECT status_detail FROM runs"),
        "effectAmbiguous"
    );
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        query::<i64>(dir, "SELECT count(*) FROM run_workers"),
        1,
        "an ambiguous effect must not be retried"
    );
    assert_eq!(lines(&external), 1);

    // Resume is refused until the effect is reviewed; the review records it applied, and
    // the resumed run adopts it: the effect is never executed again.
    let resume = cli(dir, &["run", "resume", "run-a"], "");
    assert!(!resume.status.success(), "resume past an ambiguous effect");
    assert!(String::from_utf8_lossy(&resume.stderr).contains("run review"));
    let review = cli(dir, &["run", "review", "run-a", "--applied"], "");
    assert!(review.status.success(), "{}", String::from_utf8_lossy(&review.stderr));
    let resume = cli(dir, &["run", "resume", "run-a"], "");
    assert!(resume.status.success(), "{}", String::from_utf8_lossy(&resume.stderr));
    wait_for(
        dir,
        "the resumed run completes",
        "SELECT count(*) FROM runs WHERE status = 'completed'",
    );
    assert_eq!(lines(&external), 1);
    assert_eq!(query::<String>(dir, "SELECT status FROM effects"), "applied");
    assert_eq!(query::<String>(dir, "SELECT review FROM effect_attempts"), "applied");
}

/// Two reviews of one effect at the same time: exactly one wins, the other is refused, and
/// the run records one review event.
#[test]
fn concurrent_reviews_of_one_effect_have_one_winner() {
    let root = tempfile::Builder::new().prefix("piwe").tempdir_in("/tmp").expect("dir");
    let (dir, external) = (root.path(), root.path().join("external.log"));
    common::queue_runs_in(dir, ["run-c".to_string()]);
    let script = format!("steps=2,effect-file={},crash-in-effect", external.display());
    assert!(cli(dir, &["server", "start"], &script).status.success());
    let _stop = Stop(dir);
    wait_for(
        dir,
        "the effect is ambiguous",
        "SELECT count(*) FROM effects WHERE status = 'ambiguous'",
    );
    wait_for(
        dir,
        "the run parks",
        "SELECT count(*) FROM run_queue WHERE status = 'parked'",
    );
    let reviews: Vec<_> = ["--applied", "--failed", "--applied", "--failed"]
        .into_iter()
        .map(|resolution| {
            let dir = dir.to_path_buf();
            std::thread::spawn(move || cli(&dir, &["run", "review", "run-c", resolution], ""))
        })
        .collect();
    let outcomes: Vec<_> = reviews
        .into_iter()
        .map(|review| review.join().expect("review"))
        .collect();
    let winners = outcomes.iter().filter(|out| out.status.success()).count();
    assert_eq!(winners, 1, "exactly one review wins");
    for refused in outcomes.iter().filter(|out| !out.status.success()) {
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("not ambiguous")
                || stderr.contains("no ambiguous effect")
                || stderr.contains("not the expected"),
            "{stderr}"
        );
    }
    assert_eq!(
        query::<i64>(dir, "SELECT count(*) FROM events WHERE event_type = 'effect.reviewed'"),
        1
    );
}

//! A supervision tree under test: the root supervisor, its observed reports, its task.
#![allow(dead_code)]

use std::time::Duration;

use ractor::{Actor, ActorRef};
use supervisors::{Report, Supervisor, SupervisorMsg, SupervisorSpec};
use tokio::sync::mpsc;

pub struct Tree {
    pub root: ActorRef<SupervisorMsg>,
    pub reports: mpsc::Receiver<Report>,
    pub handle: tokio::task::JoinHandle<()>,
    /// How long `reports_until` waits for each report.
    pub wait: Duration,
}

pub async fn start(spec: SupervisorSpec, wait: Duration) -> Tree {
    let (sender, reports) = mpsc::channel(1024);
    let (root, handle) = Actor::spawn(None, Supervisor, spec.with_observer(sender))
        .await
        .expect("supervisor starts");
    Tree {
        root,
        reports,
        handle,
        wait,
    }
}

impl Tree {
    /// Reports until (and including) the first one that `until` accepts.
    pub async fn reports_until(&mut self, until: impl Fn(&Report) -> bool) -> Vec<Report> {
        let mut seen = Vec::new();
        loop {
            let report = tokio::time::timeout(self.wait, self.reports.recv())
                .await
                .unwrap_or_else(|_| panic!("no matching report; saw {seen:?}"))
                .expect("observer open");
            let done = until(&report);
            seen.push(report);
            if done {
                return seen;
            }
        }
    }
}

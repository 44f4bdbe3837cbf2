//! `decision.answer`: a person's answer to a run's protected decision. The server checks it
//! against the declared choices, the deadline and (when named) the request digest the person
//! saw, and settles the decision in one transaction with the command's receipt
//! (`store::decisions`). No runner judges it and no coordinator is needed: a person answers
//! from Pi, the CLI or a channel.

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::decision::parse_answer;
use crate::protocol::Request;
use crate::server::answers::{Answer, answer_of, command_request, expected_revision_of, rejected, run_id_of};
use crate::server::blocking;
use crate::store::commands::{self, Accepted};
use crate::store::decisions::{self, HumanAnswer};

/// `decision.answer` (`payload.answer`: a choice ID or `{choice, text?}`; optional
/// `payload.requestId` and `payload.requestDigest`).
pub async fn decision_answer(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let answer = request.payload.get("answer").cloned().unwrap_or(Value::Null);
    let response = parse_answer(&answer).map_err(|err| rejected(err.code(), &err.to_string()))?;
    let text_of = |member: &str| request.payload.get(member).and_then(Value::as_str).map(str::to_string);
    let (decision_id, digest) = (text_of("requestId"), text_of("requestDigest"));
    let expected = expected_revision_of(request);
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let resolved = decisions::answer(
                tx,
                &HumanAnswer {
                    run_id: &run_id,
                    decision_id: decision_id.as_deref(),
                    request_digest: digest.as_deref(),
                    response: &response,
                    expected,
                },
            )?;
            Ok(Accepted {
                revision: Some(resolved.revision),
                receipt: json!({
                    "runId": run_id,
                    "requestId": resolved.decision_id,
                    "outcome": "accepted",
                    "choice": resolved.choice,
                    "provenance": resolved.provenance.as_str(),
                    "revision": resolved.revision,
                }),
            })
        })
    })
    .await;
    ctx.shared.wake_scheduler();
    answer_of(stored)
}

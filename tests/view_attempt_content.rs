//! Attempt outputs and errors, and the run's definition, in the live run view, on the real
//! binary with the real Node runner: attempt items reference them (`outputRef` / `errorRef`,
//! in the view's history and in `view.page`), the workflow references its definition,
//! `view.content` serves them in bounded chunks from the run's own stored facts (never a
//! copy), and only for the run the read names: a digest of another run, an error read as an
//! output, or any other stored blob is `contentUnavailable`.

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::e2e::*;
use pi_workflows::client::Client;
use pi_workflows::protocol::{JsonObject, Operation, Outcome, Response};
use serde_json::{Value, json};

const OUTPUT_MEDIA: &str = "application/vnd.pi-workflows.attempt-output+json";
const ERROR_MEDIA: &str = "application/vnd.pi-workflows.attempt-error+json";
const DEFINITION_MEDIA: &str = "application/vnd.pi-workflows.definition+json";
/// Small chunks, so a value is assembled from several reads.
const CHUNK_BYTES: u64 = 7;

fn start(env: &Env, workflow: &str, input: Option<&str>) -> String {
    let mut args = vec!["run", "start", workflow];
    if let Some(input) = input {
        args.extend(["--input-json", input]);
    }
    args.push("--json");
    let out = env.cli(&args);
    env.expect_code(&out, 0, "run start");
    run_id_of(&out)
}

fn request(client: &mut Client, operation: Operation, run_id: &str, payload: Value) -> Response {
    let payload: JsonObject = serde_json::from_value(payload).expect("object");
    client.request_for(operation, Some(run_id), payload).expect("request")
}

fn receipt(response: Response) -> JsonObject {
    assert_eq!(response.outcome, Outcome::Accepted, "{:?}", response.error);
    response.receipt.expect("receipt")
}

fn wait_for_status(env: &Env, client: &mut Client, run_id: &str, status: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let view = receipt(request(client, Operation::ViewRunGet, run_id, json!({})))["view"].clone();
        if view["display"]["status"] == status {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} never became {status}: {view}\n{}",
            env.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The history item of `node_id` (the view's window holds every attempt of these runs).
fn item<'a>(view: &'a Value, node_id: &str) -> &'a Value {
    view["history"]["items"]
        .as_object()
        .expect("items")
        .values()
        .find(|item| item["nodeId"] == node_id)
        .unwrap_or_else(|| panic!("no attempt of {node_id}: {view}"))
}

fn content(client: &mut Client, run_id: &str, digest: &Value, media: &str, offset: u64) -> Response {
    let payload = json!({"digest": digest, "mediaType": media, "offset": offset, "length": CHUNK_BYTES});
    request(client, Operation::ViewContent, run_id, payload)
}

/// Read a reference in small chunks and check the assembled bytes against its digest.
fn read_reference(client: &mut Client, run_id: &str, reference: &Value) -> Value {
    let total = reference["byteLength"].as_u64().expect("byteLength");
    let media = reference["mediaType"].as_str().expect("mediaType");
    let mut bytes = Vec::new();
    while (bytes.len() as u64) < total {
        let part = receipt(content(client, run_id, &reference["digest"], media, bytes.len() as u64));
        assert_eq!(part["digest"], reference["digest"]);
        assert_eq!(part["mediaType"], media);
        assert_eq!(part["byteLength"].as_u64(), Some(total));
        let data = base64::engine::general_purpose::STANDARD
            .decode(part["data"].as_str().expect("data"))
            .expect("base64");
        assert!(!data.is_empty() && data.len() as u64 <= CHUNK_BYTES, "a bounded chunk");
        bytes.extend(data);
    }
    let digest = format!("sha256:{}", pi_workflows::digest::sha256_hex(&bytes));
    assert_eq!(json!(digest), reference["digest"], "the bytes match the reference");
    serde_json::from_slice(&bytes).expect("a JSON value")
}

fn assert_unavailable(response: Response, what: &str) {
    assert_eq!(response.outcome, Outcome::NotFound, "{what}: {:?}", response.receipt);
    assert_eq!(response.error.expect("error").code, "contentUnavailable", "{what}");
}

#[test]
fn an_attempts_output_and_error_are_referenced_and_served_for_its_own_run_only() {
    let env = Env::new();
    let fails = repo_root().join("piw/tests/fixtures/fails.workflow.ts");
    let run = start(&env, fails.to_str().expect("path"), None);
    let mut client = Client::connect(&env.dir().join("server").join("server.sock")).expect("connect");
    let view = wait_for_status(&env, &mut client, &run, "failed");

    let prepare = item(&view, "prepare");
    assert_eq!(prepare["status"], "completed");
    assert!(
        prepare.get("errorRef").is_none(),
        "a completed attempt has no error: {prepare}"
    );
    let output_ref = prepare["outputRef"].clone();
    assert_eq!(output_ref["mediaType"], OUTPUT_MEDIA, "{prepare}");
    assert_eq!(read_reference(&mut client, &run, &output_ref), json!({"ready": true}));
    // A small value is served from its attempt's row: it was never stored as a blob.
    let output_hex = output_ref["digest"]
        .as_str()
        .expect("digest")
        .trim_start_matches("sha256:");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM node_attempts WHERE output_hash = '{output_hex}' AND output_inline IS NOT NULL"
        )),
        1,
        "the output is kept in its attempt's row"
    );
    assert_eq!(
        env.count(&format!("SELECT count(*) FROM blobs WHERE blob_hash = '{output_hex}'")),
        0
    );

    let explode = item(&view, "explode");
    assert_eq!(explode["status"], "failed");
    assert!(
        explode.get("outputRef").is_none(),
        "a failed attempt has no output: {explode}"
    );
    let error_ref = explode["errorRef"].clone();
    assert_eq!(error_ref["mediaType"], ERROR_MEDIA, "{explode}");
    let error = read_reference(&mut client, &run, &error_ref);
    assert!(
        error.to_string().contains("the fixture fails on purpose"),
        "the attempt's stored error: {error}"
    );

    // `view.page` items carry the same references.
    let page = receipt(request(
        &mut client,
        Operation::ViewPage,
        &run,
        json!({"kind": "attempts"}),
    ));
    let paged = page["items"].as_array().expect("items");
    assert!(paged.iter().any(|item| item["outputRef"] == output_ref), "{page:?}");
    assert!(paged.iter().any(|item| item["errorRef"] == error_ref), "{page:?}");

    // Another run cannot read this run's attempt values by their digest.
    let other = start(
        &env,
        fixture("echo-task").to_str().expect("path"),
        Some(r#"{"task": "x"}"#),
    );
    wait_for_status(&env, &mut client, &other, "completed");
    assert_unavailable(
        content(&mut client, &other, &output_ref["digest"], OUTPUT_MEDIA, 0),
        "another run's output",
    );
    assert_unavailable(
        content(&mut client, &other, &error_ref["digest"], ERROR_MEDIA, 0),
        "another run's error",
    );
    // The media type says which value: an error is not served as an output.
    assert_unavailable(
        content(&mut client, &run, &error_ref["digest"], OUTPUT_MEDIA, 0),
        "an error read as an output",
    );
    // A stored blob that is no attempt value (the run's definition) is not served as one.
    assert_unavailable(
        content(
            &mut client,
            &run,
            &view["workflow"]["definitionDigest"],
            OUTPUT_MEDIA,
            0,
        ),
        "the definition read as an attempt output",
    );
    // The run's definition is served from the run's stored definition, for this run only.
    let definition_ref = view["workflow"]["definition"].clone();
    assert_eq!(definition_ref["mediaType"], DEFINITION_MEDIA, "{view}");
    assert_eq!(definition_ref["digest"], view["workflow"]["definitionDigest"]);
    let definition = read_reference(&mut client, &run, &definition_ref);
    assert_eq!(
        definition["name"], view["workflow"]["name"],
        "the run's definition: {definition}"
    );
    assert_unavailable(
        content(&mut client, &other, &definition_ref["digest"], DEFINITION_MEDIA, 0),
        "another run's definition",
    );
    assert_unavailable(
        content(&mut client, &run, &output_ref["digest"], DEFINITION_MEDIA, 0),
        "an output read as a definition",
    );
    assert_eq!(
        env.count("SELECT count(*) FROM run_view_content"),
        0,
        "views of runs that needed no generated content stored none (the definition is not copied)"
    );
    // Reads stay bounded like every content read.
    let total = output_ref["byteLength"].as_u64().expect("length");
    let past = content(&mut client, &run, &output_ref["digest"], OUTPUT_MEDIA, total + 1);
    assert_eq!(past.error.expect("error").code, "badRange");
    let payload =
        json!({"digest": output_ref["digest"], "mediaType": OUTPUT_MEDIA, "offset": 0, "length": 512 * 1024 + 1});
    let too_long = request(&mut client, Operation::ViewContent, &run, payload);
    assert_eq!(too_long.error.expect("error").code, "badRange");
}

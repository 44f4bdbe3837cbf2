//! Bad input gets a clear, bounded refusal and changes nothing: identifiers outside the safe
//! set, numeric limits out of range, and input nested too deep (which used to be blamed on
//! the installation and cost a resolver restart).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::e2e::{Env, example, json_of, stderr_of};

fn raw_request(env: &Env, line: &str) -> serde_json::Value {
    let stream = UnixStream::connect(env.dir().join("server/server.sock")).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut hello = String::new();
    reader.read_line(&mut hello).expect("hello");
    (&stream).write_all(line.as_bytes()).expect("send");
    let mut answer = String::new();
    reader.read_line(&mut answer).expect("answer");
    serde_json::from_str(&answer).expect("a JSON answer")
}

fn list_request(limit: &str) -> String {
    format!(
        "{{\"clientId\":\"test-client\",\"operation\":\"run.list\",\"payload\":{{\"limit\":{limit}}},\"requestId\":\"r1\",\"schema\":\"pi-workflows.client.v1\",\"type\":\"request\"}}\n"
    )
}

fn tree(env: &Env) -> serde_json::Value {
    let out = env.cli(&["server", "status", "--tree", "--json"]);
    json_of(&out)["tree"].clone()
}

fn resolver(tree: &serde_json::Value) -> serde_json::Value {
    let resolvers = tree["children"]
        .as_array()
        .and_then(|children| children.iter().find(|child| child["id"] == "resolvers"))
        .expect("resolvers");
    resolvers["children"][0].clone()
}

#[test]
fn ids_outside_the_safe_set_are_refused_with_what_is_allowed() {
    let env = Env::new();
    for bad in ["../../etc", "run\nforged", "run 1", "\u{1b}[31mred"] {
        let out = env.cli(&["run", "status", bad]);
        assert!(!out.status.success(), "{bad:?} was accepted");
        let stderr = stderr_of(&out);
        assert!(
            stderr.contains("may hold only ASCII letters, digits"),
            "{bad:?}: {stderr}"
        );
        assert!(
            !stderr.contains('\u{1b}'),
            "the refusal must not echo control characters: {stderr:?}"
        );
    }
}

#[test]
fn run_list_limits_out_of_range_are_refused() {
    let env = Env::new();
    env.cli(&["server", "start"]);
    for limit in ["-1", "0", "1000000000000", "201"] {
        let answer = raw_request(&env, &list_request(limit));
        assert_eq!(answer["outcome"], "rejected", "limit {limit}: {answer}");
        assert_eq!(answer["error"]["code"], "invalidRequest", "limit {limit}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("1 to 200"),
            "{answer}"
        );
    }
    let answer = raw_request(&env, &list_request("200"));
    assert_eq!(answer["outcome"], "accepted", "{answer}");
}

#[test]
fn input_nested_too_deep_is_refused_up_front_and_the_resolver_is_untouched() {
    let env = Env::new();
    env.cli(&["server", "start"]);
    let before = resolver(&tree(&env));
    let deep = format!("{{\"x\":{}1{}}}", "[".repeat(1_000), "]".repeat(1_000));
    let out = env.cli(&["run", "start", &example("repo-facts"), "--input-json", &deep]);
    assert!(!out.status.success(), "a 1,000-level input was accepted");
    let stderr = stderr_of(&out);
    assert!(stderr.contains("nests deeper than 64 levels"), "{stderr}");
    assert!(
        !stderr.contains("resolverUnavailable"),
        "blamed on the installation: {stderr}"
    );
    // The server refuses it too, for a client that does not check.
    let payload = serde_json::json!({
        "workflow": example("repo-facts"),
        "projectPath": common::e2e::repo_root().display().to_string(),
        "inputJson": deep,
    });
    let request = serde_json::json!({
        "clientId": "test-client", "idempotencyKey": "deep-1", "operation": "run.start",
        "payload": payload, "requestId": "r1", "runId": "run-deep-1",
        "schema": "pi-workflows.client.v1", "type": "request",
    });
    let line = format!(
        "{}\n",
        String::from_utf8(pi_workflows::protocol::to_canonical_vec(&request).expect("canonical")).expect("utf-8")
    );
    let answer = raw_request(&env, &line);
    assert_eq!(answer["error"]["code"], "invalidInput", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("64 levels"),
        "{answer}"
    );
    let after = resolver(&tree(&env));
    assert_eq!(after["restarts"], before["restarts"], "the resolver restarted: {after}");
    assert_eq!(
        after["details"], before["details"],
        "the resolver process changed: {after}"
    );
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0, "nothing was created");
}

//! `piw serve` and `piw --connect`: the same frame through the relay as over the local
//! socket, loopback-only binds, and a misbehaving peer losing only its own connection.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use common::{Env, fixture};
use futures_util::{SinkExt, StreamExt};
use pi_workflows::protocol::{JsonObject, Operation};
use piw::connection::client::{Client, new_id};
use piw::connection::transport::Endpoint;
use tokio_tungstenite::tungstenite::Message;

/// A running `piw serve` and its URL; killed on drop.
struct Relay {
    child: Child,
    url: String,
}

impl Relay {
    fn start(env: &Env) -> Self {
        let mut child = env
            .piw()
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("piw serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the relay's first line");
        let url = line
            .split_whitespace()
            .find(|word| word.starts_with("ws://"))
            .expect("a ws:// URL")
            .to_string();
        Self { child, url }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn connect_through_serve_shows_the_same_frame_as_the_local_socket() {
    let env = Env::new();
    let run = env.start(&fixture("echo-task"), None);
    let local = env.once_until(&run, "the run completes", |frame| frame.contains("· COMPLETED ·"));
    let relay = Relay::start(&env);
    let remote = env
        .piw()
        .args(["--connect", &relay.url, &run, "--once"])
        .output()
        .expect("piw --connect");
    common::expect_success(&remote, "piw --connect --once");
    assert_eq!(String::from_utf8_lossy(&remote.stdout).trim_end(), local.trim_end());
}

#[test]
fn a_non_loopback_bind_is_refused() {
    let env = Env::new();
    for bind in ["0.0.0.0:0", "[::]:0"] {
        let out = env.piw().args(["serve", "--bind", bind]).output().expect("piw serve");
        assert_eq!(out.status.code(), Some(2), "{bind}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("loopback addresses only") && stderr.contains("SSH"),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_or_an_oversized_frame_closes_only_that_connection() {
    let env = Env::new();
    env.start(&fixture("echo-task"), None);
    let relay = Relay::start(&env);
    let endpoint = Endpoint::WebSocket(relay.url.clone());
    let (good, _events) = Client::connect(&endpoint, new_id("piw-test"))
        .await
        .expect("a relayed client");
    for bad in [Message::text("not json"), Message::text("x".repeat(2 * 1024 * 1024))] {
        let (mut peer, _) = tokio_tungstenite::connect_async(relay.url.as_str())
            .await
            .expect("a second peer");
        let hello = peer.next().await.expect("hello").expect("hello");
        assert!(hello.to_text().expect("text").contains("\"type\":\"hello\""));
        let _ = peer.send(bad).await;
        // The relay ends this peer's connection …
        loop {
            match peer.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                Some(Ok(_)) => {}
            }
        }
        // … and the other one keeps working.
        let response = good
            .read(Operation::ViewRunsPage, None, JsonObject::new())
            .await
            .expect("the other connection still answers");
        assert!(response.receipt.is_some(), "{response:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_relay_refuses_connections_beyond_its_limit_and_frees_them() {
    let env = Env::new();
    env.start(&fixture("echo-task"), None);
    let relay = Relay::start(&env);
    let endpoint = Endpoint::WebSocket(relay.url.clone());
    let mut held = Vec::new();
    for _ in 0..piw::serve::CONNECTIONS_MAX {
        held.push(
            Client::connect(&endpoint, new_id("piw-test"))
                .await
                .expect("within the limit"),
        );
    }
    assert!(
        Client::connect(&endpoint, new_id("piw-test")).await.is_err(),
        "one connection over the limit is refused"
    );
    held.pop();
    // A freed place is taken again once the relay has seen the close.
    common::wait_until(
        "a freed connection can be used again",
        || {
            let runtime = tokio::runtime::Handle::current();
            tokio::task::block_in_place(|| runtime.block_on(Client::connect(&endpoint, new_id("piw-test")))).is_ok()
        },
        String::new,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_server_ends_the_relayed_connection() {
    let env = Env::new();
    env.start(&fixture("echo-task"), None);
    let relay = Relay::start(&env);
    let (mut peer, _) = tokio_tungstenite::connect_async(relay.url.as_str())
        .await
        .expect("a peer");
    let hello = peer.next().await.expect("hello").expect("hello");
    assert!(hello.to_text().expect("text").contains("\"type\":\"hello\""));
    common::expect_success(&env.cli(&["server", "stop"]), "server stop");
    // The socket connection ended, so its WebSocket ends too (lifecycles coupled).
    loop {
        match peer.next().await {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
            Some(Ok(_)) => {}
        }
    }
}

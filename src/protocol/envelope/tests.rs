use super::*;
use crate::protocol::{CLIENT_SCHEMA_V1, OPAQUE_ID_BYTES_MAX};
use serde_json::json;

fn id(text: &str) -> OpaqueId {
    OpaqueId::new(text).expect("test IDs are in bounds")
}

fn sample_request() -> Request {
    Request {
        schema: ClientSchema::V1,
        request_id: id("r-1"),
        client_id: id("cli-1"),
        operation: Operation::RunCancel,
        idempotency_key: Some(id("k-1")),
        run_id: Some(id("run-1")),
        expected_revision: Some(Revision::new(12).expect("small revision")),
        payload: json!({"reason": "user"}).as_object().cloned().unwrap_or_default(),
    }
}

fn decode_str(line: &str) -> Result<ClientMessage, ProtocolError> {
    decode_client_message(format!("{line}\n").as_bytes())
}

#[test]
fn request_encodes_to_sorted_canonical_bytes_and_back() {
    let message = ClientMessage::Request(sample_request());
    let line = encode_client_message(&message).expect("encodes");
    let expected = concat!(
        r#"{"clientId":"cli-1","expectedRevision":12,"idempotencyKey":"k-1","#,
        r#""operation":"run.cancel","payload":{"reason":"user"},"requestId":"r-1","#,
        r#""runId":"run-1","schema":"pi-workflows.client.v1","type":"request"}"#,
        "\n"
    );
    assert_eq!(String::from_utf8_lossy(&line), expected);
    assert_eq!(decode_client_message(&line), Ok(message));
}

#[test]
fn every_message_type_round_trips() {
    let messages = [
        ClientMessage::Hello(Hello {
            schema: ClientSchema::V1,
            connection_id: id("conn"),
            package_version: "0.1.0".to_owned(),
        }),
        ClientMessage::Response(Response {
            schema: ClientSchema::V1,
            request_id: id("r"),
            outcome: Outcome::Rejected,
            revision: None,
            receipt: None,
            error: Some(ResponseError::new("invalid_state", "run is not paused").expect("ok")),
        }),
        ClientMessage::Event(Event {
            schema: ClientSchema::V1,
            subscription_id: id("s"),
            event: EventKind::RunPatch,
            revision: Some(Revision::ZERO),
            run_id: None,
            payload: JsonObject::new(),
        }),
    ];
    for message in messages {
        let line = encode_client_message(&message).expect("encodes");
        assert_eq!(decode_client_message(&line).as_ref(), Ok(&message));
    }
}

/// The owned encoding moves a message's payload or receipt in rather than copying it: the
/// bytes are the same, an empty payload is still written, and a receipt only when there is one.
#[test]
fn owned_encoding_writes_the_content_it_moves() {
    let response = |receipt: Option<JsonObject>| {
        ClientMessage::Response(Response {
            schema: ClientSchema::V1,
            request_id: id("r"),
            outcome: Outcome::Accepted,
            revision: Some(Revision::new(3).expect("small revision")),
            receipt,
            error: None,
        })
    };
    let with_receipt = response(json!({"runId": "run-1"}).as_object().cloned());
    assert_eq!(
        String::from_utf8_lossy(&encode_owned_client_message(with_receipt.clone()).expect("encodes")),
        concat!(
            r#"{"outcome":"accepted","receipt":{"runId":"run-1"},"requestId":"r","revision":3,"#,
            r#""schema":"pi-workflows.client.v1","type":"response"}"#,
            "\n"
        )
    );
    let mut empty_payload = sample_request();
    empty_payload.payload = JsonObject::new();
    for message in [
        with_receipt,
        response(Some(JsonObject::new())),
        response(None),
        ClientMessage::Request(empty_payload),
        ClientMessage::Request(sample_request()),
    ] {
        let line = encode_owned_client_message(message.clone()).expect("encodes");
        assert_eq!(
            decode_client_message(&line).as_ref(),
            Ok(&message),
            "{}",
            String::from_utf8_lossy(&line)
        );
    }
}

#[test]
fn envelope_errors_are_distinct() {
    let hello = |extra: &str| {
        format!(r#"{{"connectionId":"c",{extra}"packageVersion":"1","schema":"{CLIENT_SCHEMA_V1}","type":"hello"}}"#)
    };
    assert!(decode_str(&hello("")).is_ok());
    let code = |line: &str| decode_str(line).map_err(|error| error.code());
    assert_eq!(code(&hello(r#""extra":1,"#)), Err("unknown_field"));
    assert_eq!(
        code(r#"{"schema":"pi-workflows.client.v2","type":"hello"}"#),
        Err("wrong_schema")
    );
    assert_eq!(
        code(r#"{"schema":"pi-workflows.client.v1","type":"ping"}"#),
        Err("unknown_type")
    );
    assert_eq!(code(r#"{"schema":"pi-workflows.client.v1"}"#), Err("missing_field"));
    assert_eq!(code(r#"{"type":"hello"}"#), Err("missing_field"));
    assert_eq!(code("{\"a\": 1}"), Err("not_canonical"));
}

#[test]
fn ids_and_revisions_are_valid_by_construction() {
    assert!(OpaqueId::new("").is_err());
    assert!(OpaqueId::new("x".repeat(OPAQUE_ID_BYTES_MAX)).is_ok());
    assert_eq!(
        OpaqueId::new("é".repeat(OPAQUE_ID_BYTES_MAX / 2 + 1)).map_err(|e| e.code()),
        Err("id_length")
    );
    assert!(Revision::new(REVISION_MAX).is_ok());
    assert!(Revision::new(REVISION_MAX + 1).is_err());
    assert!(serde_json::from_value::<OpaqueId>(json!("")).is_err());
    assert!(serde_json::from_value::<Revision>(json!(REVISION_MAX + 1)).is_err());
}

#[test]
fn encode_refuses_what_the_peer_would_reject() {
    let hello = ClientMessage::Hello(Hello {
        schema: ClientSchema::V1,
        connection_id: id("c"),
        package_version: String::new(),
    });
    assert_eq!(encode_client_message(&hello).map_err(|e| e.code()), Err("text_length"));
    let mut request = sample_request();
    request
        .payload
        .insert("big".to_owned(), Value::from("x".repeat(1024 * 1024)));
    assert_eq!(
        encode_client_message(&ClientMessage::Request(request)).map_err(|e| e.code()),
        Err("too_large")
    );
}

#[test]
fn response_error_truncates_long_messages_within_the_bound() {
    let error = ResponseError::new("boom", &"é".repeat(ERROR_MESSAGE_BYTES_MAX)).expect("ok");
    assert!(error.message.len() <= ERROR_MESSAGE_BYTES_MAX);
    assert!(error.message.ends_with('…'));
    assert!(ResponseError::new("", "m").is_err());
    assert!(ResponseError::new(&"c".repeat(ERROR_CODE_BYTES_MAX + 1), "m").is_err());
}

#[test]
fn fingerprint_ignores_the_request_id_only() {
    let first = sample_request();
    let base = request_fingerprint(&first).expect("fingerprint");
    assert_eq!(base.len(), 64);
    assert!(base.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));

    let retry = Request {
        request_id: id("r-2"),
        ..first.clone()
    };
    assert_eq!(request_fingerprint(&retry).expect("fingerprint"), base);

    let mut changed = first.clone();
    changed.payload.insert("reason".to_owned(), json!("other"));
    assert_ne!(request_fingerprint(&changed).expect("fingerprint"), base);
    let other_key = Request {
        idempotency_key: Some(id("k-2")),
        ..first
    };
    assert_ne!(request_fingerprint(&other_key).expect("fingerprint"), base);
}

#[test]
fn fingerprint_hashes_the_documented_bytes() {
    // Pinned so the TypeScript client can check it computes the same digest.
    let bytes = concat!(
        r#"{"clientId":"cli-1","expectedRevision":12,"idempotencyKey":"k-1","#,
        r#""operation":"run.cancel","payload":{"reason":"user"},"#,
        r#""runId":"run-1","schema":"pi-workflows.client.v1","type":"request"}"#
    );
    assert_eq!(
        request_fingerprint(&sample_request()).expect("fingerprint"),
        sha256_hex(bytes.as_bytes())
    );
}

#[test]
fn serde_alone_also_rejects_unknown_fields() {
    let line = encode_client_message(&ClientMessage::Request(sample_request())).expect("encodes");
    let mut value: Value = serde_json::from_slice(&line).expect("json");
    if let Some(object) = value.as_object_mut() {
        object.insert("extra".to_owned(), json!(1));
    }
    assert!(serde_json::from_value::<ClientMessage>(value).is_err());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn valid_line() -> Vec<u8> {
        encode_client_message(&ClientMessage::Request(sample_request())).expect("encodes")
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_client_message(&bytes);
        }

        #[test]
        fn json_like_text_never_panics(text in "[{}\\[\\]\":,a-zA-Z0-9 .eE+\\-\\\\]{0,96}\n") {
            let _ = decode_client_message(text.as_bytes());
        }

        /// Any single-byte change of a valid line is either rejected or still canonical: an
        /// accepted line always re-encodes to exactly the bytes received.
        #[test]
        fn mutated_lines_are_rejected_or_round_trip(index in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let mut line = valid_line();
            let position = index.index(line.len());
            line[position] = byte;
            if let Ok(message) = decode_client_message(&line) {
                prop_assert_eq!(encode_client_message(&message).expect("re-encodes"), line);
            }
        }
    }
}

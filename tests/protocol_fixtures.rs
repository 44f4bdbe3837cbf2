//! Runs the shared client.v1 conformance fixtures (`protocol/fixtures/client.v1.json`) against the
//! Rust codec and checks that `protocol/client.v1.schema.json` agrees with both.
//!
//! Fixture case fields (the TypeScript suite reads the same file):
//!
//! * `name`: unique case name; `valid`: whether a receiver must accept the line;
//! * `line`: the raw line without its newline, or `lineHex` (hex bytes) when it is not UTF-8;
//! * `layer`: `frame` (the bytes are not one canonical JSON object) or `envelope` (they are, but
//!   the object is not a valid message); valid cases pass both layers and say `envelope`;
//! * `reason`: the expected error code of an invalid case (`ProtocolError::code`);
//! * `repeat: {pad, toBytes}`: fill the only empty JSON string (`""`) in `line` with `pad`
//!   repeated, so that the line including its newline is exactly `toBytes` bytes long;
//! * `noNewline: true`: do not append the newline;
//! * `schemaExpressible: false`: an envelope rule JSON Schema cannot state (byte lengths of
//!   non-ASCII text: `maxLength` counts code points), so the schema accepts the line.

use pi_workflows::protocol::{
    CLIENT_SCHEMA_V1, ERROR_CODE_BYTES_MAX, ERROR_MESSAGE_BYTES_MAX, EventKind, FRAME_BYTES_MAX, OPAQUE_ID_BYTES_MAX,
    OPAQUE_ID_BYTES_MIN, Operation, Outcome, PACKAGE_VERSION_BYTES_MAX, REVISION_MAX, decode_client_message,
    encode_client_message,
};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

const FIXTURES: &str = "protocol/fixtures/client.v1.json";
const SCHEMA: &str = "protocol/client.v1.schema.json";
const CASES_MIN: usize = 40;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureFile {
    schema: String,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Case {
    name: String,
    line: Option<String>,
    line_hex: Option<String>,
    valid: bool,
    layer: Layer,
    reason: Option<String>,
    repeat: Option<Repeat>,
    #[serde(default)]
    no_newline: bool,
    schema_expressible: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Layer {
    Frame,
    Envelope,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Repeat {
    pad: String,
    to_bytes: usize,
}

fn read_json(relative: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let text = std::fs::read_to_string(&path).expect("fixture file is readable");
    serde_json::from_str(&text).expect("fixture file is JSON")
}

fn fixtures() -> FixtureFile {
    serde_json::from_value(read_json(FIXTURES)).expect("fixture file has the documented shape")
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd-length lineHex");
    (0..hex.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(&hex[index..index + 2], 16).expect("lineHex is hex"))
        .collect()
}

/// The exact bytes a receiver gets for `case`, newline included unless `noNewline`.
fn wire_bytes(case: &Case) -> Vec<u8> {
    let mut bytes = match (&case.line, &case.line_hex) {
        (Some(line), None) => apply_repeat(line, case.repeat.as_ref()).into_bytes(),
        (None, Some(hex)) => hex_bytes(hex),
        _ => panic!("case {} needs exactly one of line and lineHex", case.name),
    };
    if !case.no_newline {
        bytes.push(b'\n');
    }
    if let Some(repeat) = &case.repeat {
        assert_eq!(bytes.len(), repeat.to_bytes, "case {}", case.name);
    }
    bytes
}

fn apply_repeat(line: &str, repeat: Option<&Repeat>) -> String {
    let Some(repeat) = repeat else {
        return line.to_owned();
    };
    assert_eq!(line.matches("\"\"").count(), 1, "repeat needs exactly one empty string");
    let fill = repeat.to_bytes - 1 - line.len();
    let pad = repeat.pad.repeat(fill / repeat.pad.len());
    line.replacen("\"\"", &format!("\"{pad}\""), 1)
}

#[test]
fn every_fixture_case_decodes_as_declared() {
    let file = fixtures();
    assert_eq!(file.schema, CLIENT_SCHEMA_V1);
    assert!(file.cases.len() >= CASES_MIN, "only {} cases", file.cases.len());
    let names: BTreeSet<_> = file.cases.iter().map(|case| case.name.as_str()).collect();
    assert_eq!(names.len(), file.cases.len(), "case names must be unique");
    for case in &file.cases {
        let bytes = wire_bytes(case);
        match decode_client_message(&bytes) {
            Ok(message) => {
                assert!(case.valid, "case {} was accepted but is invalid", case.name);
                let encoded = encode_client_message(&message).expect("valid messages encode");
                assert!(encoded == bytes, "case {} re-encodes to other bytes", case.name);
            }
            Err(error) => {
                assert!(!case.valid, "case {} was rejected: {error}", case.name);
                assert_eq!(Some(error.code()), case.reason.as_deref(), "case {}", case.name);
                let layer = if error.is_frame_error() {
                    Layer::Frame
                } else {
                    Layer::Envelope
                };
                assert_eq!(layer, case.layer, "case {}: {error}", case.name);
                assert!(error.to_string().len() <= 400, "case {} error too long", case.name);
            }
        }
    }
}

#[test]
fn valid_cases_declare_no_reason_and_invalid_cases_do() {
    for case in fixtures().cases {
        assert_eq!(case.valid, case.reason.is_none(), "case {}", case.name);
        if case.valid {
            assert_eq!(case.layer, Layer::Envelope, "case {}", case.name);
        }
    }
}

#[test]
fn fixtures_cover_every_error_code_a_peer_can_cause() {
    let reasons: BTreeSet<String> = fixtures().cases.into_iter().filter_map(|c| c.reason).collect();
    let expected = [
        "too_large",
        "missing_newline",
        "not_utf8",
        "not_json",
        "trailing_data",
        "not_object",
        "not_canonical",
        "missing_field",
        "wrong_schema",
        "unknown_type",
        "unknown_field",
        "wrong_type",
        "id_length",
        "id_characters",
        "invalid_revision",
        "unknown_operation",
        "unknown_outcome",
        "unknown_event",
        "text_length",
    ];
    let expected: BTreeSet<String> = expected.iter().map(|&code| code.to_owned()).collect();
    assert_eq!(reasons, expected);
}

/// The schema states the envelope rules only. Frame-layer rules (canonical bytes, whitespace,
/// number spelling, key order, duplicate keys, UTF-8, the 1 MiB limit) are properties of the raw
/// bytes, which JSON Schema never sees, so frame-layer invalid cases are not checked here.
#[test]
fn schema_agrees_with_every_valid_and_envelope_layer_case() {
    let schema = read_json(SCHEMA);
    jsonschema::meta::validate(&schema).expect("schema is a valid JSON Schema");
    let validator = jsonschema::draft202012::new(&schema).expect("schema compiles");
    let mut checked = 0;
    for case in fixtures().cases {
        if !case.valid && case.layer == Layer::Frame {
            continue;
        }
        let mut bytes = wire_bytes(&case);
        bytes.pop();
        let instance: Value = serde_json::from_slice(&bytes).expect("envelope cases are JSON");
        let expected = case.valid || case.schema_expressible == Some(false);
        assert_eq!(validator.is_valid(&instance), expected, "case {}", case.name);
        checked += 1;
    }
    assert!(
        checked >= CASES_MIN / 2,
        "only {checked} cases checked against the schema"
    );
}

fn schema_enum(schema: &Value, definition: &str) -> Vec<String> {
    schema["$defs"][definition]["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("$defs.{definition}.enum is an array"))
        .iter()
        .map(|name| name.as_str().expect("enum entries are strings").to_owned())
        .collect()
}

#[test]
fn schema_enums_match_the_rust_enums_in_order() {
    let schema = read_json(SCHEMA);
    let names = |all: Vec<&'static str>| all.into_iter().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        schema_enum(&schema, "operation"),
        names(Operation::ALL.iter().map(|o| o.as_str()).collect())
    );
    assert_eq!(
        schema_enum(&schema, "outcome"),
        names(Outcome::ALL.iter().map(|o| o.as_str()).collect())
    );
    assert_eq!(
        schema_enum(&schema, "eventKind"),
        names(EventKind::ALL.iter().map(|e| e.as_str()).collect())
    );
}

#[test]
fn schema_bounds_match_the_rust_constants() {
    let schema = read_json(SCHEMA);
    let defs = &schema["$defs"];
    let number = |value: &Value| value.as_u64().expect("bound is an integer");
    let id = &defs["opaqueId"];
    assert_eq!(number(&id["minLength"]), OPAQUE_ID_BYTES_MIN as u64);
    assert_eq!(number(&id["maxLength"]), OPAQUE_ID_BYTES_MAX as u64);
    assert_eq!(number(&defs["revision"]["minimum"]), 0);
    assert_eq!(number(&defs["revision"]["maximum"]), REVISION_MAX);
    let error = &defs["responseError"]["properties"];
    assert_eq!(number(&error["code"]["maxLength"]), ERROR_CODE_BYTES_MAX as u64);
    assert_eq!(number(&error["message"]["maxLength"]), ERROR_MESSAGE_BYTES_MAX as u64);
    let version = &defs["hello"]["properties"]["packageVersion"];
    assert_eq!(number(&version["maxLength"]), PACKAGE_VERSION_BYTES_MAX as u64);
    assert_eq!(defs["schemaName"]["const"], CLIENT_SCHEMA_V1);
    let description = schema["description"].as_str().expect("schema has a description");
    assert!(description.contains(&FRAME_BYTES_MAX.to_string()));
}

/// The TypeScript client's operation list (between its `operations:begin` / `:end` markers).
fn typescript_operations() -> Vec<String> {
    let source = std::fs::read_to_string("packages/pi-workflows/src/client/protocol.ts").expect("TypeScript protocol");
    let begin = source.find("// operations:begin").expect("begin marker");
    let end = source.find("// operations:end").expect("end marker");
    source[begin..end]
        .lines()
        .filter_map(|line| line.trim().strip_prefix('"'))
        .map(|line| line.split('"').next().expect("a quoted name").to_owned())
        .collect()
}

#[test]
fn operation_lists_of_rust_typescript_and_the_schema_agree() {
    let schema = schema_enum(&read_json(SCHEMA), "operation");
    let rust: Vec<String> = Operation::ALL.iter().map(|o| o.as_str().to_owned()).collect();
    let typescript = typescript_operations();
    assert!(typescript.len() > 40, "the TypeScript list was read: {typescript:?}");
    assert_eq!(rust, schema, "Rust and the schema");
    assert_eq!(typescript, schema, "TypeScript and the schema");
}

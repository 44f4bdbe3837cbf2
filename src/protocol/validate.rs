//! Field-by-field validation of a decoded frame against the client.v1 envelope tables.
//!
//! Validation runs on the raw JSON object before typed decoding, so each problem gets its own
//! [`ProtocolError`] variant instead of a free-form serde message, and it runs again on every
//! outbound message, so this process never sends what a peer must reject.

use super::canonical::bounded_text;
use super::error::ProtocolError;
use super::vocabulary::{EventKind, Operation, Outcome};
use super::{
    CLIENT_SCHEMA_V1, ERROR_CODE_BYTES_MAX, ERROR_MESSAGE_BYTES_MAX, OPAQUE_ID_BYTES_MAX, OPAQUE_ID_BYTES_MIN,
    PACKAGE_VERSION_BYTES_MAX, REVISION_MAX,
};
use serde_json::{Map, Value};

/// Longest excerpt of a peer-supplied name quoted in an error message, in bytes.
const QUOTED_NAME_BYTES_MAX: usize = 48;

/// The four message types, named by the envelope's `type` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MessageType {
    Hello,
    Request,
    Response,
    Event,
}

impl MessageType {
    fn from_wire(name: &str) -> Option<Self> {
        match name {
            "hello" => Some(Self::Hello),
            "request" => Some(Self::Request),
            "response" => Some(Self::Response),
            "event" => Some(Self::Event),
            _ => None,
        }
    }

    const fn as_str(self) -> &'static str {
        match self {
            Self::Hello => "hello",
            Self::Request => "request",
            Self::Response => "response",
            Self::Event => "event",
        }
    }

    const fn fields(self) -> &'static [Field] {
        match self {
            Self::Hello => HELLO_FIELDS,
            Self::Request => REQUEST_FIELDS,
            Self::Response => RESPONSE_FIELDS,
            Self::Event => EVENT_FIELDS,
        }
    }
}

/// What a field may hold.
#[derive(Debug, Clone, Copy)]
enum Rule {
    Id,
    Revision,
    Operation,
    Outcome,
    EventKind,
    Object,
    Text { min: usize, max: usize },
    ResponseError,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    rule: Rule,
    required: bool,
}

impl Field {
    /// The object key of this field: its name without the nesting `prefix` (`error.`).
    fn key(&self, prefix: &str) -> &'static str {
        self.name.strip_prefix(prefix).unwrap_or(self.name)
    }
}

const fn required(name: &'static str, rule: Rule) -> Field {
    Field {
        name,
        rule,
        required: true,
    }
}

const fn optional(name: &'static str, rule: Rule) -> Field {
    Field {
        name,
        rule,
        required: false,
    }
}

/// Fields present in every message, checked before the per-type tables.
const HEADER_FIELDS: [&str; 2] = ["schema", "type"];

const HELLO_FIELDS: &[Field] = &[
    required("connectionId", Rule::Id),
    required(
        "packageVersion",
        Rule::Text {
            min: 1,
            max: PACKAGE_VERSION_BYTES_MAX,
        },
    ),
];

const REQUEST_FIELDS: &[Field] = &[
    required("requestId", Rule::Id),
    required("clientId", Rule::Id),
    required("operation", Rule::Operation),
    optional("idempotencyKey", Rule::Id),
    optional("runId", Rule::Id),
    optional("expectedRevision", Rule::Revision),
    required("payload", Rule::Object),
];

const RESPONSE_FIELDS: &[Field] = &[
    required("requestId", Rule::Id),
    required("outcome", Rule::Outcome),
    optional("revision", Rule::Revision),
    optional("receipt", Rule::Object),
    optional("error", Rule::ResponseError),
];

const EVENT_FIELDS: &[Field] = &[
    required("subscriptionId", Rule::Id),
    required("event", Rule::EventKind),
    optional("revision", Rule::Revision),
    optional("runId", Rule::Id),
    required("payload", Rule::Object),
];

const ERROR_FIELDS: &[Field] = &[
    required(
        "error.code",
        Rule::Text {
            min: 1,
            max: ERROR_CODE_BYTES_MAX,
        },
    ),
    required(
        "error.message",
        Rule::Text {
            min: 0,
            max: ERROR_MESSAGE_BYTES_MAX,
        },
    ),
];

/// Validates a whole message object and returns its type.
pub(crate) fn validate_message(object: &Map<String, Value>) -> Result<MessageType, ProtocolError> {
    check_schema(object.get("schema"))?;
    let message_type = check_type(object.get("type"))?;
    let fields = message_type.fields();
    reject_unknown_fields(object, message_type.as_str(), &HEADER_FIELDS, fields, "")?;
    check_fields(object, fields, "")?;
    Ok(message_type)
}

fn check_schema(value: Option<&Value>) -> Result<(), ProtocolError> {
    match value {
        None => Err(ProtocolError::MissingField { field: "schema" }),
        Some(Value::String(name)) if name == CLIENT_SCHEMA_V1 => Ok(()),
        Some(_) => Err(ProtocolError::WrongSchema),
    }
}

fn check_type(value: Option<&Value>) -> Result<MessageType, ProtocolError> {
    let value = value.ok_or(ProtocolError::MissingField { field: "type" })?;
    value
        .as_str()
        .and_then(MessageType::from_wire)
        .ok_or_else(|| ProtocolError::UnknownType {
            found: quote_value(value),
        })
}

fn reject_unknown_fields(
    object: &Map<String, Value>,
    message_type: &'static str,
    header: &[&str],
    fields: &[Field],
    prefix: &str,
) -> Result<(), ProtocolError> {
    let known = |key: &str| header.contains(&key) || fields.iter().any(|field| field.key(prefix) == key);
    match object.keys().find(|key| !known(key)) {
        None => Ok(()),
        Some(key) => Err(ProtocolError::UnknownField {
            message_type,
            field: quote(key),
        }),
    }
}

/// Checks each table field of `object`; `prefix` is stripped from table names to find the key.
fn check_fields(object: &Map<String, Value>, fields: &[Field], prefix: &str) -> Result<(), ProtocolError> {
    for field in fields {
        match object.get(field.key(prefix)) {
            Some(value) => check_rule(field.name, field.rule, value)?,
            None if field.required => {
                return Err(ProtocolError::MissingField { field: field.name });
            }
            None => {}
        }
    }
    Ok(())
}

fn check_rule(field: &'static str, rule: Rule, value: &Value) -> Result<(), ProtocolError> {
    match rule {
        Rule::Id => check_id(field, as_string(field, value)?),
        Rule::Revision => check_revision(field, value),
        Rule::Operation => check_name(field, value, Operation::from_wire, |found| {
            ProtocolError::UnknownOperation { found }
        }),
        Rule::Outcome => check_name(field, value, Outcome::from_wire, |found| {
            ProtocolError::UnknownOutcome { found }
        }),
        Rule::EventKind => check_name(field, value, EventKind::from_wire, |found| {
            ProtocolError::UnknownEvent { found }
        }),
        Rule::Object => as_object(field, value).map(|_| ()),
        Rule::Text { min, max } => check_text(field, as_string(field, value)?, min, max),
        Rule::ResponseError => check_response_error(as_object(field, value)?),
    }
}

/// Checks an opaque ID: its byte length first, then its characters.
pub fn check_id(field: &'static str, id: &str) -> Result<(), ProtocolError> {
    if !(OPAQUE_ID_BYTES_MIN..=OPAQUE_ID_BYTES_MAX).contains(&id.len()) {
        return Err(ProtocolError::IdLength { field, bytes: id.len() });
    }
    if !id.chars().all(super::is_opaque_id_char) {
        return Err(ProtocolError::IdCharacters { field });
    }
    Ok(())
}

/// Checks the byte length of a bounded text field.
pub(crate) fn check_text(field: &'static str, text: &str, min: usize, max: usize) -> Result<(), ProtocolError> {
    if (min..=max).contains(&text.len()) {
        Ok(())
    } else {
        Err(ProtocolError::TextLength {
            field,
            bytes: text.len(),
            min,
            max,
        })
    }
}

fn check_revision(field: &'static str, value: &Value) -> Result<(), ProtocolError> {
    match value.as_u64() {
        Some(revision) if revision <= REVISION_MAX => Ok(()),
        _ => Err(ProtocolError::InvalidRevision { field }),
    }
}

fn check_name<T>(
    field: &'static str,
    value: &Value,
    from_wire: fn(&str) -> Option<T>,
    unknown: fn(String) -> ProtocolError,
) -> Result<(), ProtocolError> {
    let name = as_string(field, value)?;
    match from_wire(name) {
        Some(_) => Ok(()),
        None => Err(unknown(quote(name))),
    }
}

fn check_response_error(object: &Map<String, Value>) -> Result<(), ProtocolError> {
    reject_unknown_fields(object, "error", &[], ERROR_FIELDS, "error.")?;
    check_fields(object, ERROR_FIELDS, "error.")
}

fn as_string<'a>(field: &'static str, value: &'a Value) -> Result<&'a str, ProtocolError> {
    value.as_str().ok_or(ProtocolError::WrongType {
        field,
        expected: "a string",
    })
}

fn as_object<'a>(field: &'static str, value: &'a Value) -> Result<&'a Map<String, Value>, ProtocolError> {
    value.as_object().ok_or(ProtocolError::WrongType {
        field,
        expected: "an object",
    })
}

/// A short, escaped, quoted excerpt of peer-supplied text for an error message.
fn quote(text: &str) -> String {
    format!("{:?}", bounded_text(text, QUOTED_NAME_BYTES_MAX))
}

/// Like [`quote`], for a value that may not be a string.
fn quote_value(value: &Value) -> String {
    match value {
        Value::String(text) => quote(text),
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "(a boolean)".to_owned(),
        Value::Number(_) => "(a number)".to_owned(),
        Value::Array(_) => "(an array)".to_owned(),
        Value::Object(_) => "(an object)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(value: Value) -> Result<MessageType, &'static str> {
        let Value::Object(object) = value else {
            return Err("test value is not an object");
        };
        validate_message(&object).map_err(|error| error.code())
    }

    fn request(extra: Value) -> Value {
        let mut base = json!({
            "schema": CLIENT_SCHEMA_V1, "type": "request", "requestId": "r", "clientId": "c",
            "operation": "run.status", "payload": {}
        });
        if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
            base.extend(extra);
        }
        base
    }

    #[test]
    fn accepts_minimal_and_full_requests() {
        assert_eq!(check(request(json!({}))), Ok(MessageType::Request));
        let full = json!({"idempotencyKey": "k", "runId": "run", "expectedRevision": 0});
        assert_eq!(check(request(full)), Ok(MessageType::Request));
    }

    #[test]
    fn each_problem_has_its_own_code() {
        let cases = [
            (json!({"schema": null}), "wrong_schema"),
            (json!({"type": 1}), "unknown_type"),
            (json!({"extra": 1}), "unknown_field"),
            (json!({"runId": null}), "wrong_type"),
            (json!({"requestId": ""}), "id_length"),
            (json!({"expectedRevision": -1}), "invalid_revision"),
            (
                json!({"expectedRevision": 9_007_199_254_740_992_u64}),
                "invalid_revision",
            ),
            (json!({"expectedRevision": "1"}), "invalid_revision"),
            (json!({"operation": "run.explode"}), "unknown_operation"),
            (json!({"payload": []}), "wrong_type"),
        ];
        for (patch, code) in cases {
            assert_eq!(check(request(patch.clone())), Err(code), "{patch}");
        }
    }

    #[test]
    fn nested_error_objects_are_checked() {
        let response = |error: Value| {
            json!({"schema": CLIENT_SCHEMA_V1, "type": "response", "requestId": "r",
                   "outcome": "rejected", "error": error})
        };
        assert!(check(response(json!({"code": "x", "message": ""}))).is_ok());
        let too_long = "m".repeat(ERROR_MESSAGE_BYTES_MAX + 1);
        let cases = [
            (json!({"code": "x", "message": too_long}), "text_length"),
            (json!({"code": "", "message": "m"}), "text_length"),
            (json!({"code": "x"}), "missing_field"),
            (json!({"code": "x", "message": "m", "stack": "s"}), "unknown_field"),
            (json!("boom"), "wrong_type"),
        ];
        for (error, code) in cases {
            assert_eq!(check(response(error.clone())), Err(code), "{error}");
        }
    }

    #[test]
    fn quoted_names_are_short_and_escaped() {
        let error = validate_message(
            request(json!({"operation": format!("\u{1b}[31m{}", "x".repeat(10_000))}))
                .as_object()
                .unwrap_or(&Map::new()),
        )
        .expect_err("unknown operation");
        let message = error.to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("\\u{1b}"), "{message}");
    }
}

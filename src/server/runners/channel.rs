//! The runner channel's reads: the one explicit first command with its narrow run state,
//! and `content.read` of a run state too large for one frame.
//!
//! Architecture Invariant: a runner can read only content the server advertised to its own
//! runner epoch, in parts of at most 512 KiB; every bad read gets a bounded error.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::protocol::runner::{COMMAND_SCHEMA, Command, CommandKind, Message};
use crate::protocol::{encode_frame, json_object, value_to_canonical_vec};
use crate::server::blocking;
use crate::store::blobs::{self, BLOB_PART_BYTES_MAX, BlobRef};
use crate::store::run_state::{self, FirstCommand};
use crate::store::{Store, StoreError, StoreResult};

/// The media type of a run state stored for transfer.
pub const RUN_STATE_MEDIA_TYPE: &str = "application/vnd.pi-workflows.run-state+json";

/// The first command frame for a run, and the content it advertises (if any).
pub struct FirstFrame {
    pub bytes: Vec<u8>,
    pub advertised: Option<BlobRef>,
    /// The settings version the run state carries (`None`: the run declares none).
    pub settings_change_number: Option<i64>,
    /// The run's revision when the frame was read.
    pub revision: i64,
}

/// Build the one explicit command for the run's runner; a run state above the frame
/// limit is stored as a blob and sent as a digest-bound reference.
pub async fn first_command_frame(store: &Arc<Store>, run_id: &str) -> StoreResult<FirstFrame> {
    let ((first, revision), state) = match blocking::read_small(store, |conn| fresh_run_state(conn, run_id))? {
        Some(read) => read,
        None => {
            let owned = run_id.to_string();
            blocking::read(store, move |conn| {
                Ok((
                    run_state::first_command(conn, &owned)?,
                    run_state::read_run_state(conn, &owned)?,
                ))
            })
            .await?
        }
    };
    let (kind, parent_attempt_id) = match first {
        FirstCommand::Start => (CommandKind::Start, None),
        FirstCommand::Resume => (CommandKind::Resume, None),
        FirstCommand::Restart => (CommandKind::Restart, None),
        FirstCommand::Continue { parent_attempt_id } => (CommandKind::Continue, Some(parent_attempt_id)),
    };
    let command = |payload: Map<String, Value>| Command {
        schema: COMMAND_SCHEMA.to_string(),
        command: kind,
        parent_attempt_id: parent_attempt_id.clone(),
        payload,
    };
    let settings_change_number = state.pointer("/settings/changeNumber").and_then(Value::as_i64);
    // The state moves into the inline command, and back out of it if that frame is too large.
    let mut inline = command(json_object([("runState", state)]));
    match encode_frame(&inline) {
        Ok(bytes) => {
            return Ok(FirstFrame {
                bytes,
                advertised: None,
                settings_change_number,
                revision,
            });
        }
        Err(crate::protocol::FrameError::TooLarge { .. }) => {}
        Err(err) => return Err(frame_error(&err.to_string())),
    }
    let state = inline.payload.remove("runState").unwrap_or_default();
    let content = value_to_canonical_vec(&state);
    let reference = blocking::write(store, move |tx| blobs::put_blob(tx, &content, RUN_STATE_MEDIA_TYPE)).await?;
    let by_reference = command(json_object([("runStateRef", content_ref(&reference))]));
    let bytes = encode_frame(&by_reference).map_err(|err| frame_error(&err.to_string()))?;
    Ok(FirstFrame {
        bytes,
        advertised: Some(reference),
        settings_change_number,
        revision,
    })
}

/// The stored values a run state may hold to be read in place (`fresh_run_state`).
const FRESH_RUN_STATE_BYTES_MAX: usize = 16 * 1024;

/// The first command and run state of a run that starts afresh, read in place when its
/// stored values fit in `FRESH_RUN_STATE_BYTES_MAX`: such a state is its input and settings
/// (no attempt, effect or request rows yet), and a trip to the blocking pool costs two thread
/// wake-ups, more than this read. `None`: any other run (resumed, continued, restarted: their
/// history can be long), or a larger state; both are read on the pool.
fn fresh_run_state(conn: &rusqlite::Connection, run_id: &str) -> StoreResult<Option<((FirstCommand, i64), Value)>> {
    let first = run_state::first_command(conn, run_id)?;
    if first.0 != FirstCommand::Start {
        return Ok(None);
    }
    match run_state::read_run_state_within(conn, run_id, FRESH_RUN_STATE_BYTES_MAX) {
        Ok(state) => Ok(Some((first, state))),
        Err(StoreError::TooLarge { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

fn content_ref(reference: &BlobRef) -> Value {
    json!({"digest": reference.sha256, "mediaType": reference.media_type, "byteLength": reference.bytes})
}

fn frame_error(detail: &str) -> StoreError {
    StoreError::InvalidInput {
        what: "runner command",
        detail: detail.to_string(),
    }
}

/// A `content.read` failure: a stable code and a bounded message.
pub struct ReadFailure {
    pub code: &'static str,
    pub message: String,
}

impl ReadFailure {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Serve one `content.read` of content advertised to this runner.
pub async fn read_content(store: &Arc<Store>, advertised: &[BlobRef], message: &Message) -> Result<Value, ReadFailure> {
    let text = |key: &str| {
        message
            .payload
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (digest, media_type) = (text("digest"), text("mediaType"));
    let number = |key: &str| message.payload.get(key).and_then(Value::as_u64);
    let (Some(offset), Some(length)) = (number("offset"), number("length")) else {
        return Err(ReadFailure::new(
            "badRange",
            "offset and length must be non-negative integers",
        ));
    };
    if length == 0 || length > BLOB_PART_BYTES_MAX as u64 {
        return Err(ReadFailure::new(
            "badRange",
            format!("length must be 1 to {BLOB_PART_BYTES_MAX} bytes"),
        ));
    }
    let Some(reference) = advertised
        .iter()
        .find(|r| r.sha256 == digest && r.media_type == media_type)
        .cloned()
    else {
        return Err(ReadFailure::new(
            "contentUnavailable",
            "no content with that digest and media type was offered to this runner",
        ));
    };
    let total = reference.bytes;
    let part = blocking::read(store, move |conn| {
        blobs::read_blob_part(conn, &reference, offset, length as usize)
    })
    .await
    .map_err(|err| ReadFailure::new(read_code(&err), err.to_string()))?;
    // The encoded part (up to ~700 KB) moves in; `json!` would copy it.
    Ok(Value::Object(json_object([
        ("offset", json!(offset)),
        ("length", json!(part.len())),
        ("totalLength", json!(total)),
        ("dataBase64", Value::String(base64_encode(&part))),
    ])))
}

fn read_code(err: &StoreError) -> &'static str {
    match err {
        StoreError::Blob(blobs::BlobError::BadRange { .. } | blobs::BlobError::PartTooLarge { .. }) => "badRange",
        StoreError::Blob(blobs::BlobError::NotFound { .. } | blobs::BlobError::MediaTypeMismatch { .. }) => {
            "contentUnavailable"
        }
        _ => "contentDamaged",
    }
}

/// Standard base64 with padding (RFC 4648 §4): 512 KiB parts fit a 1 MiB frame encoded.
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let group = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(ALPHABET[((group >> (18 - 6 * index)) & 0x3f) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::{FRESH_RUN_STATE_BYTES_MAX, base64_encode, fresh_run_state};
    use crate::store::runs::{self, NewRun};
    use crate::store::{Store, SystemClock, blobs, run_state};

    /// A store with one queued run whose input is a string of `input_bytes` bytes.
    fn store_with_input(dir: &std::path::Path, input_bytes: usize) -> Store {
        let store = Store::open(&dir.join("state.sqlite"), Arc::new(SystemClock)).expect("store");
        store
            .write(move |tx| {
                let input = blobs::put_json(tx, &json!({"text": "x".repeat(input_bytes)}), 1 << 20)?;
                runs::queue_run(
                    tx,
                    &NewRun {
                        input_hash: format!("sha256:{input}"),
                        ..NewRun::example("run-1")
                    },
                )
            })
            .expect("queue");
        store
    }

    #[test]
    fn a_fresh_small_run_state_is_read_in_place_and_a_large_one_is_left_to_the_pool() {
        let dir = tempfile::tempdir().expect("dir");
        let small = store_with_input(dir.path(), 100);
        let read = small.read(|conn| fresh_run_state(conn, "run-1")).expect("read");
        let whole = small
            .read(|conn| run_state::read_run_state(conn, "run-1"))
            .expect("whole");
        let ((_, revision), state) = read.expect("a small fresh state is read in place");
        assert_eq!(state, whole, "the same state the pool would read");
        assert_eq!(Some(revision), whole.get("revision").and_then(Value::as_i64));
        drop(small);
        let dir = tempfile::tempdir().expect("dir");
        let large = store_with_input(dir.path(), FRESH_RUN_STATE_BYTES_MAX);
        let read = large.read(|conn| fresh_run_state(conn, "run-1")).expect("read");
        assert!(read.is_none(), "above the bound: read on the pool");
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64_encode(plain.as_bytes()), encoded, "{plain:?}");
        }
    }
}

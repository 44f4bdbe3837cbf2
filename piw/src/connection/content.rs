//! Referenced content (`view.content`): read in bounded chunks until complete, then check
//! the assembled bytes against both the digest the server answered and the digest the view
//! advertised (docs/VIEWS.md, "Pages and content"). A mismatch is an error for that
//! section of the view, never a silent partial value.

use base64::Engine as _;
use pi_workflows::protocol::{JsonObject, Operation};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::client::{Client, ClientError, accepted};

/// The chunk size asked for (the server's maximum, 512 KiB).
pub const CHUNK_BYTES: usize = 512 * 1024;
/// The largest value piw assembles: a bound so a wrong `byteLength` cannot exhaust memory.
pub const CONTENT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// A content reference as a view carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentRef {
    pub digest: String,
    pub media_type: String,
    pub byte_length: usize,
}

impl ContentRef {
    pub fn from_value(value: &Value) -> Option<Self> {
        Some(Self {
            digest: value.get("digest")?.as_str()?.to_string(),
            media_type: value.get("mediaType")?.as_str()?.to_string(),
            byte_length: usize::try_from(value.get("byteLength")?.as_u64()?).ok()?,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    #[error("content unavailable: {0}")]
    Unavailable(String),
    #[error("content is {0} bytes, above piw's {CONTENT_BYTES_MAX}-byte limit")]
    TooLarge(usize),
    #[error("content does not match its digest {expected} (got {actual})")]
    DigestMismatch { expected: String, actual: String },
    #[error("content is malformed: {0}")]
    Malformed(String),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// `sha256:<lowercase hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

/// Read the complete content of `reference` for `run_id`, verified.
pub async fn fetch(client: &Client, run_id: &str, reference: &ContentRef) -> Result<Vec<u8>, ContentError> {
    if reference.byte_length > CONTENT_BYTES_MAX {
        return Err(ContentError::TooLarge(reference.byte_length));
    }
    let mut bytes = Vec::with_capacity(reference.byte_length);
    loop {
        let chunk = fetch_chunk(client, run_id, reference, bytes.len()).await?;
        if chunk.is_empty() && bytes.len() < reference.byte_length {
            return Err(ContentError::Malformed("an empty chunk before the end".into()));
        }
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= reference.byte_length {
            break;
        }
    }
    verify(&bytes, &reference.digest)?;
    Ok(bytes)
}

async fn fetch_chunk(
    client: &Client,
    run_id: &str,
    reference: &ContentRef,
    offset: usize,
) -> Result<Vec<u8>, ContentError> {
    let mut payload = JsonObject::new();
    payload.insert("digest".into(), json!(reference.digest));
    payload.insert("mediaType".into(), json!(reference.media_type));
    payload.insert("offset".into(), json!(offset));
    let remaining = reference.byte_length.saturating_sub(offset).clamp(1, CHUNK_BYTES);
    payload.insert("length".into(), json!(remaining));
    let response = client.read(Operation::ViewContent, Some(run_id), payload).await?;
    let receipt = accepted(&response).map_err(|refusal| ContentError::Unavailable(refusal.to_string()))?;
    // The answer must name the same content the view referenced.
    let answered = receipt.get("digest").and_then(Value::as_str).unwrap_or_default();
    if answered != reference.digest {
        return Err(ContentError::DigestMismatch {
            expected: reference.digest.clone(),
            actual: answered.to_string(),
        });
    }
    let data = receipt.get("data").and_then(Value::as_str).unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|err| ContentError::Malformed(err.to_string()))
}

/// Check `bytes` against `expected` (`sha256:<hex>`).
pub fn verify(bytes: &[u8], expected: &str) -> Result<(), ContentError> {
    let actual = digest_of(bytes);
    if actual != expected {
        return Err(ContentError::DigestMismatch {
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_accepts_the_exact_digest_and_refuses_another() {
        let digest = digest_of(b"{}");
        assert!(verify(b"{}", &digest).is_ok());
        assert!(matches!(
            verify(b"{ }", &digest),
            Err(ContentError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn a_reference_needs_its_three_fields() {
        let value = json!({"digest": "sha256:ab", "mediaType": "x", "byteLength": 2});
        assert_eq!(ContentRef::from_value(&value).map(|r| r.byte_length), Some(2));
        assert!(ContentRef::from_value(&json!({"digest": "sha256:ab"})).is_none());
    }
}

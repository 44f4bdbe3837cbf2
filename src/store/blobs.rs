//! Content-addressed blobs (SHA-256) for large values: receipts, outputs, errors and
//! transfer content. Reads come in parts of at most `BLOB_PART_BYTES_MAX` and a complete
//! read is verified against the digest. Bad input gets a bounded error, never a panic.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::error::StoreResult;
use super::writer::WriteTx;
use crate::digest::{is_sha256_hex, sha256_hex};

/// One read returns at most this many bytes (spec: 512 KiB parts).
pub const BLOB_PART_BYTES_MAX: usize = 512 * 1024;
/// The largest value the store keeps as one blob.
pub const BLOB_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Media types are short identifiers such as `application/json`.
pub const MEDIA_TYPE_BYTES_MAX: usize = 128;

/// A digest-bound reference to stored content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlobRef {
    pub sha256: String,
    pub media_type: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    #[error("content digest is not a lowercase hex SHA-256; use the digest from the reference as given")]
    MalformedDigest,
    #[error("media type must be 1 to {MEDIA_TYPE_BYTES_MAX} printable ASCII bytes")]
    BadMediaType,
    #[error("content {sha256_prefix}… is not stored; it may have been pruned, so request the value again")]
    NotFound { sha256_prefix: String },
    #[error("content is stored as {found}, not {expected}")]
    MediaTypeMismatch { expected: String, found: String },
    #[error("content has {found} bytes, not the {expected} bytes the reference names")]
    LengthMismatch { expected: u64, found: u64 },
    #[error("offset {offset} is past the end of {bytes}-byte content")]
    BadRange { offset: u64, bytes: u64 },
    #[error("a part of {requested} bytes is above the {BLOB_PART_BYTES_MAX}-byte part limit; read smaller parts")]
    PartTooLarge { requested: usize },
    #[error("content bytes do not match their digest; the stored value is damaged, run `pi-workflows state verify`")]
    DigestMismatch,
    #[error("content of {bytes} bytes is above the {BLOB_BYTES_MAX}-byte limit")]
    TooLarge { bytes: usize },
}

fn digest_prefix(sha256: &str) -> String {
    sha256.chars().take(12).collect()
}

fn check_media_type(media_type: &str) -> Result<(), BlobError> {
    let printable = media_type.bytes().all(|b| b.is_ascii_graphic());
    if media_type.is_empty() || media_type.len() > MEDIA_TYPE_BYTES_MAX || !printable {
        return Err(BlobError::BadMediaType);
    }
    Ok(())
}

/// Store `content` under its SHA-256 and media type (idempotent).
pub fn put_blob(tx: &WriteTx<'_>, content: &[u8], media_type: &str) -> StoreResult<BlobRef> {
    check_media_type(media_type)?;
    if content.len() > BLOB_BYTES_MAX {
        return Err(BlobError::TooLarge { bytes: content.len() }.into());
    }
    let reference = BlobRef {
        sha256: sha256_hex(content),
        media_type: media_type.to_string(),
        bytes: content.len() as u64,
    };
    tx.conn()
        .prepare_cached(
            "INSERT INTO blobs (blob_hash, media_type, byte_length, content, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (blob_hash, media_type) DO NOTHING",
        )?
        .execute(params![
            reference.sha256,
            reference.media_type,
            content.len() as i64,
            content,
            tx.now_ms()
        ])?;
    Ok(reference)
}

/// The stored length of (digest, media type), if stored.
fn stored_length(conn: &Connection, sha256: &str, media_type: &str) -> StoreResult<Option<u64>> {
    let length = conn
        .prepare_cached("SELECT byte_length FROM blobs WHERE blob_hash = ?1 AND media_type = ?2")?
        .query_row([sha256, media_type], |row| row.get::<_, i64>(0))
        .optional()?;
    Ok(length.map(|bytes| bytes as u64))
}

/// Why (digest, media type) is not stored: the digest exists under another media type, or
/// not at all.
fn absent(conn: &Connection, sha256: &str, media_type: &str) -> StoreResult<BlobError> {
    let other: Option<String> = conn
        .prepare_cached("SELECT media_type FROM blobs WHERE blob_hash = ?1 LIMIT 1")?
        .query_row([sha256], |row| row.get(0))
        .optional()?;
    Ok(match other {
        Some(found) => BlobError::MediaTypeMismatch {
            expected: media_type.to_string(),
            found,
        },
        None => BlobError::NotFound {
            sha256_prefix: digest_prefix(sha256),
        },
    })
}

/// The stored reference of a digest and media type (for rows that hold only a digest).
pub fn blob_ref(conn: &Connection, sha256: &str, media_type: &str) -> StoreResult<BlobRef> {
    if !is_sha256_hex(sha256) {
        return Err(BlobError::MalformedDigest.into());
    }
    check_media_type(media_type)?;
    match stored_length(conn, sha256, media_type)? {
        Some(bytes) => Ok(BlobRef {
            sha256: sha256.to_string(),
            media_type: media_type.to_string(),
            bytes,
        }),
        None => Err(absent(conn, sha256, media_type)?.into()),
    }
}

/// Check a reference (digest, media type and length) against what is stored.
pub fn resolve_blob(conn: &Connection, reference: &BlobRef) -> StoreResult<BlobRef> {
    let stored = blob_ref(conn, &reference.sha256, &reference.media_type)?;
    if stored.bytes != reference.bytes {
        return Err(BlobError::LengthMismatch {
            expected: reference.bytes,
            found: stored.bytes,
        }
        .into());
    }
    Ok(stored)
}

/// Read at most `length` bytes from `offset` (shorter at the end of the content).
pub fn read_blob_part(conn: &Connection, reference: &BlobRef, offset: u64, length: usize) -> StoreResult<Vec<u8>> {
    if length > BLOB_PART_BYTES_MAX {
        return Err(BlobError::PartTooLarge { requested: length }.into());
    }
    let stored = resolve_blob(conn, reference)?;
    if offset > stored.bytes {
        return Err(BlobError::BadRange {
            offset,
            bytes: stored.bytes,
        }
        .into());
    }
    // SQLite's substr counts blob bytes from 1 and yields NULL for empty content.
    let part: Option<Vec<u8>> = conn
        .prepare_cached("SELECT substr(content, ?1, ?2) FROM blobs WHERE blob_hash = ?3 AND media_type = ?4")?
        .query_row(
            params![offset as i64 + 1, length as i64, stored.sha256, stored.media_type],
            |row| row.get(0),
        )?;
    let part = part.unwrap_or_default();
    let expected = (stored.bytes - offset).min(length as u64);
    if part.len() as u64 != expected {
        return Err(BlobError::LengthMismatch {
            expected,
            found: part.len() as u64,
        }
        .into());
    }
    Ok(part)
}

/// Read the whole value part by part and verify its length and digest.
pub fn read_blob_verified(conn: &Connection, reference: &BlobRef) -> StoreResult<Vec<u8>> {
    let stored = resolve_blob(conn, reference)?;
    let mut content = Vec::with_capacity(stored.bytes as usize);
    while (content.len() as u64) < stored.bytes {
        let part = read_blob_part(conn, &stored, content.len() as u64, BLOB_PART_BYTES_MAX)?;
        if part.is_empty() {
            break;
        }
        content.extend_from_slice(&part);
    }
    if content.len() as u64 != stored.bytes {
        return Err(BlobError::LengthMismatch {
            expected: stored.bytes,
            found: content.len() as u64,
        }
        .into());
    }
    if sha256_hex(&content) != stored.sha256 {
        return Err(BlobError::DigestMismatch.into());
    }
    Ok(content)
}

/// The media type of JSON values (outputs, errors, inputs, answers, contracts).
pub const JSON_MEDIA_TYPE: &str = "application/json";
/// The media type of a run's definition snapshot (canonical JSON, keyed by its digest).
pub const DEFINITION_MEDIA_TYPE: &str = "application/vnd.pi-workflows.definition+json";

/// Store a JSON value as canonical JSON of at most `bytes_max` bytes; returns its digest.
pub fn put_json(tx: &WriteTx<'_>, value: &serde_json::Value, bytes_max: usize) -> StoreResult<String> {
    let bytes = canonical_within(value, bytes_max)?;
    Ok(put_blob(tx, &bytes, JSON_MEDIA_TYPE)?.sha256)
}

fn canonical_within(value: &serde_json::Value, bytes_max: usize) -> StoreResult<Vec<u8>> {
    let bytes = crate::protocol::value_to_canonical_vec(value);
    if bytes.len() > bytes_max {
        return Err(super::StoreError::InvalidInput {
            what: "JSON value",
            detail: format!(
                "{} bytes is above the {bytes_max}-byte limit; store large data in files and return a path",
                bytes.len()
            ),
        });
    }
    Ok(bytes)
}

/// A step's output or error of at most this many bytes of canonical JSON is kept in its
/// attempt's row, not as a blob. Why: a blob's key is its random digest, so each new one
/// lands in a random leaf of the blobs' key index, and once that index is large every
/// commit writes (and the checkpoint copies again) a page per new value; small values are
/// most step results (docs/PERFORMANCE.md, thirty-second round).
pub const INLINE_JSON_BYTES_MAX: usize = 1024;

/// A JSON value an attempt's row refers to by digest: in the row itself (`inline`, its
/// canonical bytes) when small, else stored as a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptJson {
    pub sha256: String,
    pub inline: Option<Vec<u8>>,
}

impl KeptJson {
    /// A value already stored as a blob (an answer's receipt, a submission's payload).
    pub fn stored(sha256: String) -> Self {
        Self { sha256, inline: None }
    }
}

/// Keep a JSON value of at most `bytes_max` bytes of canonical JSON for an attempt's row:
/// inline up to [`INLINE_JSON_BYTES_MAX`], else as a blob.
pub fn keep_json(tx: &WriteTx<'_>, value: &serde_json::Value, bytes_max: usize) -> StoreResult<KeptJson> {
    let bytes = canonical_within(value, bytes_max)?;
    if bytes.len() <= INLINE_JSON_BYTES_MAX {
        return Ok(KeptJson {
            sha256: sha256_hex(&bytes),
            inline: Some(bytes),
        });
    }
    Ok(KeptJson::stored(put_blob(tx, &bytes, JSON_MEDIA_TYPE)?.sha256))
}

/// Check bytes kept in a row (`inline`) against the digest the row names: a row damaged on
/// the disk is refused, as a damaged blob is.
pub fn verify_inline(sha256: &str, inline: &[u8]) -> StoreResult<()> {
    if sha256_hex(inline) != sha256 {
        return Err(BlobError::DigestMismatch.into());
    }
    Ok(())
}

/// A JSON value kept in a row (`inline`), checked against its digest (`verify_inline`).
pub fn inline_json(sha256: &str, inline: &[u8]) -> StoreResult<serde_json::Value> {
    verify_inline(sha256, inline)?;
    parse_stored_json(inline)
}

fn parse_stored_json(bytes: &[u8]) -> StoreResult<serde_json::Value> {
    serde_json::from_slice(bytes).map_err(|err| super::StoreError::InvalidInput {
        what: "stored JSON value",
        detail: err.to_string(),
    })
}

/// Read a stored JSON value by digest (verified); `None` when absent.
pub fn read_json(conn: &Connection, sha256: &str) -> StoreResult<Option<serde_json::Value>> {
    let reference = match blob_ref(conn, sha256, JSON_MEDIA_TYPE) {
        Ok(reference) => reference,
        Err(super::StoreError::Blob(BlobError::NotFound { .. })) => return Ok(None),
        Err(err) => return Err(err),
    };
    let bytes = read_blob_verified(conn, &reference)?;
    Ok(Some(parse_stored_json(&bytes)?))
}

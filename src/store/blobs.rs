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

/// Store `content` under its SHA-256 (idempotent). The same bytes under another media type
/// are refused: a digest names one representation.
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
    if let Some(stored) = find_blob(tx.conn(), &reference.sha256)? {
        check_matches(&reference, &stored)?;
        return Ok(stored);
    }
    tx.conn()
        .prepare_cached(
            "INSERT INTO blobs (blob_hash, media_type, byte_length, content, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
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

fn find_blob(conn: &Connection, sha256: &str) -> StoreResult<Option<BlobRef>> {
    let found = conn
        .prepare_cached("SELECT media_type, byte_length FROM blobs WHERE blob_hash = ?1")?
        .query_row([sha256], |row| {
            Ok(BlobRef {
                sha256: sha256.to_string(),
                media_type: row.get(0)?,
                bytes: row.get::<_, i64>(1)? as u64,
            })
        })
        .optional()?;
    Ok(found)
}

fn check_matches(reference: &BlobRef, stored: &BlobRef) -> Result<(), BlobError> {
    if stored.media_type != reference.media_type {
        return Err(BlobError::MediaTypeMismatch {
            expected: reference.media_type.clone(),
            found: stored.media_type.clone(),
        });
    }
    if stored.bytes != reference.bytes {
        return Err(BlobError::LengthMismatch {
            expected: reference.bytes,
            found: stored.bytes,
        });
    }
    Ok(())
}

/// The stored facts of a digest (for readers that hold only a digest column).
pub fn blob_by_digest(conn: &Connection, sha256: &str) -> StoreResult<BlobRef> {
    if !is_sha256_hex(sha256) {
        return Err(BlobError::MalformedDigest.into());
    }
    let stored = find_blob(conn, sha256)?;
    Ok(stored.ok_or_else(|| BlobError::NotFound {
        sha256_prefix: digest_prefix(sha256),
    })?)
}

/// Check a reference against what is stored and return the stored facts.
pub fn resolve_blob(conn: &Connection, reference: &BlobRef) -> StoreResult<BlobRef> {
    if !is_sha256_hex(&reference.sha256) {
        return Err(BlobError::MalformedDigest.into());
    }
    check_media_type(&reference.media_type)?;
    let stored = blob_by_digest(conn, &reference.sha256)?;
    check_matches(reference, &stored)?;
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
    // SQLite's substr counts blob bytes from 1.
    let part: Vec<u8> = conn
        .prepare_cached("SELECT substr(content, ?1, ?2) FROM blobs WHERE blob_hash = ?3")?
        .query_row(params![offset as i64 + 1, length as i64, stored.sha256], |row| {
            row.get(0)
        })?;
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

//! Content-addressed blobs: parts of at most 512 KiB, verified whole reads, bounded errors.

mod common;

use pi_workflows::digest::sha256_hex;
use pi_workflows::store::StoreError;
use pi_workflows::store::blobs::{self, BLOB_PART_BYTES_MAX, BlobError, BlobRef};

const JSON: &str = "application/json";

fn blob_error(result: Result<impl std::fmt::Debug, StoreError>) -> BlobError {
    match result {
        Err(StoreError::Blob(err)) => err,
        other => panic!("expected a blob error, got {other:?}"),
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn large_content_reads_back_in_bounded_parts_and_verifies() {
    let t = common::open_store();
    let content = pattern(BLOB_PART_BYTES_MAX * 2 + 17);
    let stored = content.clone();
    let reference = t
        .store
        .write(move |tx| blobs::put_blob(tx, &stored, "application/octet-stream"))
        .expect("put");
    assert_eq!(reference.sha256, sha256_hex(&content));
    assert_eq!(reference.bytes, content.len() as u64);

    let whole = t
        .store
        .read(|conn| blobs::read_blob_verified(conn, &reference))
        .expect("verified read");
    assert_eq!(whole, content);
    let tail_ref = reference.clone();
    let tail = t
        .store
        .read(move |conn| blobs::read_blob_part(conn, &tail_ref, (BLOB_PART_BYTES_MAX * 2) as u64, BLOB_PART_BYTES_MAX))
        .expect("tail part");
    assert_eq!(tail, content[BLOB_PART_BYTES_MAX * 2..]);
    let same = content.clone();
    let again = t
        .store
        .write(move |tx| blobs::put_blob(tx, &same, "application/octet-stream"))
        .expect("idempotent");
    assert_eq!(again, reference);
}

#[test]
fn bad_references_and_ranges_get_bounded_errors() {
    let t = common::open_store();
    let reference = t
        .store
        .write(|tx| blobs::put_blob(tx, b"{\"a\":1}", JSON))
        .expect("put");

    let read_part = |reference: BlobRef, offset: u64, len: usize| {
        t.store
            .read(move |conn| blobs::read_blob_part(conn, &reference, offset, len))
    };
    assert_eq!(
        blob_error(read_part(reference.clone(), 0, BLOB_PART_BYTES_MAX + 1)),
        BlobError::PartTooLarge {
            requested: BLOB_PART_BYTES_MAX + 1
        }
    );
    assert_eq!(
        blob_error(read_part(reference.clone(), 8, 1)),
        BlobError::BadRange { offset: 8, bytes: 7 }
    );
    assert_eq!(
        read_part(reference.clone(), 7, 4).expect("empty read at the end"),
        Vec::<u8>::new()
    );
    assert_eq!(
        blob_error(read_part(reference.clone(), u64::MAX, 4)),
        BlobError::BadRange {
            offset: u64::MAX,
            bytes: 7
        }
    );

    let wrong_media = BlobRef {
        media_type: "text/plain".to_string(),
        ..reference.clone()
    };
    assert!(matches!(
        blob_error(read_part(wrong_media, 0, 4)),
        BlobError::MediaTypeMismatch { .. }
    ));
    let wrong_length = BlobRef {
        bytes: 99,
        ..reference.clone()
    };
    assert!(matches!(
        blob_error(read_part(wrong_length, 0, 4)),
        BlobError::LengthMismatch { .. }
    ));
    let missing = BlobRef {
        sha256: sha256_hex(b"never stored"),
        ..reference.clone()
    };
    assert!(matches!(
        blob_error(read_part(missing, 0, 4)),
        BlobError::NotFound { .. }
    ));
    let malformed = BlobRef {
        sha256: "../../etc/passwd".to_string(),
        ..reference.clone()
    };
    assert_eq!(blob_error(read_part(malformed, 0, 4)), BlobError::MalformedDigest);
    let bad_media = BlobRef {
        media_type: String::new(),
        ..reference.clone()
    };
    assert_eq!(blob_error(read_part(bad_media, 0, 4)), BlobError::BadMediaType);

    // The same bytes may also be stored as another representation; each reads back alone.
    let as_text = t
        .store
        .write(|tx| blobs::put_blob(tx, b"{\"a\":1}", "text/plain"))
        .expect("second representation");
    assert_eq!(as_text.sha256, reference.sha256);
    let text = t
        .store
        .read(move |conn| blobs::read_blob_verified(conn, &as_text))
        .expect("text read");
    assert_eq!(text, b"{\"a\":1}");
}

#[test]
fn empty_content_is_a_valid_blob() {
    let t = common::open_store();
    let reference = t
        .store
        .write(|tx| blobs::put_blob(tx, b"", "text/plain"))
        .expect("put empty");
    assert_eq!(reference.bytes, 0);
    let part_ref = reference.clone();
    let part = t
        .store
        .read(move |conn| blobs::read_blob_part(conn, &part_ref, 0, 16))
        .expect("empty part");
    assert!(part.is_empty());
    assert!(
        t.store
            .read(move |conn| blobs::read_blob_verified(conn, &reference))
            .expect("verified")
            .is_empty()
    );
}

#[test]
fn damaged_content_fails_verification() {
    let t = common::open_store();
    let reference = t
        .store
        .write(|tx| blobs::put_blob(tx, b"original bytes", "text/plain"))
        .expect("put");
    let digest = reference.sha256.clone();
    t.store
        .write(move |tx| {
            tx.conn().execute(
                "UPDATE blobs SET content = CAST('damaged bytes!' AS BLOB) WHERE blob_hash = ?1",
                [digest],
            )?;
            Ok(())
        })
        .expect("damage");
    let err = t
        .store
        .read(|conn| blobs::read_blob_verified(conn, &reference))
        .expect_err("damage detected");
    assert!(matches!(err, StoreError::Blob(BlobError::DigestMismatch)), "{err}");
}

/// A step's small output is kept in its attempt's row (no blob: a random digest key in the
/// blobs' index costs a page a value once the index is large), a larger one as a blob; both
/// come back as the same value, and a kept value that no longer matches its digest is
/// refused like a damaged blob.
#[test]
fn small_values_are_kept_inline_and_larger_ones_as_blobs() {
    use blobs::INLINE_JSON_BYTES_MAX;
    use serde_json::json;
    let t = common::open_store();
    // Canonical JSON `{"t":"…"}` is 8 bytes around the text.
    let at_limit = json!({"t": "x".repeat(INLINE_JSON_BYTES_MAX - 8)});
    let above = json!({"t": "x".repeat(INLINE_JSON_BYTES_MAX - 7)});
    let (small, large) = (at_limit.clone(), above.clone());
    let (inline, stored) = t
        .store
        .write(move |tx| {
            let inline = blobs::keep_json(tx, &small, usize::MAX)?;
            let stored = blobs::keep_json(tx, &large, usize::MAX)?;
            Ok((inline, stored))
        })
        .expect("kept");
    // The schema's checks bound the same columns by the same number.
    for column in ["output_inline", "error_inline"] {
        let check = format!("length({column}) <= {INLINE_JSON_BYTES_MAX}");
        assert!(
            pi_workflows::store::schema::SCHEMA_DDL.contains(&check),
            "schema.sql: {check}"
        );
    }
    let kept = inline.inline.clone().expect("a value at the limit is kept inline");
    assert_eq!(kept.len(), INLINE_JSON_BYTES_MAX);
    assert_eq!(inline.sha256, sha256_hex(&kept));
    assert_eq!(blobs::inline_json(&inline.sha256, &kept).expect("verified"), at_limit);
    assert!(stored.inline.is_none(), "one byte more is a blob");
    let (small_digest, large_digest) = (inline.sha256.clone(), stored.sha256.clone());
    let (small_blobs, large_value) = t
        .store
        .read(move |conn| {
            let small_blobs: i64 = conn.query_row(
                "SELECT count(*) FROM blobs WHERE blob_hash = ?1",
                [&small_digest],
                |row| row.get(0),
            )?;
            Ok((small_blobs, blobs::read_json(conn, &large_digest)?))
        })
        .expect("read");
    assert_eq!(small_blobs, 0, "an inline value stores no blob");
    assert_eq!(large_value, Some(above));
    let mut damaged = kept.clone();
    damaged[6] = b'y';
    assert_eq!(
        blob_error(blobs::inline_json(&inline.sha256, &damaged)),
        BlobError::DigestMismatch
    );
}

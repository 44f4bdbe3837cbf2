//! Node's code cache in a startup snapshot blob, and its removal (used by `snapshot.rs`).
//!
//! A blob built with `node --build-snapshot` ends with a code cache for every one of Node's
//! built-in modules (~320: the bytecode Node compiled of each while it built): more than half
//! of the blob (2.9 of 5.1 MB on Node 20.20, 3.3 of 6.8 MB on Node 22.23). A runner reads the
//! whole blob and copies each entry out at every start, yet compiles none of those modules:
//! the ones it uses were evaluated into the snapshot itself (a runner of the benchmark loads
//! no built-in module after its start). So the pool's blob keeps an empty code cache; a
//! module a workflow loads later compiles from Node's source, as without a snapshot.
//!
//! The layout (Node's `SnapshotData::ToBlob`, the same on Node 20 and 22): the code cache is
//! the last field, a count then that many entries, each the module's id and its code, every
//! length a little-endian `u64` before its bytes. The field starts at the first offset whose
//! count and entries reach exactly the blob's end (bytes before it that parsed so by chance
//! would have to lead into the real entries and match their count). A blob that does not end
//! so (another layout) is left whole; a stripped blob still has to pass the snapshot's check.
//!
//! Architecture Invariant: this never changes anything before the code cache's count: V8's
//! startup data and Node's other fields stay byte for byte.

/// Entries a code cache may have (Node has ~320 built-in modules).
const ENTRIES_MAX: u64 = 4_096;
/// The longest module id taken (Node's are under 64 bytes).
const ID_BYTES_MAX: u64 = 256;
/// Bytes of a length field.
const LENGTH_BYTES: usize = 8;

/// Where the code cache's count is in `blob`, and how many entries follow it; `None` when
/// the blob does not end with a code cache of at least one entry.
pub fn find(blob: &[u8]) -> Option<(usize, u64)> {
    // Each offset in turn as the count, the first whose entries end exactly at the end wins
    // (one pass over a few MB, once per build; most offsets fail at their first length).
    (0..blob.len().saturating_sub(LENGTH_BYTES)).find_map(|offset| {
        let count = read_length(blob, offset)?;
        if count == 0 || count > ENTRIES_MAX {
            return None;
        }
        (entries_end(blob, offset + LENGTH_BYTES, count) == Some(blob.len())).then_some((offset, count))
    })
}

/// The blob without its code cache's entries (an empty code cache in their place), or
/// `None` when it has none to remove.
pub fn strip(blob: &[u8]) -> Option<Vec<u8>> {
    let (offset, _) = find(blob)?;
    let mut stripped = Vec::with_capacity(offset + LENGTH_BYTES);
    stripped.extend_from_slice(&blob[..offset]);
    stripped.extend_from_slice(&0u64.to_le_bytes());
    debug_assert!(stripped.len() < blob.len());
    Some(stripped)
}

/// Whether `blob` ends with an empty code cache, as `strip` leaves it: a zero count last,
/// and no code cache with entries.
pub fn is_stripped(blob: &[u8]) -> bool {
    let zero_count_last = blob.len() >= LENGTH_BYTES && read_length(blob, blob.len() - LENGTH_BYTES) == Some(0);
    zero_count_last && find(blob).is_none()
}

/// Where `count` entries starting at `offset` end, if each is well formed and in bounds.
fn entries_end(blob: &[u8], mut offset: usize, count: u64) -> Option<usize> {
    for _ in 0..count {
        let id_len = read_length(blob, offset)?;
        if id_len == 0 || id_len > ID_BYTES_MAX {
            return None;
        }
        let id_start = offset + LENGTH_BYTES;
        let id = blob.get(id_start..id_start.checked_add(usize::try_from(id_len).ok()?)?)?;
        if !id.iter().all(|byte| byte.is_ascii_graphic()) {
            return None;
        }
        let code_len_at = id_start + id.len();
        let code_len = usize::try_from(read_length(blob, code_len_at)?).ok()?;
        offset = (code_len_at + LENGTH_BYTES).checked_add(code_len)?;
        if offset > blob.len() {
            return None;
        }
    }
    Some(offset)
}

fn read_length(blob: &[u8], offset: usize) -> Option<u64> {
    let bytes = blob.get(offset..offset.checked_add(LENGTH_BYTES)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &[u8], code: &[u8]) -> Vec<u8> {
        let mut bytes = (id.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(id);
        bytes.extend_from_slice(&(code.len() as u64).to_le_bytes());
        bytes.extend_from_slice(code);
        bytes
    }

    /// What precedes the code cache in a blob: any bytes, including some that look like
    /// lengths and ids.
    fn head() -> Vec<u8> {
        let mut head = b"\x19\xdaC\x01\x01".to_vec();
        head.extend_from_slice(&3u64.to_le_bytes());
        head.extend_from_slice(b"v8 startup data \x00\x01\x02 internal/url");
        head.extend(entry(b"fs", &[0xff; 5]));
        head
    }

    fn blob(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut blob = head();
        blob.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (id, code) in entries {
            blob.extend(entry(id, code));
        }
        blob
    }

    #[test]
    fn the_code_cache_is_found_at_the_end_and_only_it_is_removed() {
        let whole = blob(&[(b"internal/url", &[7; 40]), (b"internal/tty", &[0; 3]), (b"zlib", &[])]);
        assert_eq!(find(&whole), Some((head().len(), 3)));
        let stripped = strip(&whole).expect("a code cache to remove");
        assert_eq!(&stripped[..head().len()], &head()[..], "everything before it stays");
        assert_eq!(stripped.len(), head().len() + LENGTH_BYTES);
        assert!(is_stripped(&stripped));
        assert!(
            !is_stripped(&whole),
            "its last entry's empty code is not an empty cache"
        );
        assert_eq!(find(&stripped), None, "nothing left to remove");
        assert_eq!(strip(&stripped), None);
    }

    #[test]
    fn a_blob_that_does_not_end_with_a_code_cache_is_left_whole() {
        let whole = blob(&[(b"internal/url", &[7; 40]), (b"zlib", &[1, 2])]);
        let mut trailing = whole.clone();
        trailing.push(0);
        assert_eq!(strip(&trailing), None, "a field after it: another layout");
        let truncated = &whole[..whole.len() - 1];
        assert_eq!(strip(truncated), None, "cut short");

        let mut miscounted = head();
        miscounted.extend_from_slice(&3u64.to_le_bytes());
        miscounted.extend(entry(b"internal/url", &[7; 4]));
        miscounted.extend(entry(b"zlib", &[1]));
        assert_eq!(find(&miscounted), None, "a count that is not the entries'");

        let odd_id = blob(&[(b"internal url", &[7; 4])]);
        assert_eq!(find(&odd_id), None, "an id Node never has");
        assert_eq!(find(&[]), None);
        assert_eq!(find(&[1, 0, 0, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_count_beyond_the_bound_is_not_a_code_cache() {
        let mut huge = head();
        huge.extend_from_slice(&(ENTRIES_MAX + 1).to_le_bytes());
        assert_eq!(find(&huge), None);
    }
}

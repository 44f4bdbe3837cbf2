//! SHA-256 digests as lowercase hex, the one digest format of the state store and protocols.

use sha2::{Digest, Sha256};

/// Length of a lowercase hex SHA-256 digest.
pub const SHA256_HEX_LEN: usize = 64;

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

/// Lowercase hex encoding (sha2 0.11 no longer formats digests itself).
pub fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
    out
}

/// True when `text` has the shape of a lowercase hex SHA-256 digest.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == SHA256_HEX_LEN && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `bytes` random bytes as lowercase hex (IDs, epochs); `None` without OS randomness.
pub fn random_hex(bytes: usize) -> Option<String> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).ok()?;
    Some(hex_lower(&buffer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_sha256_hex(&sha256_hex(b"")));
        assert!(!is_sha256_hex("ABC"));
        assert!(!is_sha256_hex(&"g".repeat(SHA256_HEX_LEN)));
    }
}

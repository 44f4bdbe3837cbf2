//! The bot token: read once from its file, held in memory only, and scrubbed from any text
//! that leaves the process.
//!
//! The token is part of every Bot API URL (`/bot<TOKEN>/method`), so a formatted URL or an
//! HTTP library error would carry it. The rest of the crate never formats either; [`Redactor`]
//! is the second line of defence for logs and frames.

use std::borrow::Cow;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use thiserror::Error;

/// Largest token file, in bytes (a Telegram token is about 46).
pub const TOKEN_FILE_BYTES_MAX: u64 = 256;
/// Mode bits that must be clear: nobody but the owner may read or write the file.
pub const TOKEN_FILE_FOREIGN_MODE_BITS: u32 = 0o077;
/// Shortest secret part (after `:`) accepted, in characters.
pub const TOKEN_SECRET_CHARS_MIN: usize = 8;
/// What replaces the token (or its secret part) in redacted text.
pub const REDACTED: &str = "[redacted]";

/// A bot token. `Debug` never shows it and it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct BotToken(String);

impl fmt::Debug for BotToken {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("BotToken(<redacted>)")
    }
}

impl BotToken {
    /// Checks the shape of a token: `<bot id digits>:<secret of [A-Za-z0-9_-]>`. The shape also
    /// keeps the token safe to put in a URL path as it is.
    ///
    /// # Errors
    ///
    /// [`TokenError::Malformed`] (the message never shows the text).
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let text = text.trim();
        let Some((bot_id, secret)) = text.split_once(':') else {
            return Err(TokenError::Malformed);
        };
        let id_ok = !bot_id.is_empty() && bot_id.bytes().all(|byte| byte.is_ascii_digit());
        let secret_ok = secret.len() >= TOKEN_SECRET_CHARS_MIN
            && secret
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        if id_ok && secret_ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(TokenError::Malformed)
        }
    }

    /// The token itself: only for building a request path.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

/// The token file cannot be used. Messages name the file and the problem, never its content.
#[derive(Debug, Error)]
pub enum TokenError {
    /// The file cannot be opened or read.
    #[error("cannot read the token file {path}: {kind}")]
    Io {
        /// The path from the launch envelope.
        path: String,
        /// What failed (an `io::ErrorKind`, no content).
        kind: io::ErrorKind,
    },
    /// Not a regular file (a directory, FIFO, device, …).
    #[error("the token file {path} is not a regular file")]
    NotRegular {
        /// The path.
        path: String,
    },
    /// Readable or writable by group or others.
    #[error(
        "the token file {path} has mode {mode:04o}: group and others must have no access; \
         run chmod 600 on it"
    )]
    Permissions {
        /// The path.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Owned by another user.
    #[error("the token file {path} belongs to another user (uid {owner}); it must be yours")]
    Owner {
        /// The path.
        path: String,
        /// The owner's uid.
        owner: u32,
    },
    /// Larger than [`TOKEN_FILE_BYTES_MAX`].
    #[error("the token file {path} is larger than {TOKEN_FILE_BYTES_MAX} bytes")]
    TooLarge {
        /// The path.
        path: String,
    },
    /// The content is not one bot token.
    #[error("the token file does not hold one bot token (expected <digits>:<secret>)")]
    Malformed,
}

/// Reads the token from `path`: a regular file of this user, mode 0600 or stricter, at most
/// [`TOKEN_FILE_BYTES_MAX`] bytes, holding one token (surrounding whitespace trimmed).
///
/// # Errors
///
/// [`TokenError`] naming the file and the problem.
pub fn read_token_file(path: &Path) -> Result<BotToken, TokenError> {
    let shown = path.display().to_string();
    let io_error = |error: io::Error| TokenError::Io {
        path: shown.clone(),
        kind: error.kind(),
    };
    // A first look before opening: opening a FIFO for reading could block.
    if !fs::metadata(path).map_err(io_error)?.is_file() {
        return Err(TokenError::NotRegular { path: shown });
    }
    let file = open_nonblocking(path).map_err(io_error)?;
    // The checks that count are on the opened file, so a swap after the first look is seen.
    let metadata = file.metadata().map_err(io_error)?;
    check_metadata(&shown, &metadata)?;
    let mut bytes = Vec::new();
    file.take(TOKEN_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > TOKEN_FILE_BYTES_MAX {
        return Err(TokenError::TooLarge { path: shown });
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| TokenError::Malformed)?;
    BotToken::parse(text)
}

fn open_nonblocking(path: &Path) -> io::Result<File> {
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let flags = i32::try_from(flags.bits()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    OpenOptions::new().read(true).custom_flags(flags).open(path)
}

fn check_metadata(shown: &str, metadata: &fs::Metadata) -> Result<(), TokenError> {
    if !metadata.is_file() {
        return Err(TokenError::NotRegular { path: shown.to_owned() });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & TOKEN_FILE_FOREIGN_MODE_BITS != 0 {
        return Err(TokenError::Permissions {
            path: shown.to_owned(),
            mode,
        });
    }
    let me = rustix::process::geteuid().as_raw();
    if metadata.uid() != me {
        return Err(TokenError::Owner {
            path: shown.to_owned(),
            owner: metadata.uid(),
        });
    }
    if metadata.len() > TOKEN_FILE_BYTES_MAX {
        return Err(TokenError::TooLarge { path: shown.to_owned() });
    }
    Ok(())
}

/// Replaces the token in text: the whole token, its URL-encoded spelling and its secret part
/// alone (the bot id before `:` is public: `getMe` tells anyone).
#[derive(Clone)]
pub struct Redactor {
    needles: Vec<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Redactor(<redacted>)")
    }
}

impl Redactor {
    /// A redactor for `token`.
    #[must_use]
    pub fn new(token: &BotToken) -> Self {
        let full = token.expose().to_owned();
        let encoded = full.replace(':', "%3A");
        let mut needles = vec![full, encoded];
        if let Some((_, secret)) = token.expose().split_once(':') {
            needles.push(secret.to_owned());
        }
        Self { needles }
    }

    /// `text` with every occurrence of the token replaced by [`REDACTED`].
    #[must_use]
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        // Longest needles first, so the whole token is replaced before its secret part.
        let mut out = Cow::Borrowed(text);
        for needle in &self.needles {
            if out.contains(needle.as_str()) {
                out = Cow::Owned(out.replace(needle.as_str(), REDACTED));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    const TOKEN: &str = "123456:CANARY-TOKEN-abcdefghijkl";

    fn token_file(mode: u32, content: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        let mut file = File::create(&path).expect("create");
        file.write_all(content.as_bytes()).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        (dir, path)
    }

    #[test]
    fn reads_a_private_token_file_and_trims() {
        let (_dir, path) = token_file(0o600, &format!("  {TOKEN}\n"));
        let token = read_token_file(&path).expect("token");
        assert_eq!(token.expose(), TOKEN);
        assert_eq!(format!("{token:?}"), "BotToken(<redacted>)");
    }

    #[test]
    fn refuses_group_or_world_access_without_showing_the_token() {
        let (_dir, path) = token_file(0o644, TOKEN);
        let error = read_token_file(&path).expect_err("0644");
        let message = error.to_string();
        assert!(message.contains("0644") && message.contains("chmod 600"), "{message}");
        assert!(!message.contains("CANARY"), "{message}");
        let (_dir, path) = token_file(0o620, TOKEN);
        assert!(matches!(read_token_file(&path), Err(TokenError::Permissions { .. })));
    }

    #[test]
    fn refuses_directories_large_files_and_bad_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(matches!(
            read_token_file(dir.path()),
            Err(TokenError::NotRegular { .. })
        ));
        let (_dir, path) = token_file(0o600, &"1".repeat(300));
        assert!(matches!(read_token_file(&path), Err(TokenError::TooLarge { .. })));
        let (_dir, path) = token_file(0o600, "not a token");
        assert!(matches!(read_token_file(&path), Err(TokenError::Malformed)));
        let missing = dir.path().join("missing");
        assert!(matches!(read_token_file(&missing), Err(TokenError::Io { .. })));
    }

    #[test]
    fn token_shape() {
        assert!(BotToken::parse("1:abcdefgh").is_ok());
        assert!(BotToken::parse("1:abc/defgh").is_err());
        assert!(BotToken::parse(":abcdefgh").is_err());
        assert!(BotToken::parse("12:short").is_err());
        assert!(BotToken::parse("12 :abcdefgh").is_err());
    }

    #[test]
    fn redacts_every_spelling() {
        let token = BotToken::parse(TOKEN).expect("token");
        let redactor = Redactor::new(&token);
        let text =
            format!("GET /bot{TOKEN}/getMe and /bot123456%3ACANARY-TOKEN-abcdefghijkl/x and CANARY-TOKEN-abcdefghijkl");
        let redacted = redactor.redact(&text);
        assert!(!redacted.contains("CANARY"), "{redacted}");
        assert_eq!(redactor.redact("nothing here"), "nothing here");
    }
}

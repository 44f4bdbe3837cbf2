//! The adapter's process exit codes (BSD `sysexits.h` values), so a supervisor can tell a
//! configuration problem (do not restart until the operator fixes it) from a transient one.

use crate::payload::ExitReason;

/// Stopped as asked, or its standard input ended.
pub const EXIT_OK: i32 = 0;
/// The server sent an oversized or malformed frame (`EX_DATAERR`).
pub const EXIT_PROTOCOL_VIOLATION: i32 = 65;
/// Telegram could not be reached within the startup retries (`EX_UNAVAILABLE`).
pub const EXIT_API_UNREACHABLE: i32 = 69;
/// An internal error: a bug (`EX_SOFTWARE`).
pub const EXIT_INTERNAL: i32 = 70;
/// Writing to standard output failed: the server is gone (`EX_IOERR`).
pub const EXIT_OUTPUT_FAILED: i32 = 74;
/// A bad launch envelope or token file, or Telegram refused the token (`EX_CONFIG`).
pub const EXIT_CONFIG: i32 = 78;

impl ExitReason {
    /// The exit code that follows a `channel.exiting` with this reason.
    #[must_use]
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Requested | Self::StdinClosed => EXIT_OK,
            Self::CredentialRejected => EXIT_CONFIG,
            Self::ApiUnreachable => EXIT_API_UNREACHABLE,
            Self::ProtocolViolation => EXIT_PROTOCOL_VIOLATION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_code() {
        assert_eq!(ExitReason::Requested.exit_code(), 0);
        assert_eq!(ExitReason::StdinClosed.exit_code(), 0);
        assert_eq!(ExitReason::CredentialRejected.exit_code(), 78);
        assert_eq!(ExitReason::ApiUnreachable.exit_code(), 69);
        assert_eq!(ExitReason::ProtocolViolation.exit_code(), 65);
    }
}

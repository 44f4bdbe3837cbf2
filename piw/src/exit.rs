//! Exit codes of `piw` (docs/PIW.md).

pub const FAILURE: u8 = 1;
/// Bad arguments or a malformed config file.
pub const USAGE: u8 = 2;
/// No server answered (or it could not be started).
pub const UNAVAILABLE: u8 = 3;
/// The server sent something piw cannot read, or runs another version.
pub const PROTOCOL: u8 = 4;
/// The server has no such run.
pub const NOT_FOUND: u8 = 5;
/// `--once` saw no complete view within `--timeout-ms`.
pub const TIMED_OUT: u8 = 6;

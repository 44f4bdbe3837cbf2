//! `pi-workflows-telegram`: the Telegram channel adapter child. Configured only by its launch
//! envelope (`PI_WORKFLOWS_CHANNEL_LAUNCH`); speaks the channel protocol on stdin/stdout and
//! logs to stderr.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = channel_telegram::run();
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

//! The write half a connection's response writer and its subscription forwarders share,
//! and the one bounded way to write a message to it.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::protocol::{ClientMessage, encode_owned_client_message};
use crate::server::socket;

/// A client that does not take a message within this time is disconnected.
pub const WRITE_TIMEOUT_MS: u64 = 10_000;

/// The write half every writer of one connection shares (responses and events).
pub type SharedWriter = Arc<tokio::sync::Mutex<socket::WriteHalf>>;

/// Write one message to a shared writer, giving up after [`WRITE_TIMEOUT_MS`] — waiting for
/// the writer included. A write given up may have been cut; every caller then closes the
/// connection, so a cut frame is never followed by another.
pub async fn write_shared(writer: &SharedWriter, message: ClientMessage) -> Result<(), ()> {
    let bytes = encode_owned_client_message(message).map_err(|err| {
        tracing::warn!(error = %err, "client message could not be encoded");
    })?;
    let write = async {
        let mut writer = writer.lock().await;
        writer.write_all(&bytes).await
    };
    match tokio::time::timeout(Duration::from_millis(WRITE_TIMEOUT_MS), write).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

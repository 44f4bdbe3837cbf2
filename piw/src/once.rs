//! `piw <runId> --once`: wait for the run's view (and its referenced definition), draw one
//! plain 120×40 frame and print it. Every failure that leaves no frame is its own exit
//! code, so scripts can tell an absent server from an unknown run or a timeout.

use std::time::Duration;

use pi_workflows::protocol::{JsonObject, OpaqueId, Operation, Outcome};
use serde_json::Value;

use crate::connection::client::{Client, ClientError, accepted};
use crate::connection::content::ContentRef;
use crate::connection::session::{self, ContentState, Link, Update};
use crate::connection::transport::Endpoint;
use crate::ui::app::App;
use crate::ui::text::{ONCE_COLUMNS, ONCE_ROWS, buffer_text, render};
use crate::ui::theme::Theme;

/// The default wait for the whole of `--once`.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum OnceError {
    #[error("{0}")]
    Unavailable(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("no run {0} on this server")]
    NotFound(String),
    #[error("no complete view within {0} ms")]
    TimedOut(u64),
}

impl OnceError {
    /// The process exit code (docs/PIW.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Unavailable(_) => crate::exit::UNAVAILABLE,
            Self::Protocol(_) => crate::exit::PROTOCOL,
            Self::NotFound(_) => crate::exit::NOT_FOUND,
            Self::TimedOut(_) => crate::exit::TIMED_OUT,
        }
    }
}

impl From<ClientError> for OnceError {
    fn from(err: ClientError) -> Self {
        match err {
            ClientError::Protocol(_) | ClientError::VersionMismatch { .. } => Self::Protocol(err.to_string()),
            _ => Self::Unavailable(err.to_string()),
        }
    }
}

pub struct OnceOptions {
    pub endpoint: Endpoint,
    pub client_id: OpaqueId,
    pub run_id: String,
    pub timeout_ms: u64,
    pub theme: Theme,
}

/// The frame's text.
pub async fn once(options: OnceOptions) -> Result<String, OnceError> {
    let timeout = Duration::from_millis(options.timeout_ms);
    tokio::time::timeout(timeout, frame(&options))
        .await
        .map_err(|_| OnceError::TimedOut(options.timeout_ms))?
}

async fn frame(options: &OnceOptions) -> Result<String, OnceError> {
    let (client, _events) = Client::connect(&options.endpoint, options.client_id.clone()).await?;
    let response = client
        .read(Operation::ViewRunGet, Some(&options.run_id), JsonObject::new())
        .await?;
    let document = match accepted(&response) {
        Ok(receipt) => receipt
            .get("view")
            .cloned()
            .ok_or_else(|| OnceError::Protocol("no view".into()))?,
        Err(refusal) if refusal.outcome == Outcome::NotFound => {
            return Err(OnceError::NotFound(options.run_id.clone()));
        }
        Err(refusal) => return Err(OnceError::Protocol(refusal.to_string())),
    };
    let (definition, full_reason) = hydrate_all(&client, &options.run_id, &document).await?;
    let mut app = App::new(options.theme.clone(), Some(&options.run_id));
    app.apply(Update::Link(Link::Connected));
    app.apply(Update::View {
        document,
        definition,
        full_reason,
    });
    Ok(buffer_text(&render(&app, ONCE_COLUMNS, ONCE_ROWS)))
}

async fn hydrate_all(
    client: &Client,
    run_id: &str,
    document: &Value,
) -> Result<(ContentState, Option<ContentState>), OnceError> {
    let definition = match ContentRef::from_value(&document["workflow"]["definition"]) {
        None => ContentState::Failed("the view names no workflow definition".into()),
        Some(reference) if Some(reference.digest.as_str()) != document["workflow"]["definitionDigest"].as_str() => {
            ContentState::Failed("the definition reference is not the run's definition".into())
        }
        Some(reference) => session::hydrate(client, run_id, &reference, &mut None).await?,
    };
    let full_reason = match ContentRef::from_value(&document["display"]["reasonContent"]) {
        None => None,
        Some(reference) => Some(session::hydrate(client, run_id, &reference, &mut None).await?),
    };
    Ok((definition, full_reason))
}

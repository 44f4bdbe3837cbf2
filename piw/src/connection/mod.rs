//! Talking to the server: transports (Unix socket or `piw serve` WebSocket), the async
//! client.v1 client, referenced content, starting the local server, and the live session.

pub mod client;
pub mod content;
pub mod session;
pub mod start;
pub mod transport;

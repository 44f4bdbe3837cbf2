//! The few Bot API objects the adapter reads. Unknown fields are skipped: Telegram adds fields
//! to its objects over time.

use serde::Deserialize;

/// Every Bot API answer: `{ok, result}` or `{ok: false, error_code, description, parameters}`.
#[derive(Debug, Deserialize)]
pub struct ApiEnvelope {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The method's result.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// Telegram's description of a failure (never logged; bounded into settle messages).
    #[serde(default)]
    pub description: Option<String>,
    /// Extra failure details.
    #[serde(default)]
    pub parameters: Option<ResponseParameters>,
}

/// `ResponseParameters`.
#[derive(Debug, Deserialize)]
pub struct ResponseParameters {
    /// Seconds to wait before repeating a rate-limited request.
    #[serde(default)]
    pub retry_after: Option<u64>,
}

/// `User`.
#[derive(Debug, Clone, Deserialize)]
pub struct User {
    /// The user (or bot) id.
    pub id: i64,
    /// The username, if any.
    #[serde(default)]
    pub username: Option<String>,
}

/// `Chat` (only its id).
#[derive(Debug, Clone, Deserialize)]
pub struct Chat {
    /// The chat id.
    pub id: i64,
}

/// `Message` (the fields the adapter reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// The message id, unique in its chat.
    pub message_id: i64,
    /// The sender (absent for channel posts).
    #[serde(default)]
    pub from: Option<User>,
    /// The chat.
    pub chat: Chat,
    /// The text, if any.
    #[serde(default)]
    pub text: Option<String>,
    /// The message this one replies to.
    #[serde(default)]
    pub reply_to_message: Option<Box<Message>>,
}

/// The message a callback button belongs to (`MaybeInaccessibleMessage`: only id and chat).
#[derive(Debug, Clone, Deserialize)]
pub struct CallbackMessage {
    /// The message id.
    pub message_id: i64,
    /// The chat.
    pub chat: Chat,
}

/// `CallbackQuery`.
#[derive(Debug, Clone, Deserialize)]
pub struct CallbackQuery {
    /// The id to answer with `answerCallbackQuery`.
    pub id: String,
    /// Who pressed.
    pub from: User,
    /// The message of the button (absent for inline-mode messages).
    #[serde(default)]
    pub message: Option<CallbackMessage>,
    /// The button's `callback_data`.
    #[serde(default)]
    pub data: Option<String>,
}

/// `Update` (the two kinds the adapter asks for).
#[derive(Debug, Clone, Deserialize)]
pub struct Update {
    /// The update id.
    pub update_id: i64,
    /// A new message.
    #[serde(default)]
    pub message: Option<Message>,
    /// A button press.
    #[serde(default)]
    pub callback_query: Option<CallbackQuery>,
}

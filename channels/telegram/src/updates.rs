//! Updates from the long poll: button presses and replies to prompts become `channel.answer`s.
//!
//! The adapter forwards every valid press and reply (a second press too): the server decides
//! which answer wins. Anything else is ignored with one safe log line (a reason and its count)
//! and, for a press, a short neutral callback answer.

use crate::adapter::{Adapter, Flow, Step};
use crate::outbox::OutboxError;
use crate::render::parse_callback_data;
use crate::telegram::{CallbackQuery, Message as TgMessage, Update};
use channel_protocol::limits::valid_nonce;
use channel_protocol::payload::{Answer, AnswerFrom, Message, Stage};
use serde_json::Value;
use std::io::Write;

/// Callback answer for a forwarded press.
pub const CALLBACK_RECEIVED: &str = "Received";
/// Callback answer for a press that does not count (who, where, or what was pressed).
pub const CALLBACK_NOT_ALLOWED: &str = "Not allowed";
/// Callback answer for a press on a message the adapter no longer answers for.
pub const CALLBACK_CLOSED: &str = "This decision is closed";

impl<W: Write> Adapter<W> {
    pub(crate) fn on_updates(&mut self, updates: Vec<Value>) -> Step {
        for raw in updates {
            let Ok(update) = serde_json::from_value::<Update>(raw) else {
                self.ignore("unreadableUpdate");
                continue;
            };
            if let Some(query) = &update.callback_query {
                self.on_callback(update.update_id, query)?;
            } else if let Some(message) = &update.message {
                self.on_message(update.update_id, message)?;
            }
        }
        Ok(Flow::Continue)
    }

    fn on_callback(&mut self, update_id: i64, query: &CallbackQuery) -> Result<(), OutboxError> {
        match self.press_answer(update_id, query) {
            Ok((answer, revision)) => {
                self.outbox.send(&Message::Answer(answer), revision, None)?;
                tracing::info!(kind = "press", "answer forwarded");
                self.answer_callback(query, CALLBACK_RECEIVED);
            }
            Err((reason, text)) => {
                self.ignore(reason);
                self.answer_callback(query, text);
            }
        }
        Ok(())
    }

    /// The answer a press makes, with the message's channel revision; or why it does not count
    /// and what to tell the person.
    fn press_answer(
        &mut self,
        update_id: i64,
        query: &CallbackQuery,
    ) -> Result<(Answer, u64), (&'static str, &'static str)> {
        let Some(message) = &query.message else {
            return Err(("noMessage", CALLBACK_NOT_ALLOWED));
        };
        let chat_id = message.chat.id;
        // Who and where first: a stranger learns nothing about the data.
        if !self.user_allowed(query.from.id) {
            return Err(("userNotAllowed", CALLBACK_NOT_ALLOWED));
        }
        if !self.chat_allowed(chat_id) {
            return Err(("chatNotAllowed", CALLBACK_NOT_ALLOWED));
        }
        let parsed = query.data.as_deref().and_then(parse_callback_data);
        let Some((nonce, index)) = parsed.filter(|(nonce, _)| valid_nonce(nonce)) else {
            return Err(("malformedData", CALLBACK_NOT_ALLOWED));
        };
        let Some(tracked) = self.registry.message(nonce) else {
            return Err(("unknownOrClosed", CALLBACK_CLOSED));
        };
        // A message tracked without its reference (a send an operator confirmed) is the one
        // its nonce is first pressed on, in its chat; the server learns it from the answer.
        let learned = tracked.message_id.is_none().then_some(message.message_id);
        if tracked.chat_id != chat_id || tracked.message_id.is_some_and(|id| id != message.message_id) {
            return Err(("wrongMessage", CALLBACK_NOT_ALLOWED));
        }
        let Some(choice) = tracked.choices.get(index) else {
            return Err(("badChoiceIndex", CALLBACK_NOT_ALLOWED));
        };
        let stage = if choice.input_max_length.is_some() {
            Stage::WantsText
        } else {
            Stage::Final
        };
        let answer = Answer {
            channel_message_id: tracked.channel_message_id.clone(),
            choice_id: choice.id.clone(),
            text: None,
            stage,
            from: AnswerFrom {
                user_id: query.from.id,
                chat_id,
            },
            update_id,
            telegram_message_id: learned,
        };
        let revision = tracked.revision;
        if let Some(message_id) = learned {
            self.registry.pin(nonce, message_id);
        }
        Ok((answer, revision))
    }

    fn answer_callback(&self, query: &CallbackQuery, text: &str) {
        if self.api.answer_callback_query(&query.id, text).is_err() {
            tracing::warn!("answerCallbackQuery failed");
        }
    }

    fn on_message(&mut self, update_id: i64, message: &TgMessage) -> Result<(), OutboxError> {
        let Some(reply_to) = &message.reply_to_message else {
            // Chat traffic that is not for the adapter: not worth a line each.
            return Ok(());
        };
        let chat_id = message.chat.id;
        let Some(prompt) = self.registry.prompt(chat_id, reply_to.message_id).cloned() else {
            return Ok(());
        };
        let Some(user_id) = message.from.as_ref().map(|user| user.id) else {
            self.ignore("noSender");
            return Ok(());
        };
        if !self.user_allowed(user_id) || !self.chat_allowed(chat_id) {
            self.ignore("replyNotAllowed");
            return Ok(());
        }
        let Some(tracked) = self.registry.message(&prompt.nonce) else {
            self.ignore("replyClosed");
            return Ok(());
        };
        let (channel_message_id, revision) = (tracked.channel_message_id.clone(), tracked.revision);
        let text = message.text.as_deref();
        let usable = text.filter(|text| !text.is_empty() && text.chars().count() <= prompt.max_length as usize);
        // A reply that cannot be the text asks for it again: forwarded as a press on the
        // choice (`wantsText`), so the server records a new prompt (which states the limit) as
        // a managed effect like every other message; the adapter sends nothing by itself.
        let (stage, text) = match usable {
            Some(text) => (Stage::Final, Some(text.to_owned())),
            None => {
                self.ignore(if text.is_none() {
                    "replyWithoutText"
                } else {
                    "replyTooLong"
                });
                (Stage::WantsText, None)
            }
        };
        let answer = Answer {
            channel_message_id,
            choice_id: prompt.choice_id.clone(),
            text,
            stage,
            from: AnswerFrom { user_id, chat_id },
            update_id,
            telegram_message_id: None,
        };
        self.outbox.send(&Message::Answer(answer), revision, None)?;
        tracing::info!(kind = "reply", "answer forwarded");
        Ok(())
    }
}

//! The open messages the adapter answers for, and the prompts waiting for a reply. Memory only:
//! after a restart the server tells the new adapter what is open (`track`).
//!
//! Both maps are bounded. A full message table refuses new messages (an open decision silently
//! losing its buttons would be worse); a full prompt table forgets its oldest prompt (the person
//! can press the button again to get a new one).

use channel_protocol::payload::{Choice, Presentation};
use std::collections::{HashMap, VecDeque};

/// Most open messages tracked at once.
pub const TRACKED_MESSAGES_MAX: usize = 1024;
/// Most prompts waiting for a reply at once.
pub const PENDING_PROMPTS_MAX: usize = 1024;

/// One choice as the adapter needs it: its id and, for an input choice, the reply bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedChoice {
    /// The choice id (only ever sent to the server).
    pub id: String,
    /// `maxLength` of its input, when it has one.
    pub input_max_length: Option<u32>,
}

/// An open message whose buttons count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedMessage {
    /// The server's channel message id.
    pub channel_message_id: String,
    /// Where it is.
    pub chat_id: i64,
    /// Which message it is; `None` for a send an operator confirmed without its reference
    /// (the first press in its chat tells, see [`Registry::pin`]).
    pub message_id: Option<i64>,
    /// The newest channel revision applied for it.
    pub revision: u64,
    /// Its choices, in button order.
    pub choices: Vec<TrackedChoice>,
}

/// Choices of a presentation in button order.
#[must_use]
pub fn tracked_choices(presentation: &Presentation) -> Vec<TrackedChoice> {
    presentation.choices.iter().map(tracked_choice).collect()
}

fn tracked_choice(choice: &Choice) -> TrackedChoice {
    TrackedChoice {
        id: choice.id.clone(),
        input_max_length: choice.input.as_ref().map(|input| input.max_length),
    }
}

/// A prompt waiting for its reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPrompt {
    /// The nonce of the message the prompt is for.
    pub nonce: String,
    /// The input choice.
    pub choice_id: String,
    /// The reply bound, in characters.
    pub max_length: u32,
}

/// Why a message cannot be tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackRefusal {
    /// [`TRACKED_MESSAGES_MAX`] messages are open.
    Full,
    /// The nonce belongs to another channel message.
    NonceTaken,
}

/// Open messages (by nonce) and pending prompts (by chat and prompt message).
#[derive(Debug, Default)]
pub struct Registry {
    by_nonce: HashMap<String, TrackedMessage>,
    nonce_of: HashMap<String, String>,
    prompts: HashMap<(i64, i64), PendingPrompt>,
    prompt_order: VecDeque<(i64, i64)>,
}

impl Registry {
    /// The open message of `nonce`.
    #[must_use]
    pub fn message(&self, nonce: &str) -> Option<&TrackedMessage> {
        self.by_nonce.get(nonce)
    }

    /// The open message of a channel message id, with its nonce.
    #[must_use]
    pub fn by_channel_message(&self, channel_message_id: &str) -> Option<(&str, &TrackedMessage)> {
        let nonce = self.nonce_of.get(channel_message_id)?;
        self.by_nonce.get(nonce).map(|message| (nonce.as_str(), message))
    }

    /// Whether `nonce` could be tracked for `channel_message_id` now.
    ///
    /// # Errors
    ///
    /// [`TrackRefusal`] when it could not.
    pub fn can_track(&self, nonce: &str, channel_message_id: &str) -> Result<(), TrackRefusal> {
        match self.by_nonce.get(nonce) {
            Some(message) if message.channel_message_id == channel_message_id => Ok(()),
            Some(_) => Err(TrackRefusal::NonceTaken),
            None if self.nonce_of.contains_key(channel_message_id) => Ok(()),
            None if self.by_nonce.len() >= TRACKED_MESSAGES_MAX => Err(TrackRefusal::Full),
            None => Ok(()),
        }
    }

    /// Tracks (or re-tracks) `message` under `nonce`. A channel message has one nonce: an
    /// earlier nonce of the same channel message is dropped with its prompts.
    ///
    /// # Errors
    ///
    /// [`TrackRefusal`] as [`Self::can_track`].
    pub fn track(&mut self, nonce: &str, message: TrackedMessage) -> Result<(), TrackRefusal> {
        self.can_track(nonce, &message.channel_message_id)?;
        if let Some(old_nonce) = self.nonce_of.get(&message.channel_message_id).cloned()
            && old_nonce != nonce
        {
            self.forget_nonce(&old_nonce);
        }
        self.nonce_of
            .insert(message.channel_message_id.clone(), nonce.to_owned());
        self.by_nonce.insert(nonce.to_owned(), message);
        Ok(())
    }

    /// Stops answering for a channel message (it was closed), with its prompts.
    pub fn untrack(&mut self, channel_message_id: &str) {
        if let Some(nonce) = self.nonce_of.get(channel_message_id).cloned() {
            self.forget_nonce(&nonce);
        }
    }

    fn forget_nonce(&mut self, nonce: &str) {
        if let Some(message) = self.by_nonce.remove(nonce) {
            self.nonce_of.remove(&message.channel_message_id);
        }
        self.prompts.retain(|_, prompt| prompt.nonce != nonce);
        let prompts = &self.prompts;
        self.prompt_order.retain(|key| prompts.contains_key(key));
    }

    /// The message a reference-less tracked message turned out to be (its first press).
    pub fn pin(&mut self, nonce: &str, message_id: i64) {
        if let Some(message) = self.by_nonce.get_mut(nonce) {
            message.message_id.get_or_insert(message_id);
        }
    }

    /// Remembers a prompt message; the oldest prompt is forgotten when the table is full.
    pub fn add_prompt(&mut self, chat_id: i64, prompt_message_id: i64, prompt: PendingPrompt) {
        let key = (chat_id, prompt_message_id);
        if self.prompts.insert(key, prompt).is_some() {
            return;
        }
        self.prompt_order.push_back(key);
        while self.prompt_order.len() > PENDING_PROMPTS_MAX {
            if let Some(oldest) = self.prompt_order.pop_front() {
                self.prompts.remove(&oldest);
            }
        }
    }

    /// The prompt a reply in `chat_id` to `reply_to_message_id` answers.
    #[must_use]
    pub fn prompt(&self, chat_id: i64, reply_to_message_id: i64) -> Option<&PendingPrompt> {
        self.prompts.get(&(chat_id, reply_to_message_id))
    }

    /// How many messages are open.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_nonce.len()
    }

    /// Whether no message is open.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_nonce.is_empty()
    }

    /// How many prompts wait.
    #[must_use]
    pub fn prompt_count(&self) -> usize {
        self.prompts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, message_id: i64) -> TrackedMessage {
        TrackedMessage {
            channel_message_id: id.to_owned(),
            chat_id: 5,
            message_id: Some(message_id),
            revision: 1,
            choices: vec![TrackedChoice {
                id: "ok".to_owned(),
                input_max_length: None,
            }],
        }
    }

    fn prompt(nonce: &str) -> PendingPrompt {
        PendingPrompt {
            nonce: nonce.to_owned(),
            choice_id: "why".to_owned(),
            max_length: 10,
        }
    }

    #[test]
    fn tracks_and_untracks_with_prompts() {
        let mut registry = Registry::default();
        registry.track("nonce-aaaa", message("cm-1", 10)).expect("track");
        registry.add_prompt(5, 11, prompt("nonce-aaaa"));
        assert_eq!(registry.message("nonce-aaaa").map(|m| m.message_id), Some(Some(10)));
        assert!(registry.prompt(5, 11).is_some());
        registry.untrack("cm-1");
        assert!(registry.message("nonce-aaaa").is_none());
        assert!(registry.prompt(5, 11).is_none());
        assert!(registry.is_empty());
    }

    #[test]
    fn a_new_nonce_replaces_the_old_one() {
        let mut registry = Registry::default();
        registry.track("nonce-aaaa", message("cm-1", 10)).expect("track");
        registry.add_prompt(5, 11, prompt("nonce-aaaa"));
        registry.track("nonce-bbbb", message("cm-1", 12)).expect("re-track");
        assert!(registry.message("nonce-aaaa").is_none());
        assert_eq!(registry.prompt_count(), 0);
        assert_eq!(
            registry.by_channel_message("cm-1").map(|(nonce, _)| nonce),
            Some("nonce-bbbb")
        );
    }

    #[test]
    fn a_reference_less_message_is_pinned_by_its_first_press() {
        let mut registry = Registry::default();
        let mut confirmed = message("cm-1", 0);
        confirmed.message_id = None;
        registry.track("nonce-aaaa", confirmed).expect("track");
        registry.pin("nonce-aaaa", 12);
        registry.pin("nonce-aaaa", 13);
        assert_eq!(registry.message("nonce-aaaa").map(|m| m.message_id), Some(Some(12)));
    }

    #[test]
    fn a_nonce_belongs_to_one_channel_message() {
        let mut registry = Registry::default();
        registry.track("nonce-aaaa", message("cm-1", 10)).expect("track");
        assert_eq!(
            registry.track("nonce-aaaa", message("cm-2", 11)),
            Err(TrackRefusal::NonceTaken)
        );
    }

    #[test]
    fn bounds_messages_and_prompts() {
        let mut registry = Registry::default();
        for index in 0..TRACKED_MESSAGES_MAX {
            let nonce = format!("nonce-{index:06}");
            registry
                .track(&nonce, message(&format!("cm-{index}"), 1))
                .expect("room");
        }
        assert_eq!(
            registry.track("nonce-full", message("cm-new", 1)),
            Err(TrackRefusal::Full)
        );
        // Re-tracking an open message needs no room.
        registry.track("nonce-000000", message("cm-0", 2)).expect("re-track");
        for index in 0..=PENDING_PROMPTS_MAX {
            registry.add_prompt(5, i64::try_from(index).expect("small"), prompt("nonce-000001"));
        }
        assert_eq!(registry.prompt_count(), PENDING_PROMPTS_MAX);
        assert!(registry.prompt(5, 0).is_none(), "the oldest prompt went first");
    }
}

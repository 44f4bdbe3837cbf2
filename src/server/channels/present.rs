//! The store's presents as channel protocol frames: the complete operator presentation made
//! from a decision's stored request (never its subject), and the frame around it.

use channel_protocol::{Block, Choice, ChoiceInput, Closed, Field, Frame, Header, Message, Operation, Presentation};

use crate::decision::{self, DecisionRequest};
use crate::store::channels::{self, ChannelOperation, Present};

/// The presentation an adapter shows for `request`.
pub fn presentation_of(request: &DecisionRequest) -> Presentation {
    Presentation {
        title: one_line(&request.title),
        summary: request.presentation.summary.clone(),
        blocks: request.presentation.blocks.iter().map(block_of).collect(),
        choices: request.choices.iter().map(choice_of).collect(),
        deadline_at: request.deadline_at,
        default_choice_id: request.on_timeout.as_ref().map(|response| response.choice.clone()),
    }
}

fn block_of(block: &decision::Block) -> Block {
    match block {
        decision::Block::Text { text } => Block::Text { text: text.clone() },
        // The language is a hint for renderers that highlight; Telegram shows plain `<pre>`.
        decision::Block::Code { text, .. } => Block::Code { text: text.clone() },
        decision::Block::Fields { fields } => Block::Fields {
            fields: fields
                .iter()
                .map(|field| Field {
                    label: one_line(&field.label),
                    value: field.value.clone(),
                })
                .collect(),
        },
    }
}

fn choice_of(choice: &decision::Choice) -> Choice {
    Choice {
        id: choice.id.clone(),
        label: one_line(&choice.label),
        input: choice.input.as_ref().map(|input| ChoiceInput {
            label: one_line(&input.label),
            placeholder: input
                .placeholder
                .as_deref()
                .filter(|placeholder| !placeholder.is_empty())
                .map(|placeholder| placeholder.chars().take(64).collect()),
            max_length: u32::try_from(input.max_length).unwrap_or(u32::MAX),
        }),
    }
}

/// Titles and labels are one line on a channel.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `channel.present` frame of one present (a send, prompt or closing edit), or of a
/// `track` of an open message (no attempt) after a restart.
pub fn present_frame(present: &Present, header: Header, track: bool) -> Result<Frame, channel_protocol::FrameError> {
    let operation = match (track, present.operation) {
        (true, _) => Operation::Track,
        (false, ChannelOperation::Send) => Operation::Send,
        (false, ChannelOperation::Prompt) => Operation::Prompt,
        (false, ChannelOperation::Close) => Operation::Edit,
    };
    let closed = present
        .resolution
        .as_ref()
        .filter(|_| present.operation == ChannelOperation::Close && !track)
        .map(|resolution| Closed {
            text: channels::closed_text(&present.request, resolution),
        });
    let message = Message::Present(channel_protocol::Present {
        channel_message_id: present.channel_message_id.clone(),
        operation,
        chat_id: present.chat_id,
        telegram_message_id: present.telegram_message_id,
        nonce: present.nonce.clone(),
        presentation: presentation_of(&present.request),
        closed,
        for_choice_id: present.for_choice_id.clone(),
    });
    Frame::new(header, &message)
}

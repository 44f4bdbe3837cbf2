//! A presentation as a Telegram message: HTML text within Telegram's length limit, and an
//! inline keyboard whose callback data is opaque.
//!
//! The text is built from styled segments of raw text, escaped only when written, so a cut
//! never splits a tag or an entity. Telegram counts a message's length after parsing its
//! entities, in UTF-16 code units; so does [`visible_len`].

use channel_protocol::payload::{Block, Choice, ChoiceInput, Closed, Presentation};
use serde_json::{Value, json};

/// Longest message text Telegram accepts, in UTF-16 code units after entity parsing.
pub const MESSAGE_UNITS_MAX: usize = 4096;
/// Shown where the text was cut to fit.
pub const CUT_MARKER: &str = "…(cut)";
/// Separates the choice index from the nonce in callback data.
pub const CALLBACK_SEPARATOR: char = ':';
/// Most digits of a choice index in callback data (16 choices at most).
pub const CALLBACK_INDEX_DIGITS_MAX: usize = 2;
/// Longest callback data Telegram accepts, in bytes.
pub const CALLBACK_DATA_BYTES_MAX: usize = 64;
/// Milliseconds per minute, for deadlines.
const MS_PER_MINUTE: i64 = 60_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Bold,
    Italic,
    Pre,
}

#[derive(Debug, Clone)]
struct Segment {
    style: Style,
    text: String,
}

fn segment(style: Style, text: impl Into<String>) -> Segment {
    Segment {
        style,
        text: text.into(),
    }
}

/// The message text of a presentation (HTML): the presentation, then the deadline (or the
/// closed text, which replaces it). Only the presentation part is ever cut.
#[must_use]
pub fn message_html(presentation: &Presentation, closed: Option<&Closed>) -> String {
    let head = presentation_segments(presentation);
    let tail = match closed {
        Some(closed) => vec![
            segment(Style::Plain, "\n\n"),
            segment(Style::Bold, closed.text.as_str()),
        ],
        None => deadline_segments(presentation),
    };
    write_html(&head, &tail)
}

/// The prompt asking for the text of `choice` (HTML).
#[must_use]
pub fn prompt_html(choice: &Choice, input: &ChoiceInput) -> String {
    let head = vec![
        segment(Style::Bold, input.label.as_str()),
        segment(Style::Plain, "\n"),
        segment(
            Style::Italic,
            format!(
                "{}: reply to this message with your answer (at most {} characters).",
                choice.label, input.max_length
            ),
        ),
    ];
    write_html(&head, &[])
}

/// The inline keyboard: one button per choice, one per row, callback data `<nonce>:<index>`.
#[must_use]
pub fn keyboard(nonce: &str, choices: &[Choice]) -> Value {
    let rows: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(index, choice)| json!([{"text": choice.label, "callback_data": callback_data(nonce, index)}]))
        .collect();
    json!({ "inline_keyboard": rows })
}

/// `<nonce>:<index>`: opaque, never a choice id or anything else of the decision.
#[must_use]
pub fn callback_data(nonce: &str, index: usize) -> String {
    format!("{nonce}{CALLBACK_SEPARATOR}{index}")
}

/// Splits callback data into nonce and choice index; `None` for anything this adapter did not
/// make (the nonce's own format is checked by the caller's lookup).
#[must_use]
pub fn parse_callback_data(data: &str) -> Option<(&str, usize)> {
    if data.len() > CALLBACK_DATA_BYTES_MAX {
        return None;
    }
    let (nonce, index) = data.split_once(CALLBACK_SEPARATOR)?;
    let digits_ok = (1..=CALLBACK_INDEX_DIGITS_MAX).contains(&index.len()) && index.bytes().all(|b| b.is_ascii_digit());
    // One spelling per index: "01" is not 1.
    if !digits_ok || (index.len() > 1 && index.starts_with('0')) {
        return None;
    }
    Some((nonce, index.parse().ok()?))
}

fn presentation_segments(presentation: &Presentation) -> Vec<Segment> {
    let mut segments = vec![segment(Style::Bold, presentation.title.as_str())];
    if !presentation.summary.is_empty() {
        segments.push(segment(Style::Plain, "\n"));
        segments.push(segment(Style::Plain, presentation.summary.as_str()));
    }
    for block in &presentation.blocks {
        segments.push(segment(Style::Plain, "\n\n"));
        block_segments(block, &mut segments);
    }
    segments
}

fn block_segments(block: &Block, segments: &mut Vec<Segment>) {
    match block {
        Block::Text { text } => segments.push(segment(Style::Plain, text.as_str())),
        Block::Code { text } => segments.push(segment(Style::Pre, text.as_str())),
        Block::Fields { fields } => {
            for (index, field) in fields.iter().enumerate() {
                if index > 0 {
                    segments.push(segment(Style::Plain, "\n"));
                }
                segments.push(segment(Style::Bold, format!("{}:", field.label)));
                segments.push(segment(Style::Plain, format!(" {}", field.value)));
            }
        }
    }
}

fn deadline_segments(presentation: &Presentation) -> Vec<Segment> {
    let Some(deadline_at) = presentation.deadline_at else {
        return Vec::new();
    };
    let default_label = presentation
        .default_choice_id
        .as_deref()
        .and_then(|id| presentation.choices.iter().find(|choice| choice.id == id))
        .map(|choice| choice.label.as_str());
    let text = match default_label {
        Some(label) => format!("Deadline: {} (then: {label})", format_utc_minute(deadline_at)),
        None => format!("Deadline: {}", format_utc_minute(deadline_at)),
    };
    vec![segment(Style::Plain, "\n\n"), segment(Style::Italic, text)]
}

/// Writes `head` then `tail`; when they do not fit, `head` is cut and followed by
/// [`CUT_MARKER`], so the tail (deadline or closed text) always shows.
fn write_html(head: &[Segment], tail: &[Segment]) -> String {
    let tail_units: usize = tail.iter().map(|part| visible_len(&part.text)).sum();
    let head_units: usize = head.iter().map(|part| visible_len(&part.text)).sum();
    let budget = MESSAGE_UNITS_MAX.saturating_sub(tail_units);
    let mut html = String::new();
    if head_units <= budget {
        head.iter()
            .for_each(|part| write_segment(&mut html, part.style, &part.text));
    } else {
        let mut remaining = budget.saturating_sub(visible_len(CUT_MARKER));
        for part in head {
            let units = visible_len(&part.text);
            if units <= remaining {
                write_segment(&mut html, part.style, &part.text);
                remaining -= units;
                continue;
            }
            write_segment(&mut html, part.style, prefix_units(&part.text, remaining));
            break;
        }
        write_segment(&mut html, Style::Plain, CUT_MARKER);
    }
    tail.iter()
        .for_each(|part| write_segment(&mut html, part.style, &part.text));
    html
}

fn write_segment(html: &mut String, style: Style, text: &str) {
    if text.is_empty() {
        return;
    }
    let (open, close) = match style {
        Style::Plain => ("", ""),
        Style::Bold => ("<b>", "</b>"),
        Style::Italic => ("<i>", "</i>"),
        Style::Pre => ("<pre>", "</pre>"),
    };
    html.push_str(open);
    escape_into(html, text);
    html.push_str(close);
}

/// Telegram's HTML needs `<`, `>` and `&` escaped (quotes only inside attributes, never used).
fn escape_into(html: &mut String, text: &str) {
    for ch in text.chars() {
        match ch {
            '<' => html.push_str("&lt;"),
            '>' => html.push_str("&gt;"),
            '&' => html.push_str("&amp;"),
            _ => html.push(ch),
        }
    }
}

/// The length Telegram counts: UTF-16 code units of the visible text.
#[must_use]
pub fn visible_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// The longest prefix of `text` of at most `units` UTF-16 code units, cut at a character.
fn prefix_units(text: &str, units: usize) -> &str {
    let mut used = 0;
    for (offset, ch) in text.char_indices() {
        used += ch.len_utf16();
        if used > units {
            return &text[..offset];
        }
    }
    text
}

/// `YYYY-MM-DD HH:MM UTC` of Unix milliseconds (proleptic Gregorian calendar).
#[must_use]
pub fn format_utc_minute(unix_ms: i64) -> String {
    let minutes = unix_ms.div_euclid(MS_PER_MINUTE);
    let days = minutes.div_euclid(24 * 60);
    let minute_of_day = minutes.rem_euclid(24 * 60);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        minute_of_day / 60,
        minute_of_day % 60
    )
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use channel_protocol::payload::Field;

    fn presentation(summary: &str) -> Presentation {
        Presentation {
            title: "Ship <v2> & more".to_owned(),
            summary: summary.to_owned(),
            blocks: vec![
                Block::Fields {
                    fields: vec![Field {
                        label: "Env".to_owned(),
                        value: "a<b".to_owned(),
                    }],
                },
                Block::Code {
                    text: "if a && b {}".to_owned(),
                },
            ],
            choices: vec![Choice {
                id: "ok".to_owned(),
                label: "OK".to_owned(),
                input: None,
            }],
            deadline_at: Some(1_700_000_000_000),
            default_choice_id: Some("ok".to_owned()),
        }
    }

    /// The visible text of our own HTML: tags dropped, the three entities decoded.
    fn visible(html: &str) -> String {
        let mut out = String::new();
        let mut in_tag = false;
        for ch in html.chars() {
            match ch {
                '<' => in_tag = true,
                '>' => in_tag = false,
                _ if !in_tag => out.push(ch),
                _ => {}
            }
        }
        out.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    }

    #[test]
    fn escapes_and_styles() {
        let html = message_html(&presentation("Why"), None);
        assert_eq!(
            html,
            "<b>Ship &lt;v2&gt; &amp; more</b>\nWhy\n\n<b>Env:</b> a&lt;b\n\n<pre>if a &amp;&amp; b {}</pre>\n\n\
             <i>Deadline: 2023-11-14 22:13 UTC (then: OK)</i>"
        );
    }

    #[test]
    fn closed_text_replaces_the_deadline() {
        let closed = Closed {
            text: "Approved by ann".to_owned(),
        };
        let html = message_html(&presentation(""), Some(&closed));
        assert!(html.ends_with("\n\n<b>Approved by ann</b>"), "{html}");
        assert!(!html.contains("Deadline"));
    }

    #[test]
    fn cuts_long_text_visibly_and_keeps_the_tail() {
        let long = "é😀<".repeat(3000);
        let closed = Closed {
            text: "Closed".to_owned(),
        };
        let html = message_html(&presentation(&long), Some(&closed));
        let shown = visible(&html);
        assert!(visible_len(&shown) <= MESSAGE_UNITS_MAX, "{}", visible_len(&shown));
        assert!(visible_len(&shown) > MESSAGE_UNITS_MAX - 4, "uses the room");
        assert!(shown.contains(CUT_MARKER));
        assert!(shown.ends_with("Closed"));
        assert!(!html.contains("&l…") && html.matches("<b>").count() == html.matches("</b>").count());
    }

    #[test]
    fn callback_data_is_opaque_and_strict() {
        let data = callback_data("Nonce_123", 15);
        assert_eq!(data, "Nonce_123:15");
        assert_eq!(parse_callback_data(&data), Some(("Nonce_123", 15)));
        for bad in [
            "Nonce_123",
            "Nonce_123:",
            "Nonce_123:01",
            "Nonce_123:123",
            "Nonce_123:-1",
            "a:b:1",
        ] {
            assert_eq!(parse_callback_data(bad), None, "{bad}");
        }
        let keyboard = keyboard("abcdefgh", &presentation("").choices);
        assert_eq!(
            keyboard,
            json!({"inline_keyboard": [[{"text": "OK", "callback_data": "abcdefgh:0"}]]})
        );
    }

    #[test]
    fn formats_deadlines_in_utc() {
        assert_eq!(format_utc_minute(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_utc_minute(951_782_400_000), "2000-02-29 00:00 UTC");
        assert_eq!(format_utc_minute(-60_000), "1969-12-31 23:59 UTC");
    }
}

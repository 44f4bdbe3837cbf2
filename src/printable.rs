//! Text that is safe to print on a terminal or write into a log line: control characters
//! (C0, DEL and C1) become visible escapes, so a value from a client or a workflow (an error
//! message, a name) can never break a table row, forge a log line or move the cursor.

use std::borrow::Cow;

/// `text` with every control character written as `\u{XX}`; borrowed when there is none.
#[must_use]
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One log record as written: interior control bytes escaped as `\xNN`, the final newline
/// kept, so one record is always exactly one line.
#[must_use]
pub fn log_line(record: &[u8]) -> Cow<'_, [u8]> {
    let (body, newline) = match record.split_last() {
        Some((b'\n', body)) => (body, true),
        _ => (record, false),
    };
    let is_control = |byte: &u8| *byte < 0x20 || *byte == 0x7f;
    if !body.iter().any(is_control) {
        return Cow::Borrowed(record);
    }
    let mut out = Vec::with_capacity(record.len() + 16);
    for byte in body {
        if is_control(byte) {
            out.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
        } else {
            out.push(*byte);
        }
    }
    if newline {
        out.push(b'\n');
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible_and_plain_text_is_borrowed() {
        assert!(matches!(printable("run-1 ok é"), Cow::Borrowed(_)));
        assert_eq!(
            printable("a\nb\x1b[31mc\u{9b}d\u{7f}"),
            "a\\u{a}b\\u{1b}[31mc\\u{9b}d\\u{7f}"
        );
    }

    #[test]
    fn a_log_record_stays_one_line() {
        assert!(matches!(log_line(b"INFO ready\n"), Cow::Borrowed(_)));
        assert_eq!(
            &*log_line(b"WARN run=a\nforged\r\x1b\n"),
            b"WARN run=a\\x0aforged\\x0d\\x1b\n"
        );
        assert_eq!(&*log_line(b"no newline\x07"), b"no newline\\x07");
    }
}

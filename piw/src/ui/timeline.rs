//! The timeline: a cursor over the run's attempts in order. Stepping back replays the graph
//! as it was after that attempt; `End` returns to the live view. Older attempts than the
//! view's window load page by page from the start when the cursor needs them.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::app::{App, Pane, Selected, safe};
use super::draw::pane_block;

pub fn draw(frame: &mut Frame<'_>, app: &App, selected: &Selected, area: Rect) {
    let block = pane_block(app, Pane::Timeline, "timeline");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let attempts = &selected.attempts;
    let count = attempts.len();
    let position = match selected.cursor {
        None => count,
        Some(seq) => selected.index_of(seq).map_or(0, |index| index + 1),
    };
    let where_ = match selected.cursor {
        None => Span::styled("LIVE", app.theme.ok),
        Some(_) => Span::styled("REPLAY", app.theme.warn),
    };
    let at = position
        .checked_sub(1)
        .and_then(|index| attempts.get(index))
        .map(|attempt| format!("  {} {}", safe(&attempt.node_path), safe(&attempt.status)))
        .unwrap_or_default();
    let older = if attempts.has_gap() {
        "  (older attempts not loaded)"
    } else {
        ""
    };
    let line = Line::from(vec![
        where_,
        Span::raw(format!("  attempt {position}/{count} loaded of {}{at}", attempts.total)),
        Span::styled(older, app.theme.dim),
    ]);
    let bar = scrub_bar(inner.width as usize, position, count);
    frame.render_widget(Paragraph::new(vec![line, Line::styled(bar, app.theme.dim)]), inner);
}

/// `━━━━●────`: the cursor's place among `count` attempts.
fn scrub_bar(width: usize, position: usize, count: usize) -> String {
    if width == 0 {
        return String::new();
    }
    let at = (position * (width - 1)).checked_div(count).unwrap_or(width - 1);
    (0..width)
        .map(|column| match column.cmp(&at) {
            std::cmp::Ordering::Less => '━',
            std::cmp::Ordering::Equal => '●',
            std::cmp::Ordering::Greater => '─',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bar_puts_the_cursor_where_it_is() {
        assert_eq!(super::scrub_bar(5, 0, 4), "●────");
        assert_eq!(super::scrub_bar(5, 4, 4), "━━━━●");
    }
}

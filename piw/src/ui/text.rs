//! A frame as plain text: drawn on ratatui's `TestBackend` and read back cell by cell, for
//! `--once`, the benchmark and tests.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use unicode_width::UnicodeWidthStr;

use super::app::App;

/// The `--once` frame size.
pub const ONCE_COLUMNS: u16 = 120;
pub const ONCE_ROWS: u16 = 40;

/// Draw `app` once on a `columns` × `rows` buffer.
pub fn render(app: &App, columns: u16, rows: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(columns, rows)).expect("a test backend never fails");
    terminal
        .draw(|frame| super::draw::draw(frame, app))
        .expect("a test backend never fails");
    terminal.backend().buffer().clone()
}

/// The buffer's text, one line per row, trailing spaces cut. A wide character fills two
/// cells; the second is skipped so columns stay aligned.
pub fn buffer_text(buffer: &Buffer) -> String {
    let area = buffer.area;
    let mut lines = Vec::with_capacity(area.height as usize);
    for y in area.top()..area.bottom() {
        let mut line = String::new();
        let mut x = area.left();
        while x < area.right() {
            let symbol = buffer[(x, y)].symbol();
            line.push_str(symbol);
            x += (symbol.width() as u16).max(1);
        }
        lines.push(line.trim_end().to_string());
    }
    lines.join("\n")
}

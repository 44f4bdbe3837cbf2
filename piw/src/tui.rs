//! The interactive loop: the session in its own task, the terminal in raw mode, and one
//! redraw per input, update or tick (elapsed times keep moving).

use std::time::Duration;

use crossterm::event::{DisableMouseCapture, EnableMouseCapture, Event, EventStream};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::connection::session::{Command, Session, SessionOptions, Update};
use crate::ui::app::{App, now_ms};
use crate::ui::keys;
use crate::ui::theme::Theme;

/// Redraw at least this often (elapsed times).
pub const TICK: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("the terminal failed: {0}")]
    Terminal(#[from] std::io::Error),
    /// The session cannot go on (another server version, a server that cannot start).
    #[error("{message}")]
    Fatal { message: String, code: u8 },
}

/// Run the TUI until the user quits.
pub async fn run(options: SessionOptions, theme: Theme) -> Result<(), TuiError> {
    let mut app = App::new(
        theme,
        if options.watch_runs {
            None
        } else {
            options.selected.as_deref()
        },
    );
    let (updates_tx, mut updates) = mpsc::unbounded_channel();
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let session = tokio::spawn(Session::new(options, updates_tx).run(commands_rx));
    // `try_init`: without a terminal (stdout redirected) this is an error, not a panic.
    let mut terminal = ratatui::try_init()?;
    crossterm::execute!(std::io::stdout(), EnableMouseCapture)?;
    let result = event_loop(&mut terminal, &mut app, &mut updates, &commands).await;
    let _ = crossterm::execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();
    drop(commands);
    session.abort();
    result?;
    match app.fatal {
        Some((message, code)) => Err(TuiError::Fatal { message, code }),
        None => Ok(()),
    }
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    app: &mut App,
    updates: &mut mpsc::UnboundedReceiver<Update>,
    commands: &mpsc::UnboundedSender<Command>,
) -> Result<(), TuiError> {
    let mut input = EventStream::new();
    let mut tick = tokio::time::interval(TICK);
    while !app.quit {
        app.now_ms = now_ms();
        terminal.draw(|frame| crate::ui::draw::draw(frame, app))?;
        let sent = tokio::select! {
            event = input.next() => match event {
                Some(Ok(Event::Key(key))) if key.is_press() => keys::on_key(app, key),
                Some(Ok(Event::Mouse(mouse))) => keys::on_mouse(app, mouse),
                Some(Ok(_)) => Vec::new(),
                Some(Err(err)) => return Err(err.into()),
                None => return Ok(()),
            },
            update = updates.recv() => match update {
                Some(update) => drain(app, update, updates),
                None => return Ok(()),
            },
            _ = tick.tick() => Vec::new(),
        };
        for command in sent.into_iter().chain(app.pending_loads()) {
            let _ = commands.send(command);
        }
    }
    Ok(())
}

/// Apply an update and every other one already queued (one redraw for a burst).
fn drain(app: &mut App, first: Update, updates: &mut mpsc::UnboundedReceiver<Update>) -> Vec<Command> {
    let mut sent = Vec::new();
    let mut next = Some(first);
    while let Some(update) = next {
        if let Some(run) = app.apply(update) {
            sent.push(Command::Select(Some(run)));
        }
        next = updates.try_recv().ok();
    }
    sent
}

//! Themes. The default uses only the terminal's own foreground and its named ANSI colours
//! plus bold and reverse video, so it stays readable on dark and light terminals alike (the
//! terminal's palette decides the exact shades). The named themes fix RGB colours for
//! those who want them.

use ratatui::style::{Color, Modifier, Style};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Theme {
    pub name: &'static str,
    pub text: Style,
    pub dim: Style,
    pub title: Style,
    pub border: Style,
    pub border_focused: Style,
    pub selected: Style,
    pub highlight: Style,
    pub ok: Style,
    pub warn: Style,
    pub error: Style,
    pub info: Style,
}

/// Theme names, the default first.
pub const THEME_NAMES: [&str; 4] = ["default", "mono", "mocha", "latte"];

impl Default for Theme {
    fn default() -> Self {
        Self::ansi()
    }
}

impl Theme {
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::ansi()),
            "mono" => Some(Self::mono()),
            "mocha" => Some(Self::rgb("mocha", Palette::MOCHA)),
            "latte" => Some(Self::rgb("latte", Palette::LATTE)),
            _ => None,
        }
    }

    /// The next theme in [`THEME_NAMES`] (the `T` key).
    pub fn next(&self) -> Self {
        let index = THEME_NAMES.iter().position(|name| *name == self.name).unwrap_or(0);
        Self::named(THEME_NAMES[(index + 1) % THEME_NAMES.len()]).unwrap_or_default()
    }

    fn ansi() -> Self {
        let plain = Style::default();
        Self {
            name: "default",
            text: plain,
            dim: plain.add_modifier(Modifier::DIM),
            title: plain.add_modifier(Modifier::BOLD),
            border: plain.add_modifier(Modifier::DIM),
            border_focused: plain.fg(Color::Cyan).add_modifier(Modifier::BOLD),
            selected: plain.add_modifier(Modifier::REVERSED),
            highlight: plain.fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ok: plain.fg(Color::Green),
            warn: plain.fg(Color::Yellow).add_modifier(Modifier::BOLD),
            error: plain.fg(Color::Red).add_modifier(Modifier::BOLD),
            info: plain.fg(Color::Blue),
        }
    }

    /// No colour at all: modifiers only (for terminals without colour, or screenshots).
    fn mono() -> Self {
        let plain = Style::default();
        Self {
            name: "mono",
            text: plain,
            dim: plain.add_modifier(Modifier::DIM),
            title: plain.add_modifier(Modifier::BOLD),
            border: plain,
            border_focused: plain.add_modifier(Modifier::BOLD),
            selected: plain.add_modifier(Modifier::REVERSED),
            highlight: plain.add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            ok: plain,
            warn: plain.add_modifier(Modifier::BOLD),
            error: plain.add_modifier(Modifier::BOLD),
            info: plain,
        }
    }

    fn rgb(name: &'static str, p: Palette) -> Self {
        let base = Style::default().fg(p.text).bg(p.base);
        Self {
            name,
            text: base,
            dim: base.fg(p.subtle),
            title: base.fg(p.accent).add_modifier(Modifier::BOLD),
            border: base.fg(p.subtle),
            border_focused: base.fg(p.accent).add_modifier(Modifier::BOLD),
            selected: Style::default().fg(p.base).bg(p.accent),
            highlight: base.fg(p.accent).add_modifier(Modifier::BOLD),
            ok: base.fg(p.green),
            warn: base.fg(p.yellow).add_modifier(Modifier::BOLD),
            error: base.fg(p.red).add_modifier(Modifier::BOLD),
            info: base.fg(p.blue),
        }
    }

    /// The style of a status word (display statuses and attempt statuses).
    pub fn status(&self, status: &str) -> Style {
        match status {
            "completed" => self.ok,
            "failed" | "timed_out" | "ambiguous" => self.error,
            "waiting" | "paused" => self.warn,
            "running" | "starting" => self.highlight,
            "queued" => self.info,
            _ => self.dim,
        }
    }
}

struct Palette {
    base: Color,
    text: Color,
    subtle: Color,
    accent: Color,
    green: Color,
    yellow: Color,
    red: Color,
    blue: Color,
}

impl Palette {
    /// Catppuccin Mocha (dark).
    const MOCHA: Self = Self {
        base: Color::Rgb(0x1e, 0x1e, 0x2e),
        text: Color::Rgb(0xcd, 0xd6, 0xf4),
        subtle: Color::Rgb(0x7f, 0x84, 0x9c),
        accent: Color::Rgb(0x89, 0xb4, 0xfa),
        green: Color::Rgb(0xa6, 0xe3, 0xa1),
        yellow: Color::Rgb(0xf9, 0xe2, 0xaf),
        red: Color::Rgb(0xf3, 0x8b, 0xa8),
        blue: Color::Rgb(0x74, 0xc7, 0xec),
    };
    /// Catppuccin Latte (light).
    const LATTE: Self = Self {
        base: Color::Rgb(0xef, 0xf1, 0xf5),
        text: Color::Rgb(0x4c, 0x4f, 0x69),
        subtle: Color::Rgb(0x8c, 0x8f, 0xa1),
        accent: Color::Rgb(0x1e, 0x66, 0xf5),
        green: Color::Rgb(0x40, 0xa0, 0x2b),
        yellow: Color::Rgb(0xdf, 0x8e, 0x1d),
        red: Color::Rgb(0xd2, 0x0f, 0x39),
        blue: Color::Rgb(0x20, 0x9f, 0xb5),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_theme_exists_and_cycling_visits_them_all() {
        let mut theme = Theme::default();
        for _ in THEME_NAMES {
            assert!(Theme::named(theme.name).is_some());
            theme = theme.next();
        }
        assert_eq!(theme.name, "default");
        assert!(Theme::named("nope").is_none());
    }
}

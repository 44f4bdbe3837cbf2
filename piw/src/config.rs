//! `$XDG_CONFIG_HOME/piw/config.toml` (else `~/.config/piw/config.toml`; `PIW_CONFIG_PATH`
//! names another file). A missing file is the defaults; a malformed one is one clear error
//! naming the file, because silently ignoring it would hide the user's mistake.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ui::theme::{THEME_NAMES, Theme};

pub const CONFIG_PATH_ENV: &str = "PIW_CONFIG_PATH";
/// A config file is a few lines; anything bigger is not one.
const CONFIG_BYTES_MAX: u64 = 64 * 1024;

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// One of [`THEME_NAMES`].
    pub theme: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("could not read the piw config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the piw config file {path} is larger than {CONFIG_BYTES_MAX} bytes")]
    TooLarge { path: PathBuf },
    #[error("the piw config file {path} is not valid: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error("unknown theme `{name}` (in {origin}); themes: {}", THEME_NAMES.join(", "))]
    UnknownTheme { name: String, origin: String },
}

/// Where the config file is looked for.
pub fn config_path() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    if let Some(path) = var(CONFIG_PATH_ENV) {
        return Some(path);
    }
    let base = var("XDG_CONFIG_HOME").or_else(|| var("HOME").map(|home| home.join(".config")))?;
    Some(base.join("piw").join("config.toml"))
}

pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let read_error = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(err) => return Err(read_error(err)),
    };
    if metadata.len() > CONFIG_BYTES_MAX {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(read_error)?;
    let config: Config = toml::from_str(&text).map_err(|err| ConfigError::Malformed {
        path: path.to_path_buf(),
        message: err.message().to_string(),
    })?;
    if let Some(name) = &config.theme {
        theme_named(name, &path.display().to_string())?;
    }
    Ok(config)
}

/// The theme of a name, or the error that lists the names.
pub fn theme_named(name: &str, origin: &str) -> Result<Theme, ConfigError> {
    Theme::named(name).ok_or_else(|| ConfigError::UnknownTheme {
        name: name.to_string(),
        origin: origin.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    #[test]
    fn a_missing_file_is_the_defaults_and_a_theme_is_read() {
        assert_eq!(
            load(Path::new("/nonexistent/piw.toml")).expect("defaults"),
            Config::default()
        );
        let (_dir, path) = write("theme = \"mocha\"\n");
        assert_eq!(load(&path).expect("config").theme.as_deref(), Some("mocha"));
    }

    #[test]
    fn a_malformed_file_or_unknown_theme_is_one_clear_error() {
        let (_dir, path) = write("theme = \n");
        let err = load(&path).expect_err("malformed").to_string();
        assert!(err.contains("is not valid") && err.contains("config.toml"), "{err}");
        let (_dir, path) = write("colour = 1\n");
        assert!(load(&path).is_err());
        let (_dir, path) = write("theme = \"neon\"\n");
        let err = load(&path).expect_err("unknown").to_string();
        assert!(err.contains("neon") && err.contains("default"), "{err}");
    }
}

//! Where state lives (ARCHITECTURE §9): `$PI_CODING_AGENT_DIR/workflows` when set, else
//! `~/.pi/agent/workflows`, created user-only (0700); and where private configuration lives.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const STATE_DIR_MODE: u32 = 0o700;
pub const DATABASE_FILE: &str = "state.sqlite";

/// The state directory from the environment (not yet created).
pub fn default_state_dir() -> anyhow::Result<PathBuf> {
    if let Some(agent_dir) = std::env::var_os("PI_CODING_AGENT_DIR").filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(agent_dir).join("workflows"));
    }
    let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty()) else {
        bail!("cannot find the state directory: HOME is not set; set PI_CODING_AGENT_DIR or pass --state-dir");
    };
    Ok(PathBuf::from(home).join(".pi").join("agent").join("workflows"))
}

/// Names the private configuration directory (channels, credentials, shortcuts, the Herdr
/// plugin); the Pi extension reads the same variable.
pub const CONFIG_DIR_ENV: &str = "PI_WORKFLOWS_CONFIG_DIR";

/// The configuration directory: `PI_WORKFLOWS_CONFIG_DIR`, else `~/.config/pi-workflows`.
pub fn config_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os(CONFIG_DIR_ENV).filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty()) else {
        bail!("cannot find the config directory: HOME is not set; set {CONFIG_DIR_ENV}");
    };
    Ok(PathBuf::from(home).join(".config").join("pi-workflows"))
}

/// Create `dir` (and parents) if needed and make sure only the user can enter it.
pub fn ensure_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(STATE_DIR_MODE)
        .create(dir)
        .with_context(|| format!("could not create the state directory {}", dir.display()))?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode != STATE_DIR_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(STATE_DIR_MODE))
            .with_context(|| format!("could not make {} user-only (0700)", dir.display()))?;
    }
    Ok(())
}

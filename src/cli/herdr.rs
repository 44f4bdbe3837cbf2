//! `pi-workflows herdr setup|sync`: the Herdr plugin that shows `piw` in a Herdr pane
//! (docs/PIW.md, "Herdr"). Herdr keeps the plugins it installs from GitHub in its own
//! config directory and a registry of every plugin (`plugins.json`, rewritten by Herdr
//! itself); a local plugin stays where it is and is registered with `herdr plugin link
//! <dir>`. So the plugin lives in pi-workflows' config directory (user-only) and is linked:
//! `herdr-plugin.toml` (one `piw` pane entrypoint, one `browse` action) and `piw-pane.sh`,
//! the pane's launcher (`piw "$PIW_RUN_ID"`, or the run browser).
//!
//! Idempotent: files are rewritten only when their bytes or modes differ, and the plugin is
//! linked only when Herdr does not list it from this directory or its manifest changed; a
//! second run changes nothing and says so.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::{Value, json};

/// The plugin's ID in Herdr (`herdr plugin list --plugin pi-workflows.piw`).
pub const PLUGIN_ID: &str = "pi-workflows.piw";
/// The pane entrypoint `/piw` opens (`herdr plugin pane open --entrypoint piw`).
pub const PANE_ENTRYPOINT: &str = "piw";
/// Herdr's plugin system (manifests, `plugin link`, plugin panes) shipped in 0.7.0.
pub const MIN_HERDR_VERSION: &str = "0.7.0";
pub const MANIFEST_FILE: &str = "herdr-plugin.toml";
pub const LAUNCHER_FILE: &str = "piw-pane.sh";
/// Overrides where the plugin is written (tests; a shared config tree).
pub const PLUGIN_DIR_ENV: &str = "PI_WORKFLOWS_HERDR_PLUGIN_DIR";
const DIR_MODE: u32 = 0o700;
const MANIFEST_MODE: u32 = 0o600;
/// The launcher is executed by Herdr as the user: user-only, executable.
const LAUNCHER_MODE: u32 = 0o700;
/// Bytes of Herdr's output kept in an error message.
const HERDR_OUTPUT_BYTES_MAX: usize = 2_000;

#[derive(Debug, Subcommand)]
pub enum HerdrCommand {
    /// Write the Herdr plugin that opens piw in a Herdr pane and register it with Herdr
    /// (`herdr plugin link`). Safe to repeat: a second run changes nothing.
    Setup {
        #[arg(long)]
        json: bool,
    },
    /// Bring the plugin written by `setup` up to date with this pi-workflows (after an
    /// upgrade) and register it again when its manifest changed.
    Sync {
        #[arg(long)]
        json: bool,
    },
}

pub fn run(state_dir: Option<PathBuf>, command: HerdrCommand) -> anyhow::Result<ExitCode> {
    let dir = plugin_dir()?;
    let (json, sync) = match command {
        HerdrCommand::Setup { json } => (json, false),
        HerdrCommand::Sync { json } => (json, true),
    };
    if sync && !dir.join(MANIFEST_FILE).exists() {
        bail!(
            "the Herdr plugin is not set up in {} yet: run `pi-workflows herdr setup`",
            dir.display()
        );
    }
    let files = plugin_files(&dir, state_dir.as_deref())?;
    let written = write_plugin(&dir, &files)?;
    let registration = register(&dir, written.contains(&MANIFEST_FILE))?;
    report(&dir, &written, &registration, json);
    Ok(ExitCode::SUCCESS)
}

/// `PI_WORKFLOWS_HERDR_PLUGIN_DIR`, else `<config dir>/herdr-plugin` (`paths::config_dir`,
/// the extension's too).
pub fn plugin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = non_empty_env(PLUGIN_DIR_ENV) {
        return Ok(PathBuf::from(dir));
    }
    Ok(crate::paths::config_dir()?.join("herdr-plugin"))
}

fn non_empty_env(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// One file of the plugin: its name, bytes and mode.
struct PluginFile {
    name: &'static str,
    bytes: Vec<u8>,
    mode: u32,
}

fn plugin_files(dir: &Path, state_dir: Option<&Path>) -> anyhow::Result<Vec<PluginFile>> {
    let launcher = dir.join(LAUNCHER_FILE);
    Ok(vec![
        PluginFile {
            name: MANIFEST_FILE,
            bytes: manifest(&launcher)?.into_bytes(),
            mode: MANIFEST_MODE,
        },
        PluginFile {
            name: LAUNCHER_FILE,
            bytes: launcher_script(&piw_binary(), state_dir)?.into_bytes(),
            mode: LAUNCHER_MODE,
        },
    ])
}

/// The manifest Herdr validates at `plugin link` (its v1 fields: identity, platforms, panes,
/// actions; argv commands). The pane command is the launcher's absolute path, so it does
/// not depend on the working directory Herdr gives a pane.
fn manifest(launcher: &Path) -> anyhow::Result<String> {
    let launcher = toml_string(&utf8(launcher)?);
    let version = env!("CARGO_PKG_VERSION");
    let open = format!(
        "exec \"${{HERDR_BIN_PATH:-herdr}}\" plugin pane open --plugin {PLUGIN_ID} --entrypoint {PANE_ENTRYPOINT} --focus"
    );
    Ok(format!(
        r#"# Written by `pi-workflows herdr setup` ({version}); `pi-workflows herdr sync` rewrites it.
id = "{PLUGIN_ID}"
name = "pi-workflows piw"
version = "{version}"
min_herdr_version = "{MIN_HERDR_VERSION}"
description = "The live pi-workflows run view (piw) in a Herdr pane"
platforms = ["linux", "macos"]

[[panes]]
id = "{PANE_ENTRYPOINT}"
title = "piw"
description = "piw for the run in PIW_RUN_ID (set by /piw in Pi), else the run browser"
placement = "split"
command = [{launcher}]

[[actions]]
id = "browse"
title = "pi-workflows: browse runs in piw"
command = ["sh", "-c", {open}]
"#,
        open = toml_string(&open),
    ))
}

/// The pane's launcher: `PIW_RUN_ID` pins one run; `PIW_BIN` and `PIW_STATE_DIR` (set by the
/// Pi extension) override the binary and state directory found at setup.
fn launcher_script(piw: &str, state_dir: Option<&Path>) -> anyhow::Result<String> {
    let state = match state_dir {
        Some(dir) => shell_quote(&utf8(dir)?),
        None => "''".to_string(),
    };
    Ok(format!(
        r#"#!/bin/sh
# Written by `pi-workflows herdr setup`: Herdr runs it for the `piw` pane of {PLUGIN_ID}.
piw=${{PIW_BIN:-{piw}}}
[ -x "$piw" ] || piw=piw
state=${{PIW_STATE_DIR:-{state}}}
set --
if [ -n "$state" ]; then set -- --state-dir "$state"; fi
if [ -n "${{PIW_RUN_ID:-}}" ]; then set -- "$@" "$PIW_RUN_ID"; fi
exec "$piw" "$@"
"#,
        piw = shell_quote(piw),
    ))
}

/// `piw` next to this binary (a build or an install puts them together), else on PATH.
fn piw_binary() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("piw")))
        .filter(|piw| piw.is_file())
        .and_then(|piw| piw.to_str().map(str::to_string))
        .unwrap_or_else(|| "piw".to_string())
}

fn utf8(path: &Path) -> anyhow::Result<String> {
    path.to_str().map(str::to_string).with_context(|| {
        format!(
            "{} is not UTF-8; set {PLUGIN_DIR_ENV} to another directory",
            path.display()
        )
    })
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut quoted = String::from('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A POSIX shell single-quoted word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Write the files that differ (bytes or mode); the names written, in order.
fn write_plugin(dir: &Path, files: &[PluginFile]) -> anyhow::Result<Vec<&'static str>> {
    ensure_plugin_dir(dir)?;
    let mut written = Vec::new();
    for file in files {
        let path = dir.join(file.name);
        if !same_file(&path, file)? {
            write_atomically(&path, file)?;
            written.push(file.name);
        }
    }
    Ok(written)
}

/// Create the directory user-only; refuse a link or a non-directory in its place.
fn ensure_plugin_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() || !meta.is_dir() => bail!(
            "{} is not a directory (a link or a file is in its place); remove it or set {PLUGIN_DIR_ENV}",
            dir.display()
        ),
        Ok(meta) if meta.permissions().mode() & 0o777 != DIR_MODE => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
                .with_context(|| format!("could not make {} user-only (0700)", dir.display()))
        }
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .with_context(|| format!("could not create the Herdr plugin directory {}", dir.display())),
        Err(err) => Err(err).with_context(|| format!("could not read {}", dir.display())),
    }
}

fn same_file(path: &Path, file: &PluginFile) -> anyhow::Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(err).with_context(|| format!("could not read {}", path.display())),
    };
    if !meta.is_file() || meta.permissions().mode() & 0o777 != file.mode {
        return Ok(false);
    }
    let bytes = std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
    Ok(bytes == file.bytes)
}

/// Write a sibling temporary file with the final mode, then rename it over `path`: Herdr
/// never reads a half-written manifest.
fn write_atomically(path: &Path, file: &PluginFile) -> anyhow::Result<()> {
    let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(file.mode)
        .open(&temporary)
        .with_context(|| format!("could not write {}", temporary.display()))?;
    out.write_all(&file.bytes)
        .and_then(|()| out.sync_all())
        .with_context(|| format!("could not write {}", temporary.display()))?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(file.mode))?;
    std::fs::rename(&temporary, path).with_context(|| format!("could not replace {}", path.display()))
}

/// How the plugin stands with Herdr after this run.
enum Registration {
    /// No `herdr` on PATH: the files are ready; linking waits for Herdr.
    NoHerdr,
    /// Herdr lists it from this directory with this manifest already.
    AlreadyLinked,
    /// `herdr plugin link` registered it now.
    Linked,
}

/// Link unless Herdr already lists the plugin from `dir` and its manifest did not change.
fn register(dir: &Path, manifest_changed: bool) -> anyhow::Result<Registration> {
    let Some(herdr) = herdr_on_path() else {
        return Ok(Registration::NoHerdr);
    };
    if !manifest_changed && linked_from(&herdr, dir)? {
        return Ok(Registration::AlreadyLinked);
    }
    let dir_arg = utf8(dir)?;
    let out = herdr_output(&herdr, &["plugin", "link", &dir_arg])?;
    if !out.status.success() {
        bail!("`herdr plugin link {dir_arg}` failed ({}): {}", out.status, said(&out));
    }
    Ok(Registration::Linked)
}

fn herdr_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("herdr"))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

fn herdr_output(herdr: &Path, args: &[&str]) -> anyhow::Result<Output> {
    Command::new(herdr)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("could not run {}", herdr.display()))
}

/// Whether `herdr plugin list --plugin ID --json` names a plugin rooted at `dir`.
fn linked_from(herdr: &Path, dir: &Path) -> anyhow::Result<bool> {
    let out = herdr_output(herdr, &["plugin", "list", "--plugin", PLUGIN_ID, "--json"])?;
    if !out.status.success() {
        return Ok(false); // not listed (or an older Herdr): linking again is harmless
    }
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let wanted = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    Ok(listed_plugins(&listed).any(|plugin| {
        plugin["plugin_id"] == PLUGIN_ID
            && plugin["plugin_root"]
                .as_str()
                .is_some_and(|root| std::fs::canonicalize(root).is_ok_and(|root| root == wanted))
    }))
}

/// The plugins of a `plugin list` response (`result.plugins`, leniently: `plugins` too).
fn listed_plugins(listed: &Value) -> impl Iterator<Item = &Value> {
    let plugins = listed["result"]["plugins"]
        .as_array()
        .or_else(|| listed["plugins"].as_array());
    plugins.into_iter().flatten()
}

fn said(out: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let text = crate::printable::printable(text.trim()).into_owned();
    crate::protocol::bounded_text(&text, HERDR_OUTPUT_BYTES_MAX)
}

fn report(dir: &Path, written: &[&str], registration: &Registration, json: bool) {
    let changed = !written.is_empty() || matches!(registration, Registration::Linked);
    if json {
        let herdr = match registration {
            Registration::NoHerdr => "notFound",
            Registration::AlreadyLinked => "alreadyLinked",
            Registration::Linked => "linked",
        };
        let report = json!({"pluginId": PLUGIN_ID, "pluginDir": dir.display().to_string(),
                            "written": written, "herdr": herdr, "changed": changed});
        println!("{report}");
        return;
    }
    let dir = crate::printable::printable(&dir.display().to_string()).into_owned();
    if written.is_empty() {
        println!("The Herdr plugin {PLUGIN_ID} in {dir} is up to date: no file changed.");
    } else {
        println!("Wrote {} in {dir}.", written.join(" and "));
    }
    match registration {
        Registration::NoHerdr => println!(
            "Herdr was not found on PATH, so the plugin is not registered yet: inside Herdr, run \
             `herdr plugin link {dir}` (or this command again)."
        ),
        Registration::AlreadyLinked => println!("Herdr lists {PLUGIN_ID} from {dir} already: nothing to register."),
        Registration::Linked => println!("Registered {PLUGIN_ID} with Herdr (`herdr plugin link {dir}`)."),
    }
    if !changed {
        println!("Nothing changed.");
    }
}

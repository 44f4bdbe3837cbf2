//! `pi-workflows herdr setup|sync` on the real binary with a fake `herdr` on PATH (a script
//! that records its arguments and answers `plugin list` from what `plugin link` registered):
//! the plugin is written user-only and linked once; a second run changes nothing and says
//! so; `sync` refreshes a changed manifest and links it again; without Herdr the files are
//! ready and the output says how to register them; Herdr's refusal is one clear error.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const FAKE_HERDR: &str = r#"#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_HERDR_LOG"
case "$1 $2" in
  "plugin link")
    if [ -n "$FAKE_HERDR_REFUSE" ]; then echo "plugin_requires_newer_herdr: plugin requires Herdr 0.7.0 or newer" >&2; exit 1; fi
    printf '%s' "$3" > "$FAKE_HERDR_STATE"
    echo '{"id":"cli:plugin","result":{"type":"plugin_info"}}' ;;
  "plugin list")
    if [ -f "$FAKE_HERDR_STATE" ]; then
      printf '{"id":"cli:plugin","result":{"plugins":[{"plugin_id":"pi-workflows.piw","plugin_root":"%s"}]}}\n' "$(cat "$FAKE_HERDR_STATE")"
    else
      echo '{"id":"cli:plugin","result":{"plugins":[]}}'
    fi ;;
  *) exit 2 ;;
esac
"#;

struct Setup {
    root: tempfile::TempDir,
}

impl Setup {
    fn new(with_herdr: bool) -> Self {
        let root = tempfile::Builder::new().prefix("piwh").tempdir_in("/tmp").expect("dir");
        let bin = root.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        if with_herdr {
            let herdr = bin.join("herdr");
            std::fs::write(&herdr, FAKE_HERDR).expect("fake herdr");
            std::fs::set_permissions(&herdr, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        Self { root }
    }

    fn plugin_dir(&self) -> PathBuf {
        self.root.path().join("config").join("herdr-plugin")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-workflows"));
        let path = format!("{}:/usr/bin:/bin", self.root.path().join("bin").display());
        command
            .args(["herdr"])
            .args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.root.path())
            .env("PI_WORKFLOWS_CONFIG_DIR", self.root.path().join("config"))
            .env("FAKE_HERDR_LOG", self.log_path())
            .env("FAKE_HERDR_STATE", self.root.path().join("linked"));
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run pi-workflows herdr")
    }

    fn log_path(&self) -> PathBuf {
        self.root.path().join("herdr.log")
    }

    /// The `herdr` calls so far, one per line.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn links(&self) -> usize {
        self.calls()
            .iter()
            .filter(|call| call.starts_with("plugin link "))
            .count()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn expect_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(out)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

/// (inode, modification time) of each plugin file: rewriting a file changes them.
fn identity(dir: &Path) -> Vec<(u64, i64, i64)> {
    ["herdr-plugin.toml", "piw-pane.sh"]
        .iter()
        .map(|name| {
            let meta = std::fs::metadata(dir.join(name)).expect("plugin file");
            (meta.ino(), meta.mtime(), meta.mtime_nsec())
        })
        .collect()
}

#[test]
fn setup_writes_and_links_once_and_a_second_run_changes_nothing() {
    let setup = Setup::new(true);
    let dir = setup.plugin_dir();
    let first = expect_ok(&setup.run(&["setup"]));
    assert!(first.contains("Wrote herdr-plugin.toml and piw-pane.sh"), "{first}");
    assert!(first.contains("Registered pi-workflows.piw with Herdr"), "{first}");
    assert_eq!(setup.calls(), [format!("plugin link {}", dir.display())]);
    assert_eq!(mode(&dir), 0o700, "a user-only directory");
    assert_eq!(mode(&dir.join("herdr-plugin.toml")), 0o600);
    assert_eq!(
        mode(&dir.join("piw-pane.sh")),
        0o700,
        "the launcher is executable by the user only"
    );
    let manifest = std::fs::read_to_string(dir.join("herdr-plugin.toml")).expect("manifest");
    for line in [
        r#"id = "pi-workflows.piw""#,
        r#"min_herdr_version = "0.7.0""#,
        r#"placement = "split""#,
        &format!(r#"command = ["{}"]"#, dir.join("piw-pane.sh").display()),
    ] {
        assert!(manifest.contains(line), "{line} in:\n{manifest}");
    }
    let before = identity(&dir);

    let second = expect_ok(&setup.run(&["setup"]));
    assert!(
        second.contains("no file changed") && second.contains("Nothing changed."),
        "{second}"
    );
    assert!(second.contains("nothing to register"), "{second}");
    assert_eq!(identity(&dir), before, "no file was rewritten");
    assert_eq!(setup.links(), 1, "linked once: {:?}", setup.calls());

    let json: Value = serde_json::from_str(expect_ok(&setup.run(&["setup", "--json"])).trim()).expect("JSON");
    assert_eq!(json["changed"], false);
    assert_eq!(json["herdr"], "alreadyLinked");
    assert_eq!(json["written"], serde_json::json!([]));
}

#[test]
fn sync_needs_a_setup_and_refreshes_a_changed_manifest() {
    let setup = Setup::new(true);
    let refused = setup.run(&["sync"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("not set up") && stderr.contains("pi-workflows herdr setup"),
        "{stderr}"
    );
    assert!(setup.calls().is_empty(), "nothing was asked of Herdr");

    expect_ok(&setup.run(&["setup"]));
    let manifest = setup.plugin_dir().join("herdr-plugin.toml");
    std::fs::write(&manifest, "id = \"edited\"\n").expect("edit");
    let synced = expect_ok(&setup.run(&["sync"]));
    assert!(synced.contains("Wrote herdr-plugin.toml in"), "{synced}");
    assert!(
        std::fs::read_to_string(&manifest)
            .expect("manifest")
            .contains("pi-workflows.piw")
    );
    assert_eq!(
        setup.links(),
        2,
        "a changed manifest is linked again: {:?}",
        setup.calls()
    );
    assert!(expect_ok(&setup.run(&["sync"])).contains("Nothing changed."));
    assert_eq!(setup.links(), 2);
}

#[test]
fn without_herdr_the_files_are_ready_and_the_output_says_how_to_link_them() {
    let setup = Setup::new(false);
    let dir = setup.plugin_dir();
    let first = expect_ok(&setup.run(&["setup"]));
    assert!(first.contains("Herdr was not found on PATH"), "{first}");
    assert!(
        first.contains(&format!("herdr plugin link {}", dir.display())),
        "{first}"
    );
    assert!(dir.join("herdr-plugin.toml").is_file());
    let again = expect_ok(&setup.run(&["setup"]));
    assert!(again.contains("Nothing changed."), "{again}");
}

#[test]
fn herdrs_refusal_and_a_link_in_place_of_the_directory_are_clear_errors() {
    let setup = Setup::new(true);
    let refused = setup
        .command(&["setup"])
        .env("FAKE_HERDR_REFUSE", "1")
        .output()
        .expect("run");
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("herdr plugin link") && stderr.contains("plugin requires Herdr 0.7.0"),
        "{stderr}"
    );

    let other = Setup::new(true);
    std::fs::create_dir_all(other.root.path().join("config")).expect("config");
    std::os::unix::fs::symlink("/tmp", other.plugin_dir()).expect("symlink");
    let refused = other.run(&["setup"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not a directory"));
    assert!(other.calls().is_empty());
}

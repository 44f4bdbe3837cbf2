//! Links the `pi-workflows` binary with the functions a server runs placed together, before
//! the rest of its code (Linux only; docs/PERFORMANCE.md, thirty-third round).
//!
//! Why: the kernel maps a binary's code 64 KiB around each first touch of a page
//! ("fault-around"), so code scattered through the 8 MB text left most of it resident. The
//! functions are listed in `link/hot-text.txt` (written by `link/profile-hot-text.sh`) as
//! section-name patterns; this script turns them into a linker script that only adds an
//! output section before `.text` (`INSERT BEFORE`), so a function the list does not match is
//! linked where it always was, and a stale list costs memory, never correctness.
//! `PI_WORKFLOWS_HOT_TEXT=off` links without it, as does a build set to link with mold or gold.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const HOT_TEXT_LIST: &str = "link/hot-text.txt";
/// A list is a profile of one server's functions, not of every function (about 3,000 now).
const PATTERNS_MAX: usize = 20_000;
/// Mangled names run long, but not this long.
const PATTERN_BYTES_MAX: usize = 1_024;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={HOT_TEXT_LIST}");
    println!("cargo:rerun-if-env-changed=PI_WORKFLOWS_HOT_TEXT");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let off = std::env::var("PI_WORKFLOWS_HOT_TEXT").is_ok_and(|value| value == "off");
    if !linux || off || !linker_takes_insert_scripts() {
        return;
    }
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let Ok(list) = std::fs::read_to_string(manifest_dir.join(HOT_TEXT_LIST)) else {
        return;
    };
    let patterns = patterns(&list);
    if patterns.is_empty() {
        return;
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let script = out_dir.join("hot-text.ld");
    std::fs::write(&script, linker_script(&patterns)).expect("write the hot-text linker script to OUT_DIR");
    link_with(&script);
}

/// The list's patterns in order, comments and blank lines left out. A line a linker script
/// would read as syntax fails the build: the list is generated, so such a line is a mistake.
fn patterns(list: &str) -> Vec<&str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '*');
    let patterns: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    for (index, pattern) in patterns.iter().enumerate() {
        assert!(
            pattern.len() <= PATTERN_BYTES_MAX && pattern.chars().all(allowed),
            "{HOT_TEXT_LIST}: pattern {} is not a section-name pattern (letters, digits, _ . $ *, at most \
             {PATTERN_BYTES_MAX} bytes); regenerate the list with link/profile-hot-text.sh",
            index + 1
        );
    }
    assert!(
        patterns.len() <= PATTERNS_MAX,
        "{HOT_TEXT_LIST}: {} patterns, more than {PATTERNS_MAX}; a profile lists what a server runs",
        patterns.len()
    );
    patterns
}

/// One input-section statement per pattern, so the sections follow the list's order (within
/// one statement a linker keeps the input order). A `#[cold]` function's section is named
/// `.text.unlikely.<name>`.
fn linker_script(patterns: &[&str]) -> String {
    let mut script = String::from("SECTIONS\n{\n  .text.hot :\n  {\n");
    for pattern in patterns {
        let _ = writeln!(script, "    *(.text.{pattern} .text.unlikely.{pattern})");
    }
    script.push_str("  }\n}\nINSERT BEFORE .text;\n");
    script
}

/// lld (Rust's default linker on x86_64 Linux) and GNU ld take a script of `INSERT`ed
/// sections; mold and gold do not, so a build set up to link with either links without it.
fn linker_takes_insert_scripts() -> bool {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_default();
    !["mold", "gold"]
        .iter()
        .any(|name| flags.contains(name) || linker.contains(name))
}

fn link_with(script: &Path) {
    println!("cargo:rustc-link-arg-bin=pi-workflows=-Wl,-T,{}", script.display());
}

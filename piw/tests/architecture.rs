//! piw is a protocol client only (spec "Live client protocol"): no source file reaches the
//! root crate's store, SQLite or the database file.

use std::path::Path;

fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn piw_never_touches_the_store_or_sqlite() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    assert!(files.len() > 10, "found the sources");
    let forbidden = ["pi_workflows::store", "rusqlite", "state.sqlite", "DATABASE_FILE"];
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for word in forbidden {
            assert!(!text.contains(word), "{} mentions {word}", file.display());
        }
    }
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).expect("manifest");
    assert!(
        !manifest.contains("rusqlite"),
        "piw depends on no SQLite crate directly"
    );
}

#[test]
fn piw_has_the_version_of_the_server_it_checks_in_hello() {
    // `hello.packageVersion` must equal piw's own version (one workspace, one release).
    let root = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml")).expect("root");
    let root: toml::Table = toml::from_str(&root).expect("root manifest");
    let version = root["package"]["version"].as_str().expect("version");
    assert_eq!(version, piw::connection::client::PACKAGE_VERSION);
}

//! Where the TypeScript half lives: the `pi-workflows` npm package (`dist/runner-main.js`,
//! `dist/resolver-main.js`) and the `node` that runs it.
//!
//! Search order: `PI_WORKFLOWS_PACKAGE_DIR`; then `packages/pi-workflows` or
//! `lib/pi-workflows` next to an ancestor of this executable (a source checkout or an
//! install prefix). `node` is `PI_WORKFLOWS_NODE`, else the first `node` on `PATH`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub const PACKAGE_DIR_ENV: &str = "PI_WORKFLOWS_PACKAGE_DIR";
pub const NODE_ENV: &str = "PI_WORKFLOWS_NODE";
/// The bundle cache of the resolver and runner children (a user-only directory).
pub const CACHE_DIR_ENV: &str = "PI_WORKFLOWS_CACHE_DIR";
/// How many ancestors of the executable are searched for the package.
const ANCESTORS_MAX: usize = 6;

/// A Node entry point of the package, ready to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeProgram {
    pub node: PathBuf,
    pub script: PathBuf,
}

impl NodeProgram {
    pub fn args(&self) -> Vec<OsString> {
        vec![self.script.clone().into_os_string()]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error(
        "the pi-workflows TypeScript package was not found (looked for {entry} via ${PACKAGE_DIR_ENV} and next to this executable); \
         build it with `npm --prefix packages/pi-workflows ci && npm --prefix packages/pi-workflows run build`, or set ${PACKAGE_DIR_ENV}"
    )]
    NotFound { entry: &'static str },
    #[error("`node` was not found on PATH; install Node 20 or set ${NODE_ENV}")]
    NodeNotFound,
}

/// The package's built entry `entry` (e.g. `runner-main.js`) and the node to run it.
pub fn node_program(entry: &'static str) -> Result<NodeProgram, PackageError> {
    let script = package_dirs()
        .into_iter()
        .map(|dir| dir.join("dist").join(entry))
        .find(|path| path.is_file())
        .ok_or(PackageError::NotFound { entry })?;
    Ok(NodeProgram { node: node()?, script })
}

fn package_dirs() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os(PACKAGE_DIR_ENV).filter(|dir| !dir.is_empty()) {
        return vec![PathBuf::from(dir)];
    }
    let Ok(exe) = std::env::current_exe() else {
        return Vec::new();
    };
    exe.ancestors()
        .skip(1)
        .take(ANCESTORS_MAX)
        .flat_map(|dir| [dir.join("packages/pi-workflows"), dir.join("lib/pi-workflows")])
        .collect()
}

fn node() -> Result<PathBuf, PackageError> {
    if let Some(node) = std::env::var_os(NODE_ENV).filter(|node| !node.is_empty()) {
        return Ok(PathBuf::from(node));
    }
    let path = std::env::var_os("PATH").ok_or(PackageError::NodeNotFound)?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("node"))
        .find(|candidate| is_executable(candidate))
        .ok_or(PackageError::NodeNotFound)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

//! Run settings: what a workflow declares changeable while it runs, and the JSON Patch
//! (RFC 6902) changes clients make to a run's copy (`run.changeSettings`).
//!
//! A workflow declares `settings: {initial, paths}` in its definition snapshot: `initial` is
//! a JSON object, `paths` grants operations (`add`, `remove`, `replace`) at JSON Pointers.
//! Everything else is denied. A change is checked against the declaration, applied to a copy
//! and bounded before anything is stored; each node attempt sees one frozen copy.
//!
//! Architecture Invariant: pure functions of JSON values — no I/O, no store, no workflow code.

mod patch;

pub use patch::{PatchOp, parse_patch};
use patch::{apply_op, replaces_existing};

use serde_json::Value;

/// A settings value (canonical JSON, UTF-8 bytes).
pub const SETTINGS_BYTES_MAX: usize = 256 * 1024;
/// Operations in one patch.
pub const PATCH_OPS_MAX: usize = 256;
/// One patch, canonical JSON.
pub const PATCH_BYTES_MAX: usize = 64 * 1024;
/// One JSON Pointer, UTF-8 bytes.
pub const POINTER_BYTES_MAX: usize = 1024;
/// Declared changeable paths of one workflow.
pub const DECLARED_PATHS_MAX: usize = 64;
/// Nesting levels of a settings value: far below the JSON parser's 128, so a stored version
/// always reads back (a patch could otherwise stack two deep values into an unreadable one).
pub const SETTINGS_DEPTH_MAX: usize = 32;

/// Why a declaration or a change was refused. `code()` is the client error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("the workflow's settings declaration is invalid: {0}")]
    InvalidDeclaration(String),
    #[error("the patch is invalid: {0}; send a JSON Patch array of add, remove, replace or test operations")]
    InvalidPatch(String),
    #[error(
        "operation {index} ({op} {path}) is not allowed: the workflow declares no path at or above it that allows {op}; \
         see the run's settings page for what may change"
    )]
    Forbidden {
        index: usize,
        op: &'static str,
        path: String,
    },
    #[error("operation {index} (test {path}) failed: the value there differs; read the settings again and retry")]
    TestFailed { index: usize, path: String },
    #[error("operation {index} ({op} {path}) cannot apply: {why}")]
    NotApplicable {
        index: usize,
        op: &'static str,
        path: String,
        why: String,
    },
    #[error(
        "{what} is {bytes} bytes, above the limit of {max} bytes; keep large data in files and put their paths in the settings"
    )]
    TooLarge {
        what: &'static str,
        bytes: usize,
        max: usize,
    },
    #[error("{what} nests deeper than {SETTINGS_DEPTH_MAX} levels; flatten it")]
    TooDeep { what: &'static str },
    #[error("this run's workflow declares no changeable settings (defineWorkflow({{settings}}))")]
    NotDeclared,
    #[error("the run ended ({status}); settings change only while a run is active (restart it to run again)")]
    RunEnded { status: String },
}

impl SettingsError {
    /// The client protocol error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidDeclaration(_) => "invalidDefinition",
            Self::InvalidPatch(_) => "invalidRequest",
            Self::Forbidden { .. } => "settingsForbidden",
            Self::TestFailed { .. } => "settingsTestFailed",
            Self::NotApplicable { .. } => "settingsNotApplicable",
            Self::TooLarge { .. } | Self::TooDeep { .. } => "tooLarge",
            Self::NotDeclared => "noSettings",
            Self::RunEnded { .. } => "runEnded",
        }
    }
}

/// One declared changeable path and the operations it grants at or below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGrant {
    pub pointer: String,
    tokens: Vec<String>,
    pub add: bool,
    pub remove: bool,
    pub replace: bool,
}

/// What a patch operation does to the document, for the grant check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Add,
    Remove,
    Replace,
}

impl Effect {
    fn name(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Remove => "remove",
            Self::Replace => "replace",
        }
    }

    /// What `op` does to `document` (`None` for a test, which changes nothing). An `add`
    /// onto an existing object member replaces it (RFC 6902), so it counts as a replace.
    fn of(op: &PatchOp, document: &Value) -> Option<Self> {
        match op {
            PatchOp::Test { .. } => None,
            PatchOp::Add { tokens, .. } if replaces_existing(document, tokens) => Some(Self::Replace),
            PatchOp::Add { .. } => Some(Self::Add),
            PatchOp::Remove { .. } => Some(Self::Remove),
            PatchOp::Replace { .. } => Some(Self::Replace),
        }
    }
}

impl PathGrant {
    fn allows(&self, effect: Effect, tokens: &[String]) -> bool {
        let granted = match effect {
            Effect::Add => self.add,
            Effect::Remove => self.remove,
            Effect::Replace => self.replace,
        };
        granted && tokens.starts_with(&self.tokens)
    }
}

/// A workflow's settings declaration, from its definition snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Declaration {
    pub initial: Value,
    pub grants: Vec<PathGrant>,
}

impl Declaration {
    /// The declaration in a definition snapshot (`snapshot.settings`), `None` when the
    /// workflow declares no settings.
    pub fn of_snapshot(snapshot: &Value) -> Result<Option<Self>, SettingsError> {
        match snapshot.get("settings") {
            None | Some(Value::Null) => Ok(None),
            Some(declared) => Self::parse(declared).map(Some),
        }
    }

    /// `{initial: {...}, paths: [{path, allow: ["add" | "remove" | "replace", ...]}]}`.
    pub fn parse(declared: &Value) -> Result<Self, SettingsError> {
        let invalid = |why: &str| SettingsError::InvalidDeclaration(why.to_string());
        let initial = declared
            .get("initial")
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        if !initial.is_object() {
            return Err(invalid("settings.initial must be a JSON object"));
        }
        check_size("settings.initial", &initial, SETTINGS_BYTES_MAX)?;
        check_depth("settings.initial", &initial)?;
        let paths = match declared.get("paths") {
            None => &Vec::new(),
            Some(Value::Array(paths)) => paths,
            Some(_) => return Err(invalid("settings.paths must be a list")),
        };
        if paths.len() > DECLARED_PATHS_MAX {
            return Err(invalid(&format!(
                "at most {DECLARED_PATHS_MAX} settings paths may be declared"
            )));
        }
        let grants = paths.iter().map(parse_grant).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { initial, grants })
    }

    /// The declaration as the settings page shows it (paths and their operations).
    pub fn paths_json(&self) -> Value {
        Value::Array(
            self.grants
                .iter()
                .map(|grant| {
                    let allow: Vec<&str> = [("add", grant.add), ("remove", grant.remove), ("replace", grant.replace)]
                        .into_iter()
                        .filter_map(|(op, on)| on.then_some(op))
                        .collect();
                    serde_json::json!({ "path": grant.pointer, "allow": allow })
                })
                .collect(),
        )
    }

    /// Check each operation against the grants on the document as the operations before it
    /// left it, and apply it to a copy of `current`: all or nothing, and the result stays an
    /// object within the size and depth limits. A `test` is always allowed.
    pub fn change(&self, current: &Value, patch: &[PatchOp]) -> Result<Value, SettingsError> {
        let mut changed = current.clone();
        for (index, op) in patch.iter().enumerate() {
            let denied = Effect::of(op, &changed)
                .filter(|effect| !self.grants.iter().any(|grant| grant.allows(*effect, op.tokens())));
            if let Some(effect) = denied {
                return Err(SettingsError::Forbidden {
                    index,
                    op: effect.name(),
                    path: op.pointer().to_string(),
                });
            }
            apply_op(&mut changed, index, op)?;
        }
        if !changed.is_object() {
            return Err(SettingsError::NotApplicable {
                index: 0,
                op: "replace",
                path: String::new(),
                why: "the settings must stay a JSON object".to_string(),
            });
        }
        check_size("the changed settings", &changed, SETTINGS_BYTES_MAX)?;
        check_depth("the changed settings", &changed)?;
        Ok(changed)
    }
}

fn parse_grant(entry: &Value) -> Result<PathGrant, SettingsError> {
    let invalid = |why: String| SettingsError::InvalidDeclaration(why);
    let pointer = entry
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("each settings path needs a \"path\" JSON Pointer".to_string()))?;
    let tokens = patch::parse_pointer(pointer).map_err(|why| invalid(format!("settings path {pointer:?}: {why}")))?;
    let allow = entry.get("allow").and_then(Value::as_array).ok_or_else(|| {
        invalid(format!(
            "settings path {pointer:?} needs \"allow\": a list of add, remove, replace"
        ))
    })?;
    let mut grant = PathGrant {
        pointer: pointer.to_string(),
        tokens,
        add: false,
        remove: false,
        replace: false,
    };
    for op in allow {
        match op.as_str() {
            Some("add") => grant.add = true,
            Some("remove") => grant.remove = true,
            Some("replace") => grant.replace = true,
            _ => {
                return Err(invalid(format!(
                    "settings path {pointer:?} allows {op}: use add, remove or replace"
                )));
            }
        }
    }
    Ok(grant)
}

/// Refuse a value nested deeper than SETTINGS_DEPTH_MAX (a scalar is depth 0).
fn check_depth(what: &'static str, value: &Value) -> Result<(), SettingsError> {
    // Level by level, without recursion, whatever the input.
    let mut level: Vec<&Value> = vec![value];
    for _ in 0..=SETTINGS_DEPTH_MAX {
        level = level.into_iter().flat_map(children).collect();
        if level.is_empty() {
            return Ok(());
        }
    }
    Err(SettingsError::TooDeep { what })
}

fn children(value: &Value) -> Box<dyn Iterator<Item = &Value> + '_> {
    match value {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(map) => Box::new(map.values()),
        _ => Box::new(std::iter::empty()),
    }
}

/// Refuse a value whose canonical JSON is above `max` bytes.
pub fn check_size(what: &'static str, value: &Value, max: usize) -> Result<usize, SettingsError> {
    let bytes = crate::protocol::value_to_canonical_vec(value).len();
    if bytes > max {
        return Err(SettingsError::TooLarge { what, bytes, max });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;

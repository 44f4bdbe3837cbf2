//! JSON Patch (RFC 6902) over JSON Pointers (RFC 6901): `add`, `remove`, `replace` and `test`.
//! `move` and `copy` are refused: a grant names where a value may change, and a move would
//! change two places under one grant check. Applied to a copy, all or nothing.

use serde_json::Value;

use super::{PATCH_BYTES_MAX, PATCH_OPS_MAX, POINTER_BYTES_MAX, SettingsError};

/// The most of an unknown member's name a refusal quotes.
const MEMBER_NAME_SHOWN_BYTES_MAX: usize = 64;

/// One checked patch operation.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchOp {
    Add {
        pointer: String,
        tokens: Vec<String>,
        value: Value,
    },
    Remove {
        pointer: String,
        tokens: Vec<String>,
    },
    Replace {
        pointer: String,
        tokens: Vec<String>,
        value: Value,
    },
    Test {
        pointer: String,
        tokens: Vec<String>,
        value: Value,
    },
}

impl PatchOp {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Add { .. } => "add",
            Self::Remove { .. } => "remove",
            Self::Replace { .. } => "replace",
            Self::Test { .. } => "test",
        }
    }

    pub fn pointer(&self) -> &str {
        match self {
            Self::Add { pointer, .. }
            | Self::Remove { pointer, .. }
            | Self::Replace { pointer, .. }
            | Self::Test { pointer, .. } => pointer,
        }
    }

    pub fn tokens(&self) -> &[String] {
        match self {
            Self::Add { tokens, .. }
            | Self::Remove { tokens, .. }
            | Self::Replace { tokens, .. }
            | Self::Test { tokens, .. } => tokens,
        }
    }
}

/// Parse a JSON Pointer into its unescaped reference tokens (`""` is the whole document).
pub(super) fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.len() > POINTER_BYTES_MAX {
        return Err(format!("a JSON Pointer is at most {POINTER_BYTES_MAX} bytes"));
    }
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err("a JSON Pointer is empty or starts with \"/\"".to_string());
    };
    rest.split('/').map(unescape_token).collect()
}

fn unescape_token(token: &str) -> Result<String, String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            _ => return Err("\"~\" must be followed by 0 or 1 in a JSON Pointer".to_string()),
        }
    }
    Ok(out)
}

/// Parse and bound a patch: a list of at most PATCH_OPS_MAX operations, PATCH_BYTES_MAX bytes.
pub fn parse_patch(patch: &Value) -> Result<Vec<PatchOp>, SettingsError> {
    let invalid = |why: String| SettingsError::InvalidPatch(why);
    let Value::Array(ops) = patch else {
        return Err(invalid("the patch must be a list of operations".to_string()));
    };
    if ops.is_empty() || ops.len() > PATCH_OPS_MAX {
        return Err(invalid(format!(
            "a patch has 1 to {PATCH_OPS_MAX} operations, this one has {}",
            ops.len()
        )));
    }
    super::check_size("the patch", patch, PATCH_BYTES_MAX)?;
    ops.iter()
        .enumerate()
        .map(|(index, op)| parse_op(op).map_err(|why| invalid(format!("operation {index}: {why}"))))
        .collect()
}

fn parse_op(op: &Value) -> Result<PatchOp, String> {
    let Value::Object(fields) = op else {
        return Err("must be an object".to_string());
    };
    let pointer = fields
        .get("path")
        .and_then(Value::as_str)
        .ok_or("needs a \"path\" JSON Pointer")?;
    let tokens = parse_pointer(pointer)?;
    let pointer = pointer.to_string();
    let value = || {
        fields
            .get("value")
            .cloned()
            .ok_or_else(|| "needs a \"value\"".to_string())
    };
    let known: &[&str] = match fields.get("op").and_then(Value::as_str) {
        Some("add" | "replace" | "test") => &["op", "path", "value"],
        Some("remove") => &["op", "path"],
        Some("move" | "copy") => return Err("move and copy are not supported; use remove and add".to_string()),
        _ => return Err("\"op\" must be add, remove, replace or test".to_string()),
    };
    if let Some(extra) = fields.keys().find(|key| !known.contains(&key.as_str())) {
        // The name is the client's text: quote a bounded prefix, as every refusal does.
        let shown = crate::protocol::bounded_text(extra, MEMBER_NAME_SHOWN_BYTES_MAX);
        return Err(format!("unknown member {shown:?}"));
    }
    Ok(match fields["op"].as_str() {
        Some("add") => PatchOp::Add {
            pointer,
            tokens,
            value: value()?,
        },
        Some("remove") => PatchOp::Remove { pointer, tokens },
        Some("replace") => PatchOp::Replace {
            pointer,
            tokens,
            value: value()?,
        },
        _ => PatchOp::Test {
            pointer,
            tokens,
            value: value()?,
        },
    })
}

/// Apply operation `index` of a patch to `document` in place (the caller owns a copy; the
/// first failing operation refuses the whole patch).
pub(super) fn apply_op(document: &mut Value, index: usize, op: &PatchOp) -> Result<(), SettingsError> {
    let not_applicable = |why: String| SettingsError::NotApplicable {
        index,
        op: op.name(),
        path: op.pointer().to_string(),
        why,
    };
    match op {
        PatchOp::Add { tokens, value, .. } => add(document, tokens, value.clone()).map_err(not_applicable),
        PatchOp::Remove { tokens, .. } => remove(document, tokens).map(drop).map_err(not_applicable),
        PatchOp::Replace { tokens, value, .. } => {
            *locate(document, tokens).map_err(not_applicable)? = value.clone();
            Ok(())
        }
        PatchOp::Test { tokens, value, pointer } => match locate(document, tokens) {
            Ok(found) if json_equal(found, value) => Ok(()),
            // A missing location fails the test too (RFC 6902 4.6).
            _ => Err(SettingsError::TestFailed {
                index,
                path: pointer.clone(),
            }),
        },
    }
}

/// Whether an `add` at `tokens` would replace an existing object member (RFC 6902 4.1).
pub(super) fn replaces_existing(document: &Value, tokens: &[String]) -> bool {
    let Some((last, parent)) = tokens.split_last() else {
        return true; // the whole document
    };
    let mut current = document;
    for token in parent {
        current = match current {
            Value::Object(map) => match map.get(token) {
                Some(inner) => inner,
                None => return false,
            },
            Value::Array(items) => match array_index(token, items.len()) {
                Ok(index) => &items[index],
                Err(_) => return false,
            },
            _ => return false,
        };
    }
    matches!(current, Value::Object(map) if map.contains_key(last))
}

/// JSON equality as RFC 6902 4.6 defines it: numbers compare by value (`1` equals `1.0`).
fn json_equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
            (Some(x), Some(y), _, _) => x == y,
            (_, _, Some(x), Some(y)) => x == y,
            _ => a.as_f64() == b.as_f64(),
        },
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_equal(x, y)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(key, x)| b.get(key).is_some_and(|y| json_equal(x, y)))
        }
        _ => left == right,
    }
}

/// The value a pointer names; it must exist.
fn locate<'a>(document: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, String> {
    let mut current = document;
    for token in tokens {
        current = match current {
            Value::Object(map) => map.get_mut(token).ok_or_else(|| format!("no member {token:?}"))?,
            Value::Array(items) => {
                let index = array_index(token, items.len())?;
                &mut items[index]
            }
            _ => {
                return Err(format!(
                    "{token:?} is below a value that is neither an object nor a list"
                ));
            }
        };
    }
    Ok(current)
}

fn split_last(tokens: &[String]) -> Result<(&[String], &String), String> {
    match tokens.split_last() {
        Some((last, parent)) => Ok((parent, last)),
        None => Err("the whole settings document cannot be added or removed; change its members".to_string()),
    }
}

fn add(document: &mut Value, tokens: &[String], value: Value) -> Result<(), String> {
    let (parent, last) = split_last(tokens)?;
    match locate(document, parent)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
        }
        Value::Array(items) if last == "-" => items.push(value),
        Value::Array(items) => {
            let index = array_index(last, items.len() + 1)?;
            items.insert(index, value);
        }
        _ => return Err("the parent is neither an object nor a list".to_string()),
    }
    Ok(())
}

fn remove(document: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let (parent, last) = split_last(tokens)?;
    match locate(document, parent)? {
        Value::Object(map) => map.remove(last).ok_or_else(|| format!("no member {last:?}")),
        Value::Array(items) => {
            let index = array_index(last, items.len())?;
            Ok(items.remove(index))
        }
        _ => Err("the parent is neither an object nor a list".to_string()),
    }
}

/// A list index token: decimal without leading zeros, below `len`.
fn array_index(token: &str, len: usize) -> Result<usize, String> {
    let canonical = token == "0" || (!token.starts_with('0') && token.bytes().all(|b| b.is_ascii_digit()));
    match token.parse::<usize>() {
        Ok(index) if canonical && index < len => Ok(index),
        _ => Err(format!("{token:?} is not a list index below {len}")),
    }
}

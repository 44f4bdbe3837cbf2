//! JSON merge patches (RFC 7386) between two views of one run: a subscriber at a retained
//! revision gets the difference instead of a whole snapshot. Views carry no nulls (absent
//! and null mean the same there), so a patch is exact; `diff` refuses a target with nulls.

use serde_json::{Map, Value};

/// The merge patch that turns `from` into `to`; `None` when `to` holds a null a patch
/// cannot express (send a snapshot instead).
pub fn diff(from: &Value, to: &Value) -> Option<Value> {
    if has_null(to) {
        return None;
    }
    Some(diff_values(from, to))
}

fn diff_values(from: &Value, to: &Value) -> Value {
    let (Value::Object(from), Value::Object(to)) = (from, to) else {
        return to.clone();
    };
    let mut patch = Map::new();
    for key in from.keys().filter(|key| !to.contains_key(*key)) {
        patch.insert(key.clone(), Value::Null);
    }
    for (key, value) in to {
        match from.get(key) {
            Some(old) if old == value => {}
            Some(old) => {
                patch.insert(key.clone(), diff_values(old, value));
            }
            None => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(patch)
}

/// Apply a merge patch in place (RFC 7386 §2).
pub fn apply(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            apply(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn has_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.values().any(has_null),
        Value::Array(items) => items.iter().any(has_null),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_patch_turns_the_old_view_into_the_new_one() {
        let from = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}, "gone": true});
        let to = json!({"a": 1, "b": {"c": [1, 2, 3]}, "new": {"k": "v"}});
        let patch = diff(&from, &to).expect("no nulls");
        assert_eq!(
            patch,
            json!({"b": {"c": [1, 2, 3], "d": null}, "gone": null, "new": {"k": "v"}})
        );
        let mut applied = from.clone();
        apply(&mut applied, &patch);
        assert_eq!(applied, to);
    }

    #[test]
    fn equal_views_give_an_empty_patch_and_nulls_give_none() {
        let view = json!({"a": {"b": 1}});
        assert_eq!(diff(&view, &view), Some(json!({})));
        assert_eq!(diff(&view, &json!({"a": null})), None);
    }
}

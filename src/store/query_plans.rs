//! Tests of query plans: what a statement that runs on a short timer reads. A look made every
//! second (or every few seconds on an idle server) must read only live rows, through a key
//! or a partial index, so its cost does not grow with the retained history.

use std::sync::Arc;

use rusqlite::Connection;

use super::{Store, SystemClock};

/// The plan's steps that read a whole table or index (a `SCAN`, a `SEARCH` with no key, a
/// temporary sort), except a scan of a partial index, which holds only live rows.
pub fn whole_reads(conn: &Connection, sql: &str) -> Vec<String> {
    let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let unbound = std::iter::repeat_n(rusqlite::types::Null, plan.parameter_count());
    let details: Vec<String> = plan
        .query_map(rusqlite::params_from_iter(unbound), |row| row.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    details
        .into_iter()
        .filter(|detail| is_whole_read(conn, detail))
        .collect()
}

/// A `SEARCH` through a key or an index counts as live, a range too: it reads only what its
/// bounds admit (the looks' ranges are on partial indexes).
fn is_whole_read(conn: &Connection, detail: &str) -> bool {
    if detail.contains("(subquery") || detail == "SCAN CONSTANT ROW" {
        return false;
    }
    if detail.contains("TEMP B-TREE") {
        return true;
    }
    if detail.starts_with("SEARCH ") {
        return !detail.contains(" USING ");
    }
    let index = detail.split("INDEX ").nth(1).and_then(|rest| rest.split(' ').next());
    detail.starts_with("SCAN ") && !index.is_some_and(|index| is_partial(conn, index))
}

fn is_partial(conn: &Connection, index: &str) -> bool {
    conn.query_row(
        "SELECT instr(upper(replace(replace(sql, char(10), ' '), char(9), ' ')), ' WHERE ') > 0
         FROM sqlite_schema WHERE type = 'index' AND name = ?1",
        [index],
        |row| row.get(0),
    )
    .unwrap_or(false)
}

/// Run `check` on a read connection of a fresh store of this schema.
fn on_fresh_store(check: impl FnOnce(&Connection)) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.sqlite"), Arc::new(SystemClock)).unwrap();
    store
        .read(|conn| {
            check(conn);
            Ok(())
        })
        .unwrap();
}

/// Check `looks` (name, SQL) on a fresh store of this schema: none reads history.
pub fn assert_live_reads_only(looks: &[(&str, &str)]) {
    on_fresh_store(|conn| {
        for (name, sql) in looks {
            let whole = whole_reads(conn, sql);
            assert!(whole.is_empty(), "{name} reads history: {whole:?}");
        }
    });
}

#[test]
fn a_scan_of_every_row_is_a_whole_read_and_a_keyed_look_is_not() {
    on_fresh_store(|conn| {
        let all = whole_reads(conn, "SELECT count(*) FROM node_attempts WHERE node_type = 'compute'");
        assert!(!all.is_empty());
        let sorted = whole_reads(
            conn,
            "SELECT run_id FROM node_attempts WHERE run_id = ?1 ORDER BY node_type",
        );
        assert!(!sorted.is_empty());
        let keyed = whole_reads(conn, "SELECT status FROM node_attempts WHERE attempt_id = 'a'");
        assert!(keyed.is_empty(), "{keyed:?}");
        let partial = whole_reads(
            conn,
            "SELECT run_id FROM run_workers WHERE status IN ('starting', 'ready')",
        );
        assert!(partial.is_empty(), "{partial:?}");
    });
}

//! A resolver's answer given again for an unchanged workflow, without asking a resolver.
//!
//! A resolution is the workflow's file (found by name or path), its source identity (the
//! root and every mounted file with its SHA-256), the definition compiled from those sources
//! and the input as given. A resolver marks an answer reusable (`reuse`) only when no
//! workflow code ran for it (no input normalizer), and says what its finding of the file
//! rested on: the candidate path that was a file and the candidates before it that were not.
//! Before an answer is given again, this checks on disk that each of those holds and that
//! every source file hashes as it did; anything else is a miss, and the resolver answers.
//! The workflow code is never run here: this only reads files.
//!
//! On an idle server a resolver's round trip costs 4–13 ms (a Node process woken on cold
//! memory); these checks cost a few stats and a hash of the sources (docs/PERFORMANCE.md,
//! thirty-seventh round).
//!
//! Architecture Invariant: an answer is given again only after every check of its witness
//! passed on disk after the request arrived; a changed, added or removed byte of any source
//! file, a candidate that became a file, or a candidate that now leads elsewhere is a miss.
//! Only answers for the same target, project and raw input bytes are reused.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value};

/// Resolutions kept at once; the least recently used goes first.
pub const REUSE_ENTRIES_MAX: usize = 32;
/// The largest answer kept (its JSON and its witness's paths), and all kept answers
/// together: small beside an idle server's RSS.
pub const REUSE_ANSWER_BYTES_MAX: usize = 64 * 1024;
pub const REUSE_BYTES_MAX: usize = 256 * 1024;
/// The longest raw input a kept answer is keyed by.
pub const REUSE_INPUT_BYTES_MAX: usize = 4 * 1024;
/// Source files and bytes a check may read: a larger workflow is resolved every time.
pub const REUSE_SOURCE_FILES_MAX: usize = 64;
pub const REUSE_SOURCE_BYTES_MAX: u64 = 1024 * 1024;
/// The most discovery candidates a witness may name (two directories, four extensions).
const REUSE_SHADOWS_MAX: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReuseKey {
    target: String,
    project: String,
    input_json: Option<String>,
}

impl ReuseKey {
    /// The key of a request, or `None` when its input is too large to key by.
    pub fn of(target: &str, project: &str, input_json: Option<&str>) -> Option<Self> {
        if input_json.is_some_and(|input| input.len() > REUSE_INPUT_BYTES_MAX) {
            return None;
        }
        Some(Self {
            target: target.to_string(),
            project: project.to_string(),
            input_json: input_json.map(str::to_string),
        })
    }
}

/// What an answer rested on, checked on disk before it is given again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witness {
    /// The candidate path that was a file; its real path is the source root.
    candidate: PathBuf,
    /// Candidates looked at before it, none a file then.
    shadows: Vec<PathBuf>,
    /// Every source file (the root first, never empty) and its SHA-256, lowercase hex.
    files: Vec<(PathBuf, String)>,
}

impl Witness {
    /// The witness an answer carries, or `None` when it is not reusable or out of bounds.
    pub fn of_answer(answer: &Map<String, Value>) -> Option<Self> {
        let reuse = answer.get("reuse")?.as_object()?;
        let candidate = PathBuf::from(reuse.get("candidate")?.as_str()?);
        let shadows = reuse.get("shadows")?.as_array()?;
        if shadows.len() > REUSE_SHADOWS_MAX {
            return None;
        }
        let shadows = shadows
            .iter()
            .map(|shadow| shadow.as_str().map(PathBuf::from))
            .collect::<Option<Vec<_>>>()?;
        let source = answer.get("workflowSource")?.as_object()?;
        let root = source.get("root")?.as_object()?;
        let mounted = source.get("mounted")?.as_array()?;
        let files = std::iter::once(root)
            .chain(mounted.iter().filter_map(Value::as_object))
            .map(|file| {
                Some((
                    PathBuf::from(file.get("path")?.as_str()?),
                    file.get("hash")?.as_str()?.to_string(),
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        if files.len() != 1 + mounted.len() || files.len() > REUSE_SOURCE_FILES_MAX {
            return None;
        }
        Some(Self {
            candidate,
            shadows,
            files,
        })
    }

    /// The source root: the real path of the candidate found.
    fn root(&self) -> &Path {
        &self.files[0].0
    }

    /// The bytes of its paths and hashes.
    fn bytes(&self) -> usize {
        let path = |path: &PathBuf| path.as_os_str().len();
        path(&self.candidate)
            + self.shadows.iter().map(path).sum::<usize>()
            + self
                .files
                .iter()
                .map(|(file, hash)| path(file) + hash.len())
                .sum::<usize>()
    }

    /// Whether the files on disk still give the answer (blocking I/O: run off the async
    /// workers).
    pub fn holds(&self) -> bool {
        let finds_the_same_file = self.shadows.iter().all(|shadow| !is_file(shadow))
            && is_file(&self.candidate)
            && std::fs::canonicalize(&self.candidate).is_ok_and(|real| real == self.root());
        finds_the_same_file && self.sources_unchanged()
    }

    fn sources_unchanged(&self) -> bool {
        let mut budget = REUSE_SOURCE_BYTES_MAX;
        self.files
            .iter()
            .all(|(path, hash)| sha256_within(path, &mut budget).is_some_and(|now| now == *hash))
    }
}

/// Follows symbolic links, as the resolver's discovery does.
fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file())
}

/// The SHA-256 of a regular file if it fits in `budget` bytes (taken from it).
fn sha256_within(path: &Path, budget: &mut u64) -> Option<String> {
    // Non-blocking, so a source swapped for a FIFO cannot hold a blocking-pool thread in
    // `open` forever; only a regular file is read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    // One byte past the budget tells a file that is too large from one that fits.
    file.take(*budget + 1).read_to_end(&mut bytes).ok()?;
    *budget = budget.checked_sub(bytes.len() as u64)?;
    Some(crate::digest::sha256_hex(&bytes))
}

struct Entry {
    /// The answer's JSON: compact, and exactly bounded.
    answer: Box<[u8]>,
    witness: Witness,
    used: u64,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.answer.len() + self.witness.bytes()
    }
}

/// The kept resolutions (see the module's doc).
#[derive(Default)]
pub struct Reuse {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<ReuseKey, Entry>,
    uses: u64,
    /// `Entry::bytes` of all entries.
    bytes: usize,
}

impl Entries {
    fn remove(&mut self, key: &ReuseKey) {
        if let Some(entry) = self.by_key.remove(key) {
            self.bytes -= entry.bytes();
        }
    }

    fn over_bounds(&self) -> bool {
        self.by_key.len() > REUSE_ENTRIES_MAX || self.bytes > REUSE_BYTES_MAX
    }
}

impl Reuse {
    /// The kept answer of `key` and what to check before giving it (no I/O here).
    pub fn candidate(&self, key: &ReuseKey) -> Option<(Map<String, Value>, Witness)> {
        let mut entries = self.lock();
        entries.uses += 1;
        let used = entries.uses;
        let entry = entries.by_key.get_mut(key)?;
        entry.used = used;
        let answer = serde_json::from_slice(&entry.answer).ok()?;
        Some((answer, entry.witness.clone()))
    }

    /// Keeps a fresh answer when its resolver marked it reusable and it is small enough.
    pub fn remember(&self, key: ReuseKey, answer: &Map<String, Value>) {
        let mut entries = self.lock();
        entries.remove(&key);
        let Some(witness) = Witness::of_answer(answer) else {
            return;
        };
        let Ok(json) = serde_json::to_vec(answer) else {
            return;
        };
        entries.uses += 1;
        let entry = Entry {
            answer: json.into_boxed_slice(),
            witness,
            used: entries.uses,
        };
        if entry.bytes() > REUSE_ANSWER_BYTES_MAX {
            return;
        }
        entries.bytes += entry.bytes();
        entries.by_key.insert(key, entry);
        while entries.over_bounds() {
            let oldest = entries
                .by_key
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone());
            let Some(oldest) = oldest else { break };
            entries.remove(&oldest);
        }
        debug_assert!(!entries.over_bounds());
    }

    pub fn forget(&self, key: &ReuseKey) {
        self.lock().remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_key.len()
    }

    /// `Entry::bytes` of all kept answers.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A project with a root workflow, one mounted file, and the answer a resolver gives for
    /// it by name: the project candidate `.ts` was found; no candidate before it.
    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            std::fs::create_dir_all(dir.path().join(".pi/workflows/lib")).expect("workflow dir");
            let fixture = Self { dir };
            fixture.write("root.workflow.ts", "export default 1;\n");
            fixture.write("lib/helper.ts", "export const h = 1;\n");
            fixture
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(".pi/workflows").join(name)
        }

        fn write(&self, name: &str, text: &str) {
            std::fs::write(self.path(name), text).expect("write");
        }

        fn answer(&self, shadows: &[PathBuf]) -> Map<String, Value> {
            let file = |name: &str| {
                let path = std::fs::canonicalize(self.path(name)).expect("real path");
                let hash = crate::digest::sha256_hex(&std::fs::read(&path).expect("read"));
                json!({"path": path, "hash": hash})
            };
            let mut root = file("root.workflow.ts");
            root["kind"] = json!("file");
            let answer = json!({
                "name": "root",
                "workflowSource": {"root": root, "mounted": [file("lib/helper.ts")]},
                "definitionDigest": "sha256:00",
                "snapshot": {},
                "input": {},
                "reuse": {"candidate": self.path("root.workflow.ts"), "shadows": shadows},
            });
            answer.as_object().expect("object").clone()
        }

        fn witness(&self) -> Witness {
            Witness::of_answer(&self.answer(&[])).expect("a reusable answer")
        }
    }

    #[test]
    fn an_unchanged_workflow_holds_and_any_changed_byte_of_a_source_does_not() {
        let fixture = Fixture::new();
        assert!(fixture.witness().holds());
        let witness = fixture.witness();
        fixture.write("root.workflow.ts", "export default 2;\n");
        assert!(!witness.holds(), "the root changed");

        let fixture = Fixture::new();
        let witness = fixture.witness();
        fixture.write("lib/helper.ts", "export const h = 1;\n\n");
        assert!(!witness.holds(), "a mounted file grew by a byte");

        let fixture = Fixture::new();
        let witness = fixture.witness();
        std::fs::remove_file(fixture.path("lib/helper.ts")).expect("remove");
        assert!(!witness.holds(), "a mounted file is gone");
    }

    #[test]
    fn a_candidate_that_became_a_file_or_now_leads_elsewhere_is_a_miss() {
        let fixture = Fixture::new();
        let shadow = fixture.dir.path().join("earlier.workflow.ts");
        let witness = Witness::of_answer(&fixture.answer(std::slice::from_ref(&shadow))).expect("reusable");
        assert!(witness.holds(), "the earlier candidate is not a file");
        std::fs::write(&shadow, "export default 0;\n").expect("write the shadowing file");
        assert!(!witness.holds(), "an earlier candidate would now be found first");

        // The candidate found is a link; pointed at another file with the same bytes, the
        // root (its real path) is no longer the one the answer names.
        let fixture = Fixture::new();
        let target = fixture.path("root.workflow.ts");
        let twin = fixture.path("twin.workflow.ts");
        std::fs::copy(&target, &twin).expect("copy");
        let link = fixture.path("link.workflow.ts");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let mut answer = fixture.answer(&[]);
        answer["reuse"]["candidate"] = json!(link);
        let witness = Witness::of_answer(&answer).expect("reusable");
        assert!(witness.holds());
        std::fs::remove_file(&link).expect("unlink");
        std::os::unix::fs::symlink(&twin, &link).expect("symlink again");
        assert!(!witness.holds(), "the candidate leads to another file");
    }

    #[test]
    fn an_answer_without_reuse_or_out_of_bounds_is_never_kept() {
        let fixture = Fixture::new();
        let mut answer = fixture.answer(&[]);
        answer.remove("reuse");
        assert_eq!(Witness::of_answer(&answer), None, "an input normalizer ran: no reuse");
        let shadows: Vec<PathBuf> = (0..=REUSE_SHADOWS_MAX)
            .map(|n| PathBuf::from(format!("/x{n}")))
            .collect();
        assert_eq!(Witness::of_answer(&fixture.answer(&shadows)), None);
        let mut malformed = fixture.answer(&[]);
        malformed["workflowSource"]["mounted"] = json!([{"path": "/x"}]);
        assert_eq!(Witness::of_answer(&malformed), None, "a file without its hash");

        let reuse = Reuse::default();
        let key = ReuseKey::of("root", "/p", None).expect("key");
        reuse.remember(key.clone(), &answer);
        assert!(reuse.candidate(&key).is_none());
        assert!(ReuseKey::of("root", "/p", Some(&"x".repeat(REUSE_INPUT_BYTES_MAX + 1))).is_none());
    }

    #[test]
    fn a_source_swapped_for_a_fifo_is_a_miss_without_waiting_for_a_writer() {
        let fixture = Fixture::new();
        let witness = fixture.witness();
        let helper = fixture.path("lib/helper.ts");
        std::fs::remove_file(&helper).expect("remove");
        nix::unistd::mkfifo(&helper, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR).expect("mkfifo");
        assert!(
            !witness.holds(),
            "a FIFO is no source file (and opening it did not block)"
        );
    }

    #[test]
    fn a_source_larger_than_the_budget_is_resolved_every_time() {
        let fixture = Fixture::new();
        let large = "x".repeat(usize::try_from(REUSE_SOURCE_BYTES_MAX).expect("fits") + 1);
        fixture.write("lib/helper.ts", &large);
        assert!(!fixture.witness().holds());
    }

    #[test]
    fn the_kept_answers_are_bounded_and_the_least_recently_used_goes_first() {
        let fixture = Fixture::new();
        let answer = fixture.answer(&[]);
        let reuse = Reuse::default();
        let key = |n: usize| ReuseKey::of(&format!("w{n}"), "/p", None).expect("key");
        for n in 0..REUSE_ENTRIES_MAX {
            reuse.remember(key(n), &answer);
        }
        assert!(reuse.candidate(&key(0)).is_some(), "used again: now the newest");
        reuse.remember(key(REUSE_ENTRIES_MAX), &answer);
        assert_eq!(reuse.len(), REUSE_ENTRIES_MAX);
        assert!(reuse.candidate(&key(0)).is_some());
        assert!(reuse.candidate(&key(1)).is_none(), "the least recently used went");
        let (kept, witness) = reuse.candidate(&key(REUSE_ENTRIES_MAX)).expect("kept");
        assert_eq!(kept, answer);
        assert!(witness.holds());

        // Large answers: the byte bound evicts before the count does, and one above the
        // answer bound is never kept.
        let reuse = Reuse::default();
        let mut large = answer.clone();
        large.insert("snapshot".into(), json!("x".repeat(REUSE_ANSWER_BYTES_MAX / 2)));
        for n in 0..REUSE_ENTRIES_MAX {
            reuse.remember(key(n), &large);
            assert!(reuse.bytes() <= REUSE_BYTES_MAX && reuse.len() <= REUSE_ENTRIES_MAX);
        }
        assert!(reuse.len() < REUSE_ENTRIES_MAX, "{} answers of 32 KiB", reuse.len());
        assert!(
            reuse.candidate(&key(REUSE_ENTRIES_MAX - 1)).is_some(),
            "the newest is kept"
        );
        large.insert("snapshot".into(), json!("x".repeat(REUSE_ANSWER_BYTES_MAX)));
        reuse.remember(key(REUSE_ENTRIES_MAX - 1), &large);
        assert!(
            reuse.candidate(&key(REUSE_ENTRIES_MAX - 1)).is_none(),
            "too large: forgotten"
        );
    }
}

//! The seeded mutator the stable drivers share (`examples/smoke.rs`, `examples/differential_ts.rs`,
//! and the PRNG of `examples/server.rs`): a xorshift64* PRNG, the seed and dictionary readers,
//! the mutations (bit flips, interesting bytes, inserts, deletes, duplicated ranges, splices
//! with another seed, dictionary tokens), and the artifact writer. Same seed, same inputs.

use std::path::{Path, PathBuf};

/// Largest mutated input, like libFuzzer's default `-max_len` for these corpora.
pub const INPUT_MAX: usize = 8 * 1024;

/// xorshift64* (not cryptographic: reproducible inputs from a 64-bit seed).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
}

/// Bytes that matter to JSON, frames and UTF-8.
const INTERESTING: &[u8] = b"\n\0 \"\\{}[]:,-+.eE019~/\x7f\xff\xc3\xa9";

/// One mutant: a random seed, changed 1 to 4 times, cut to [`INPUT_MAX`] bytes.
pub fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], dictionary: &[Vec<u8>]) -> Vec<u8> {
    let mut input = seeds[rng.below(seeds.len())].clone();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = input.len();
        let at = rng.below(len + 1);
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => input.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            3 if len > 0 => {
                let end = (at + 1 + rng.below(16)).min(len);
                input.drain(at.min(len - 1)..end);
            }
            4 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(32)).min(len);
                let copy = input[start..end].to_vec();
                input.splice(at..at, copy);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                let tail = other[from..].to_vec();
                input.truncate(at);
                input.extend_from_slice(&tail);
            }
            6 | 7 if !dictionary.is_empty() => {
                let token = dictionary[rng.below(dictionary.len())].clone();
                input.splice(at..at, token);
            }
            _ if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            _ => input.push(rng.next() as u8),
        }
    }
    input.truncate(INPUT_MAX);
    input
}

/// The files of `fuzz/seeds/<name>/` and `fuzz/corpus/<name>/` (each sorted by name), then `{}\n`.
pub fn read_seeds(root: &Path, name: &str) -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for dir in [root.join("seeds").join(name), root.join("corpus").join(name)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.file_name().is_none_or(|file| file != "README.md"))
            .collect();
        paths.sort();
        seeds.extend(paths.iter().filter_map(|path| std::fs::read(path).ok()));
    }
    seeds.push(b"{}\n".to_vec());
    seeds
}

/// libFuzzer dictionary lines: `"token"` or `name="token"`, with `\xNN` and `\"` escapes.
pub fn read_dictionary(path: &Path) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let start = line.find('"')?;
            let end = line.rfind('"')?;
            (!line.starts_with('#') && end > start).then(|| unescape(&line[start + 1..end]))
        })
        .collect()
}

fn unescape(token: &str) -> Vec<u8> {
    let bytes = token.as_bytes();
    let mut out = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        match (bytes[index], bytes.get(index + 1)) {
            (b'\\', Some(b'x')) if index + 3 < bytes.len() + 1 => {
                let hex = std::str::from_utf8(&bytes[index + 2..(index + 4).min(bytes.len())]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                index += 4;
            }
            (b'\\', Some(&next)) => {
                out.push(next);
                index += 2;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    out
}

/// FNV-1a, for per-target PRNG streams and artifact names.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Saves a finding as `fuzz/artifacts/<name>/<prefix>-<fnv of input>` and returns its path.
pub fn save(root: &Path, name: &str, prefix: &str, input: &[u8]) -> PathBuf {
    let dir = root.join("artifacts").join(name);
    let path = dir.join(format!("{prefix}-{:016x}", fnv(input)));
    if std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, input))
        .is_err()
    {
        eprintln!("could not save {}", path.display());
    }
    path
}

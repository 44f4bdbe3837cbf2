//! A coverage-less fuzz driver on stable Rust (no libFuzzer, no `-Z` flags): for each target
//! it runs every seed (built from `protocol/fixtures/`, `fuzz/seeds/<target>/`, and
//! `fuzz/corpus/<target>/` when present),
//! then mutates them with a seeded xorshift PRNG (bit flips, interesting bytes, inserts,
//! deletes, duplicated ranges, splices with another seed, dictionary tokens) for the given
//! time. A panic prints the input (escaped) and saves it to `fuzz/artifacts/<target>/`.
//!
//!   cargo run --release --example smoke -- [SECONDS_PER_TARGET] [TARGET|all] [SEED]
//!   cargo run --release --example smoke -- replay TARGET FILE...
//!
//! Exit status 1 on a finding, 0 otherwise; it prints the executions per target.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pi_workflows_fuzz::TARGETS;

/// Largest mutated input, like libFuzzer's default `-max_len` for these corpora.
const INPUT_MAX: usize = 8 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, name, files @ ..] = args.as_slice()
        && mode == "replay"
    {
        replay(name, files);
        return;
    }
    let seconds: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let only = args.get(1).filter(|name| name.as_str() != "all").cloned();
    let seed: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_ef01);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dictionary = read_dictionary(&root.join("dict/client.dict"));
    // Quiet panics: a finding is reported once, below.
    std::panic::set_hook(Box::new(|_| {}));
    let mut failed = false;
    let mut total = 0u64;
    for (name, target) in TARGETS {
        if only.as_deref().is_some_and(|only| only != *name) {
            continue;
        }
        let mut seeds = pi_workflows_fuzz::fixture_seeds(name, root.parent().unwrap_or(root));
        seeds.extend(read_seeds(root, name));
        let mut rng = Rng(seed ^ fnv(name.as_bytes()));
        let started = Instant::now();
        let budget = Duration::from_secs_f64(seconds);
        let mut executions = 0u64;
        let mut finding = None;
        for input in &seeds {
            executions += 1;
            if run(*target, input).is_err() {
                finding = Some(input.clone());
                break;
            }
        }
        while finding.is_none() && started.elapsed() < budget {
            for _ in 0..64 {
                let input = mutate(&mut rng, &seeds, &dictionary);
                executions += 1;
                if run(*target, &input).is_err() {
                    finding = Some(input);
                    break;
                }
            }
        }
        total += executions;
        let rate = executions as f64 / started.elapsed().as_secs_f64().max(1e-9);
        match finding {
            None => println!(
                "{name:<16} ok    {executions:>10} executions  {rate:>9.0}/s  ({} seeds)",
                seeds.len()
            ),
            Some(input) => {
                failed = true;
                let saved = save(root, name, &input);
                let shown: String = input.escape_ascii().to_string().chars().take(300).collect();
                println!(
                    "{name:<16} PANIC after {executions} executions; input ({} bytes) saved to {}: {shown}",
                    input.len(),
                    saved.display()
                );
                println!(
                    "{:<16} replay it: cargo run --release --example smoke -- replay {name} {}",
                    "",
                    saved.display()
                );
            }
        }
    }
    println!("total            {total:>16} executions");
    std::process::exit(i32::from(failed));
}

/// `smoke replay TARGET FILE...`: run inputs with the default panic hook (message, backtrace).
fn replay(name: &str, files: &[String]) {
    let Some((_, target)) = TARGETS.iter().find(|(target, _)| *target == name) else {
        eprintln!("unknown target {name}");
        std::process::exit(2);
    };
    for file in files {
        let input = std::fs::read(file).unwrap_or_else(|err| panic!("{file}: {err}"));
        target(&input);
        println!("{file}: ok");
    }
}

fn run(target: fn(&[u8]), input: &[u8]) -> Result<(), ()> {
    std::panic::catch_unwind(|| target(input)).map_err(|_| ())
}

fn read_seeds(root: &Path, name: &str) -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for dir in [root.join("seeds").join(name), root.join("corpus").join(name)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        paths.sort();
        seeds.extend(paths.iter().filter_map(|path| std::fs::read(path).ok()));
    }
    seeds.push(b"{}\n".to_vec());
    seeds
}

/// libFuzzer dictionary lines: `"token"` or `name="token"`, with `\xNN` and `\"` escapes.
fn read_dictionary(path: &Path) -> Vec<Vec<u8>> {
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

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
}

const INTERESTING: &[u8] = b"\n\0 \"\\{}[]:,-+.eE019~/\x7f\xff\xc3\xa9";

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], dictionary: &[Vec<u8>]) -> Vec<u8> {
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

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn save(root: &Path, name: &str, input: &[u8]) -> PathBuf {
    let dir = root.join("artifacts").join(name);
    let path = dir.join(format!("crash-{:016x}", fnv(input)));
    if std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, input))
        .is_err()
    {
        eprintln!("could not save {}", path.display());
    }
    path
}

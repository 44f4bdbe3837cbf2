//! A coverage-less fuzz driver on stable Rust (no libFuzzer, no `-Z` flags): for each target
//! it runs every seed (built from `protocol/fixtures/`, `fuzz/seeds/<target>/`, and
//! `fuzz/corpus/<target>/` when present),
//! then mutates them with the seeded mutator of `src/mutator.rs` (bit flips, interesting
//! bytes, inserts, deletes, duplicated ranges, splices with another seed, dictionary tokens)
//! for the given time. A panic prints the input (escaped) and saves it to `fuzz/artifacts/<target>/`.
//!
//!   cargo run --release --example smoke -- [SECONDS_PER_TARGET] [TARGET|all] [SEED]
//!   cargo run --release --example smoke -- replay TARGET FILE...
//!
//! Exit status 1 on a finding, 0 otherwise; it prints the executions per target.

use std::path::Path;
use std::time::{Duration, Instant};

use pi_workflows_fuzz::TARGETS;
use pi_workflows_fuzz::mutator::{Rng, fnv, mutate, read_dictionary, read_seeds, save};

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
                let saved = save(root, name, "crash", &input);
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

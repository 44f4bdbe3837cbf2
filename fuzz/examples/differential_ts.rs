//! Differential fuzzing of the TypeScript client decoder against the Rust one, on stable Rust.
//!
//! Both sides get the same bytes (one line, newline included or not):
//!
//! - Rust: `decode_client_message` (`decode_frame` + the envelope validation + typed decoding)
//!   and, for an accepted message, `encode_client_message`;
//! - TypeScript: `decodeMessage` (`decodeFrame` + `validateMessage`) and `encodeMessage` from
//!   the built client (`packages/pi-workflows/dist/client/protocol.js`), in ONE long-lived Node
//!   process running `fuzz/ts/decode.mjs`, fed in batches of base64 lines.
//!
//! They must agree on the outcome: accepted with the same re-encoded bytes, or refused at the
//! same layer (frame or envelope) with the same error code. Anything the TypeScript side throws
//! that is not a `FrameError` / `ProtocolError`, a Node exit, or a batch that takes longer than
//! [`BATCH_TIMEOUT`] is a finding too. Error message texts are not compared: they are free
//! text that differs by design (Rust quotes offsets and serde diagnostics, TypeScript the
//! `JSON.parse` message); the codes are the shared contract (`protocol/fixtures`).
//!
//! Inputs: the seeds of the `envelope` and `canonical` targets (`protocol/fixtures/`), the files
//! of `fuzz/seeds/{envelope,canonical,differential_ts}/`, then mutants from the shared mutator
//! (`src/mutator.rs`); a mutant without a trailing newline gets one 7 times in 8.
//!
//!   cargo run --release --example differential_ts -- [SECONDS] [SEED]
//!   cargo run --release --example differential_ts -- replay FILE...
//!
//! Needs `node` on PATH (or `$NODE`) and the built client (`npm --prefix packages/pi-workflows
//! run build`). Exit 1 on a finding (saved to `fuzz/artifacts/differential_ts/`), 2 when Node or
//! the built client is missing, 0 otherwise.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use pi_workflows::protocol::{decode_client_message, encode_client_message};
use pi_workflows_fuzz::fixture_seeds;
use pi_workflows_fuzz::mutator::{Rng, fnv, mutate, read_dictionary, read_seeds, save};
use serde_json::Value;

const NAME: &str = "differential_ts";
/// Inputs per round trip to Node.
const BATCH: usize = 1024;
/// Longest a batch may take (inputs are at most 8 KiB; Node answers one in microseconds).
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest Node may take to start and import the client.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What one decoder made of one line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Accepted; the bytes of the message re-encoded.
    Accepted(Vec<u8>),
    /// Refused: `frame` or `protocol` (the envelope), and the error code.
    Refused(String, String),
    /// Accepted, but the re-encoding failed (`class:code`).
    EncodeError(String),
    /// Anything else: a panic or an exception that is not one of the decoder's errors.
    Crash(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Accepted(bytes) => write!(f, "accepted, re-encoded as {}", shown(bytes)),
            Self::Refused(class, code) => write!(f, "refused: {class} error {code}"),
            Self::EncodeError(what) => write!(f, "accepted, but re-encoding failed: {what}"),
            Self::Crash(what) => write!(f, "crashed: {what}"),
        }
    }
}

fn rust_outcome(line: &[u8]) -> Outcome {
    let decoded = std::panic::catch_unwind(|| decode_client_message(line));
    match decoded {
        Err(_) => Outcome::Crash("decode_client_message panicked".to_owned()),
        Ok(Err(error)) => Outcome::Refused(class_of(error.is_frame_error()), error.code().to_owned()),
        Ok(Ok(message)) => match encode_client_message(&message) {
            Ok(bytes) => Outcome::Accepted(bytes),
            Err(error) => Outcome::EncodeError(format!("{}:{}", class_of(error.is_frame_error()), error.code())),
        },
    }
}

fn class_of(frame: bool) -> String {
    (if frame { "frame" } else { "protocol" }).to_owned()
}

/// One answer line of `decode.mjs`.
fn ts_outcome(answer: &str) -> Outcome {
    let Ok(value) = serde_json::from_str::<Value>(answer) else {
        return Outcome::Crash(format!("unreadable answer {answer:?}"));
    };
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    if let Some(base64) = text("ok") {
        return match base64_decode(&base64) {
            Some(bytes) => Outcome::Accepted(bytes),
            None => Outcome::Crash(format!("bad base64 in {answer:?}")),
        };
    }
    if let (Some(class), Some(code)) = (text("error"), text("code")) {
        return Outcome::Refused(class, code);
    }
    if let Some(what) = text("encodeError") {
        return Outcome::EncodeError(what);
    }
    Outcome::Crash(text("crash").unwrap_or_else(|| format!("unexpected answer {answer:?}")))
}

/// The long-lived Node process: a writer thread feeds its stdin (so a hung Node cannot block
/// the driver) and a reader thread collects its answer lines.
struct Node {
    child: Child,
    batches: Sender<String>,
    answers: Receiver<Option<String>>,
}

impl Node {
    fn start(root: &Path) -> Result<Self, String> {
        let node = std::env::var("NODE").unwrap_or_else(|_| "node".to_owned());
        let script = root.join("ts/decode.mjs");
        let mut child = Command::new(&node)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| format!("cannot run {node}: {error}"))?;
        let stdin: ChildStdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (batches, to_write) = channel::<String>();
        std::thread::spawn(move || {
            let mut stdin = stdin;
            for batch in to_write {
                if stdin.write_all(batch.as_bytes()).and_then(|()| stdin.flush()).is_err() {
                    return;
                }
            }
        });
        let (answered, answers) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(line) => {
                        if answered.send(Some(line)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = answered.send(None);
        });
        let mut node = Self {
            child,
            batches,
            answers,
        };
        match node.answers.recv_timeout(START_TIMEOUT) {
            Ok(Some(line)) if line.contains("\"ready\"") => Ok(node),
            other => {
                node.stop();
                Err(format!(
                    "{} did not start ({other:?}); build the client first: npm --prefix packages/pi-workflows run build",
                    script.display()
                ))
            }
        }
    }

    /// The TypeScript outcome of each input, or why the batch failed (exit, hang, garbage).
    fn run(&mut self, inputs: &[Vec<u8>]) -> Result<Vec<Outcome>, String> {
        let mut batch = String::with_capacity(inputs.iter().map(|input| input.len() * 4 / 3 + 5).sum());
        for input in inputs {
            base64_encode(input, &mut batch);
            batch.push('\n');
        }
        self.batches
            .send(batch)
            .map_err(|_| "Node's stdin is closed".to_owned())?;
        let deadline = Instant::now() + BATCH_TIMEOUT;
        let mut outcomes = Vec::with_capacity(inputs.len());
        while outcomes.len() < inputs.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.answers.recv_timeout(left) {
                Ok(Some(line)) => outcomes.push(ts_outcome(&line)),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!(
                        "Node exited ({status}) after answering {} of {} inputs",
                        outcomes.len(),
                        inputs.len()
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "Node answered {} of {} inputs in {BATCH_TIMEOUT:?} (a hang)",
                        outcomes.len(),
                        inputs.len()
                    ));
                }
            }
        }
        Ok(outcomes)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Disagreements that are known and legitimate, made equal here with the reason. None so far:
/// the error codes, the layer and the re-encoded bytes are all part of the shared contract.
fn normalise(outcome: Outcome) -> Outcome {
    outcome
}

struct Finding {
    input: Vec<u8>,
    rust: Option<Outcome>,
    ts: Result<Outcome, String>,
}

#[derive(Default)]
struct Tally {
    executions: u64,
    outcomes: BTreeMap<String, u64>,
}

impl Tally {
    fn count(&mut self, outcome: &Outcome) {
        self.executions += 1;
        let key = match outcome {
            Outcome::Accepted(_) => "accepted".to_owned(),
            Outcome::Refused(class, code) => format!("{class}:{code}"),
            other => other.to_string(),
        };
        *self.outcomes.entry(key).or_default() += 1;
    }
}

/// Runs one batch through both decoders; the first disagreement, if any.
fn check_batch(root: &Path, node: &mut Node, inputs: &[Vec<u8>], tally: &mut Tally) -> Option<Finding> {
    // Node works on the batch while Rust decodes it.
    let answers = node.run(inputs);
    let rust: Vec<Outcome> = inputs.iter().map(|input| normalise(rust_outcome(input))).collect();
    let answers = match answers {
        Ok(answers) => answers,
        Err(failure) => return Some(isolate(root, node, inputs, failure)),
    };
    for ((input, rust), ts) in inputs.iter().zip(rust).zip(answers) {
        let ts = normalise(ts);
        if rust != ts {
            return Some(Finding {
                input: input.clone(),
                rust: Some(rust),
                ts: Ok(ts),
            });
        }
        tally.count(&rust);
    }
    None
}

/// After Node exited or hung on a batch: restart it and replay the inputs one at a time to
/// name the one that does it (the whole batch is the finding if none does on its own).
fn isolate(root: &Path, node: &mut Node, inputs: &[Vec<u8>], failure: String) -> Finding {
    eprintln!("{failure}; replaying the batch's {} inputs one at a time", inputs.len());
    for input in inputs {
        *node = match Node::start(root) {
            Ok(node) => node,
            Err(error) => fatal(&error),
        };
        if let Err(failure) = node.run(std::slice::from_ref(input)) {
            return Finding {
                input: input.clone(),
                rust: Some(rust_outcome(input)),
                ts: Err(failure),
            };
        }
    }
    let mut batch = Vec::new();
    for input in inputs {
        batch.extend_from_slice(input);
    }
    Finding {
        input: batch,
        rust: None,
        ts: Err(format!(
            "{failure}; no single input of the batch does it (saved: the batch, concatenated)"
        )),
    }
}

fn fatal(error: &str) -> ! {
    eprintln!("differential_ts: {error}");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let [mode, files @ ..] = args.as_slice()
        && mode == "replay"
    {
        replay(root, files);
        return;
    }
    let seconds: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let seed: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_ef01);
    let repo = root.parent().unwrap_or(root);
    let dictionary = read_dictionary(&root.join("dict/client.dict"));
    let mut seeds = fixture_seeds("envelope", repo);
    seeds.extend(fixture_seeds("canonical", repo));
    for name in ["envelope", "canonical", NAME] {
        seeds.extend(read_seeds(root, name));
    }
    // The canonical seeds are bare JSON texts: run each with and without a newline.
    let framed: Vec<Vec<u8>> = seeds
        .iter()
        .filter(|seed| !seed.ends_with(b"\n"))
        .map(|seed| [seed.as_slice(), b"\n"].concat())
        .collect();
    seeds.extend(framed);
    seeds.sort();
    seeds.dedup();
    // Quiet panics: a Rust panic is reported as a finding, below.
    std::panic::set_hook(Box::new(|_| {}));
    let mut node = Node::start(root).unwrap_or_else(|error| fatal(&error));
    let mut rng = Rng(seed ^ fnv(NAME.as_bytes()));
    let started = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut tally = Tally::default();
    let mut finding = None;
    for chunk in seeds.chunks(BATCH) {
        finding = check_batch(root, &mut node, chunk, &mut tally);
        if finding.is_some() {
            break;
        }
    }
    while finding.is_none() && started.elapsed() < budget {
        let batch: Vec<Vec<u8>> = (0..BATCH)
            .map(|_| {
                let mut input = mutate(&mut rng, &seeds, &dictionary);
                if !input.ends_with(b"\n") && rng.below(8) != 0 {
                    input.push(b'\n');
                }
                input
            })
            .collect();
        finding = check_batch(root, &mut node, &batch, &mut tally);
    }
    let elapsed = started.elapsed().as_secs_f64().max(1e-9);
    let executions = tally.executions + u64::from(finding.is_some());
    println!(
        "{NAME}  {executions} executions in {elapsed:.1} s, {:.0}/s ({} seeds)",
        executions as f64 / elapsed,
        seeds.len()
    );
    let outcomes: Vec<String> = tally.outcomes.iter().map(|(key, n)| format!("{key} {n}")).collect();
    println!("outcomes (both sides agreed): {}", outcomes.join(", "));
    drop(node);
    if let Some(finding) = finding {
        report(root, &finding);
        std::process::exit(1);
    }
}

fn report(root: &Path, finding: &Finding) {
    let saved: PathBuf = save(root, NAME, "diff", &finding.input);
    println!(
        "DISAGREEMENT on an input of {} bytes, saved to {}: {}",
        finding.input.len(),
        saved.display(),
        shown(&finding.input)
    );
    if let Some(rust) = &finding.rust {
        println!("  Rust:       {rust}");
    }
    match &finding.ts {
        Ok(ts) => println!("  TypeScript: {ts}"),
        Err(failure) => println!("  TypeScript: {failure}"),
    }
    println!(
        "  replay it: cargo run --release --example differential_ts -- replay {}",
        saved.display()
    );
}

/// `differential_ts replay FILE...`: both outcomes of each file (exit 1 if any differ).
fn replay(root: &Path, files: &[String]) {
    let mut node = Node::start(root).unwrap_or_else(|error| fatal(&error));
    let mut differ = false;
    for file in files {
        let input = std::fs::read(file).unwrap_or_else(|error| fatal(&format!("{file}: {error}")));
        let rust = normalise(rust_outcome(&input));
        let ts = node
            .run(std::slice::from_ref(&input))
            .map(|mut answers| normalise(answers.remove(0)));
        let same = ts.as_ref() == Ok(&rust);
        differ |= !same;
        println!("{file}: {}", if same { "same" } else { "DIFFERENT" });
        println!("  Rust:       {rust}");
        match ts {
            Ok(ts) => println!("  TypeScript: {ts}"),
            Err(failure) => {
                println!("  TypeScript: {failure}");
                node = Node::start(root).unwrap_or_else(|error| fatal(&error));
            }
        }
    }
    std::process::exit(i32::from(differ));
}

/// At most 300 characters of `bytes`, escaped.
fn shown(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string().chars().take(300).collect()
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8], out: &mut String) {
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0u32);
    for byte in text.bytes().filter(|&b| b != b'=') {
        let value = BASE64.iter().position(|&c| c == byte)? as u32;
        bits = bits << 6 | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    Some(out)
}

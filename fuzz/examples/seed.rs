//! Writes the generated seed corpus of every target to `fuzz/corpus/<target>/` (from
//! `protocol/fixtures/` and the shapes in `pi_workflows_fuzz::fixture_seeds`), for
//! `cargo fuzz run <target>`. The directory is generated (ignored by git); regression
//! inputs live in `fuzz/seeds/<target>/`.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = root.parent().unwrap_or(root);
    for (name, _) in pi_workflows_fuzz::TARGETS {
        let dir = root.join("corpus").join(name);
        std::fs::create_dir_all(&dir)?;
        let seeds = pi_workflows_fuzz::fixture_seeds(name, repo);
        for (index, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("fixture-{index:03}")), seed)?;
        }
        println!("{name:<16} {} seeds in {}", seeds.len(), dir.display());
    }
    Ok(())
}

//! Embeds the corpus (scenarios/*.yaml) and the README's list of differences into the kernel
//! test binary: it runs inside the lab VM, where the source tree is not.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scenarios = dir.join("scenarios");
    println!("cargo::rerun-if-changed={}", scenarios.display());
    let mut files: Vec<_> = std::fs::read_dir(&scenarios)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    let mut out = String::from(
        "/// The corpus: (file stem, contents).\npub const SCENARIOS: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        println!("cargo::rerun-if-changed={}", f.display());
        let stem = f.file_stem().unwrap().to_string_lossy();
        out.push_str(&format!(
            "    ({stem:?}, include_str!({:?})),\n",
            f.display().to_string()
        ));
    }
    out.push_str("];\n");
    let readme = dir.join("../../README.md");
    println!("cargo::rerun-if-changed={}", readme.display());
    out.push_str(&format!(
        "/// The workspace README (its \"Where it differs\" markers).\npub const README: &str = include_str!({:?});\n",
        readme.display().to_string()
    ));
    let path = Path::new(&std::env::var("OUT_DIR").unwrap()).join("corpus.rs");
    std::fs::write(path, out).unwrap();
}

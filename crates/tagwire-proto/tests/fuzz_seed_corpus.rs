//! Writes the fuzzing seed corpus (`fuzz/corpus/frame_decoder/`) from the test
//! vectors of `docs/protocol.md`. Ignored in normal runs because it writes
//! files; `scripts/fuzz.sh` runs it with `--ignored`. The directory can be
//! changed with `TAGWIRE_FUZZ_CORPUS_DIR`.

mod common;

use std::path::PathBuf;

#[test]
#[ignore = "writes fuzz/corpus/frame_decoder; run by scripts/fuzz.sh"]
fn write_fuzz_seed_corpus() {
    let dir = std::env::var_os("TAGWIRE_FUZZ_CORPUS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/frame_decoder")
        });
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let corpus = common::seed_corpus();
    for (name, bytes) in &corpus {
        let path = dir.join(name);
        std::fs::write(&path, bytes)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    println!("wrote {} seed inputs to {}", corpus.len(), dir.display());
}

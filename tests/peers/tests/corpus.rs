//! Host check of the corpus: every scenario file parses and validates, and there are enough.

#[test]
fn every_scenario_loads() {
    let all = peers::scenario::load_all().unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        !all.is_empty(),
        "no scenario in {}",
        peers::scenario::dir().display()
    );
    let mut ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), all.len());
}

#[test]
fn the_embedded_corpus_is_the_directory() {
    let embedded = peers::scenario::embedded().unwrap_or_else(|e| panic!("{e:#}"));
    let dir = peers::scenario::load_all().unwrap();
    let ids = |v: &[peers::scenario::Scenario]| v.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&embedded), ids(&dir));
}

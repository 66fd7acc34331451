//! The malformed-object corpus, shared by the host test (`tests/bad_input.rs`) and the lab
//! test (`tests/reliability/bad_input.rs`): `corpus.yaml`, whose `# expect:` lines say how each
//! document must be rejected, plus an EndpointSlice of 10,000 endpoints made here.

/// The name the corpus is read under (a file in the manifest directory, or the origin given
/// to `load_str`): rejections of documents without a name are reported by it.
pub const FILE: &str = "bad-input.yaml";

/// How many endpoints the generated slice has.
pub const HUGE_SLICE_ENDPOINTS: usize = 10_000;

/// One malformed object and how its rejection must read.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// A fragment of the rejected object's description (`Service bad/port-big`).
    pub object: String,
    /// A fragment of the reason.
    pub reason: String,
}

impl Expectation {
    /// Whether a rejection (`object`, `reason`) is this one.
    pub fn matches(&self, object: &str, reason: &str) -> bool {
        object.contains(&self.object) && reason.contains(&self.reason)
    }
}

/// The corpus as one YAML text (all in namespace `bad`).
pub fn text() -> String {
    let endpoints: Vec<String> = (0..HUGE_SLICE_ENDPOINTS)
        .map(|i| {
            format!(
                "{{addresses: [10.{}.{}.{}]}}",
                100 + i / 65536,
                (i / 256) % 256,
                i % 256
            )
        })
        .collect();
    format!(
        "{}\n---\n# expect: EndpointSlice bad/huge | {HUGE_SLICE_ENDPOINTS} entries\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: huge, namespace: bad, labels: {{kubernetes.io/service-name: anything}}}}\n\
         addressType: IPv4\nports: [{{port: 8080}}]\nendpoints: [{}]\n",
        include_str!("corpus.yaml").trim_end(),
        endpoints.join(", ")
    )
}

/// Every document's expectation, in order.
pub fn expectations() -> Vec<Expectation> {
    text()
        .lines()
        .filter_map(|l| l.strip_prefix("# expect: "))
        .map(|l| {
            let (object, reason) = l
                .split_once(" | ")
                .unwrap_or_else(|| panic!("an expect line without ' | ': {l}"));
            Expectation {
                object: object.trim().to_string(),
                reason: reason.trim().to_string(),
            }
        })
        .collect()
}

//! The malformed-object corpus, shared by the host test (`tests/bad_input.rs`) and the lab
//! test (`tests/reliability/bad_input.rs`): `corpus.yaml`, whose `# expect:` lines say how each
//! document must be rejected, plus an EndpointSlice of 10,000 endpoints made here.

/// The name the corpus is read under (a file in the manifest directory, or the origin given
/// to `load_str`): rejections of documents without a name are reported by it.
pub const FILE: &str = "bad-input.yaml";

/// How many endpoints the generated slice has.
pub const HUGE_SLICE_ENDPOINTS: usize = 10_000;

/// One malformed object and how it must be rejected.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// A fragment of the rejected object's description (`Service bad/port-big`).
    pub object: String,
    /// The rejection's kind (`Rejection::kind`, `bad-port`).
    pub kind: String,
    /// The field at fault (`Rejection::field`), when the model names one.
    pub field: Option<String>,
}

impl Expectation {
    /// Whether a rejection (`object`, its kind and field) is this one.
    #[allow(dead_code)] // the lab test matches log lines
    pub fn matches(&self, object: &str, kind: &str, field: Option<&str>) -> bool {
        object.contains(&self.object) && kind == self.kind && field == self.field.as_deref()
    }

    /// Whether a `manifest rejected` log line is this rejection: it names the object, carries
    /// `rejection="<kind>"` and names the field.
    #[allow(dead_code)] // the host test matches typed rejections
    pub fn matches_line(&self, line: &str) -> bool {
        line.contains(&self.object)
            && line.contains(&format!(" rejection=\"{}\"", self.kind))
            && self
                .field
                .as_ref()
                .is_none_or(|f| line.contains(f.as_str()))
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
        "{}\n---\n# expect: EndpointSlice bad/huge | too-many endpoints\n\
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
            let mut reason = reason.split_whitespace();
            Expectation {
                object: object.trim().to_string(),
                kind: reason.next().expect("a kind").to_string(),
                field: reason.next().map(str::to_string),
            }
        })
        .collect()
}

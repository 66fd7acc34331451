//! The differential harness: upstream `kube-proxy --proxy-mode=ipvs` and our agent, each in a
//! network namespace of its own in the lab VM, both pointed at a real kube-apiserver with the
//! same objects and the same configuration; what each programmed in the kernel is read with
//! the real tools and compared.
//!
//! The pure parts live here and are unit-tested on the host: the corpus format
//! ([`scenario`]), the normalisation of the tools' output ([`state`]), what the API objects
//! imply either program programmed ([`implied`]) and the comparison with the differences the
//! README lists on purpose ([`compare`]). The run itself (namespaces,
//! programs, API objects) is the `lab` test target, `tests/lab.rs`.

pub mod compare;
pub mod implied;
pub mod scenario;
pub mod state;

/// The corpus and the README, embedded at build time (the kernel tests run where the source
/// tree is not).
pub mod embedded {
    include!(concat!(env!("OUT_DIR"), "/corpus.rs"));
}

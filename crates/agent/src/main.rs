//! kube-proxy-ipvs: the node agent. Work in progress.
#![forbid(unsafe_code)]

fn main() {
    eprintln!("kube-proxy-ipvs: the agent is not built yet");
    std::process::exit(2);
}

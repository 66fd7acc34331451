//! The process's `oom_score_adj` (`oomScoreAdj`).

/// Writes `value` to `/proc/self/oom_score_adj`, as kube-proxy does at start (`oomScoreAdj`).
pub fn write_oom_score_adj(value: i32) -> std::io::Result<()> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
}

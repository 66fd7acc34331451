//! Kernel settings under `/proc/sys`.

use std::collections::BTreeMap;
use std::path::Path;

use super::Error;

/// Reads the current values of `keys` (missing ones are left out).
pub fn read<'a>(keys: impl IntoIterator<Item = &'a String>) -> BTreeMap<String, String> {
    keys.into_iter()
        .filter_map(|k| {
            std::fs::read_to_string(Path::new("/proc/sys").join(k))
                .ok()
                .map(|v| (k.clone(), v.trim().to_string()))
        })
        .collect()
}

/// Writes one value.
pub fn write(key: &str, value: &str) -> Result<(), Error> {
    let path = Path::new("/proc/sys").join(key);
    std::fs::write(&path, value).map_err(|e| Error::Sysctl {
        key: key.to_string(),
        source: e,
    })
}

/// The running kernel's release string (`uname -r`), as kube-proxy reads it.
pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|r| r.trim().to_string())
}

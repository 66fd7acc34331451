//! `iptables-restore` waits for the xtables lock as kube-proxy bounds it (`-w 5 -W 100000`),
//! and a wait that ran out (iptables' exit status 4) is told apart from a refused write.
//!
//! A stand-in `iptables-legacy-restore` on `PATH` records its arguments and answers as the
//! real one does when another program holds the lock; this binary holds this one test only,
//! so changing its `PATH` races with nothing.

use std::os::unix::fs::PermissionsExt as _;

use kube_proxy_ipvs_agent::dataplane::Error;
use kube_proxy_ipvs_agent::dataplane::iptables::{Backend, restore};
use kube_proxy_ipvs_agent::model::snapshot::cluster::Family;

/// What iptables says when its wait for the lock ran out.
const LOCKED: &str = "Another app is currently holding the xtables lock. Stopped waiting after 5s.";

#[test]
fn the_lock_wait_is_bounded_and_its_end_is_its_own_error() {
    let dir = std::env::temp_dir().join(format!("xtables-wait-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let args = dir.join("args");
    let tool = dir.join("iptables-legacy-restore");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\necho \"$@\" > {}\ncat > /dev/null\n\
             if [ -e {}/refuse ]; then echo 'line 2 failed' >&2; exit 1; fi\n\
             echo '{LOCKED}' >&2\n\
             exit 4\n",
            args.display(),
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // SAFETY: this test is the only one of its binary, and no other thread of it reads or
    // writes the environment.
    unsafe { std::env::set_var("PATH", path) };

    let e = restore(Backend::Legacy, Family::V4, "*nat\nCOMMIT\n").unwrap_err();
    assert_eq!(
        std::fs::read_to_string(&args).unwrap().trim(),
        "--noflush -w 5 -W 100000"
    );
    // The tool's own words are kept, whole, for the log.
    assert!(
        matches!(&e, Error::XtablesLocked { message, .. } if message == LOCKED),
        "{e:?}"
    );

    std::fs::write(dir.join("refuse"), "").unwrap();
    let e = restore(Backend::Legacy, Family::V4, "*nat\nCOMMIT\n").unwrap_err();
    assert!(matches!(e, Error::Tool { .. }), "{e:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

//! Boots the image under QEMU (software emulation only: KVM hangs on our machines), streams
//! what the payload prints and returns its exit code.
//!
//! The payload's output travels on the first serial port; the kernel console goes to a second
//! port logged to a file, so kernel messages never mix with test output. `/init` prints the
//! payload's exit code behind [`EXIT_MARKER`] and reboots, which ends QEMU (`-no-reboot`).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::image::{Image, lab_dir};
use crate::payload::Payload;
use crate::{Error, Result};

/// The line `/init` prints after the payload, followed by its exit code.
pub const EXIT_MARKER: &str = "@@LAB-EXIT ";

/// Kernel command line. `lab=1` lets code in the guest know where it runs.
const CMDLINE: &str = "console=ttyS1 reboot=t panic=-1 quiet loglevel=4 cryptomgr.notests \
     i8042.noaux i8042.nokbd i8042.noprobe tsc=reliable no_timer_check random.trust_cpu=on lab=1";

/// The emulated machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Machine {
    /// QEMU's microvm: fastest boot, but the guest clock moves in 4 ms steps.
    Microvm,
    /// A PC with qboot: a few hundred ms slower to boot, with a fine TSC clock (for timings).
    Pc,
}

/// How to boot.
#[derive(Debug, Clone)]
pub struct Config {
    /// Virtual CPUs (QEMU runs one host thread per vCPU).
    pub smp: u32,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// The machine type.
    pub machine: Machine,
    /// Kill the VM after this long.
    pub timeout: Duration,
    /// Put the NIC on this host tap device (made beforehand, e.g. on a bridge shared with
    /// other VMs: the lab cluster's nodes) instead of QEMU's user network. Only on `pc`.
    pub tap: Option<Tap>,
}

/// A NIC on a host tap device.
#[derive(Debug, Clone)]
pub struct Tap {
    /// The host's tap interface.
    pub ifname: String,
    /// The guest NIC's MAC address (each VM on one bridge needs its own).
    pub mac: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            smp: 2,
            memory_mib: 1024,
            machine: Machine::Microvm,
            timeout: Duration::from_secs(3600),
            tap: None,
        }
    }
}

/// What a run gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The payload's exit code.
    pub exit_code: i32,
    /// From starting QEMU to the first line of output (`/init` reached, modules loaded).
    pub boot: Duration,
    /// From starting QEMU to its end.
    pub total: Duration,
    /// The kernel console log of this run.
    pub console_log: PathBuf,
}

/// Boots `image` with `payload` and calls `on_line` with each line the payload prints.
pub fn run(
    image: &Image,
    payload: &Payload<'_>,
    config: &Config,
    mut on_line: impl FnMut(&str),
) -> Result<Outcome> {
    let dir = lab_dir().join("runs");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    sweep_stale(&dir);
    let tag = format!("{}", std::process::id());
    let payload_cpio = dir.join(format!("payload-{tag}.cpio"));
    let initrd = dir.join(format!("initrd-{tag}.cpio"));
    let console_log = dir.join(format!("console-{tag}.log"));
    payload.write(&payload_cpio)?;
    concat(&[&image.base_cpio, &payload_cpio], &initrd)?;
    let _ = std::fs::remove_file(&payload_cpio);

    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args([
        "-accel",
        "tcg",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
    ])
    // Without erms/fsrm the guest does not copy memory with `rep movsb`, which TCG runs
    // byte by byte.
    .args(["-cpu", "max,erms=off,fsrm=off"])
    .args([
        "-smp",
        &config.smp.to_string(),
        "-m",
        &config.memory_mib.to_string(),
    ])
    .arg("-kernel")
    .arg(&image.vmlinuz)
    .arg("-initrd")
    .arg(&initrd)
    .args([
        "-chardev",
        "stdio,id=out,signal=off",
        "-serial",
        "chardev:out",
    ])
    .arg("-chardev")
    .arg(format!("file,id=con,path={}", console_log.display()))
    .args(["-device", "isa-serial,chardev=con,iobase=0x2f8,irq=3"]);
    // QEMU's user network on the pc machine: the guest's 10.0.2.2 is the host's loopback,
    // where the test control plane listens (lab::controlplane); nothing else is reachable.
    // Not on microvm: the kernel's virtio_mmio cannot find its devices there (see /init).
    match (&config.tap, config.machine) {
        (Some(tap), Machine::Pc) => {
            cmd.arg("-netdev")
                .arg(format!(
                    "tap,id=n0,ifname={},script=no,downscript=no",
                    tap.ifname
                ))
                .arg("-device")
                .arg(format!("virtio-net-pci,netdev=n0,mac={}", tap.mac));
        }
        (Some(_), Machine::Microvm) => {
            return Err(Error::Setup(
                "a tap NIC needs the pc machine (--machine pc)".into(),
            ));
        }
        (None, Machine::Pc) => {
            cmd.args([
                "-netdev",
                "user,id=n0",
                "-device",
                "virtio-net-pci,netdev=n0",
            ]);
        }
        (None, Machine::Microvm) => {}
    }
    match config.machine {
        // On microvm acpi=off must be the machine option; as a kernel parameter it hangs.
        Machine::Microvm => cmd.args([
            "-M",
            "microvm,acpi=off",
            "-append",
            &format!("{CMDLINE} pci=off"),
        ]),
        Machine::Pc => cmd.args([
            "-M",
            "pc",
            "-bios",
            "/usr/share/qemu/qboot.rom",
            "-append",
            CMDLINE,
        ]),
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // The VM ends with this process, however it ends (a harness that kills `lab run` must
    // not leave an emulated machine spinning on the host's cores).
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }

    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| Error::spawn(&cmd, e))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            if tx.send(std::mem::take(&mut buf)).is_err() {
                break;
            }
        }
    });

    let mut boot = None;
    let mut exit_code = None;
    let deadline = start + config.timeout;
    let mut next_look = start + LOCKUP_LOOK;
    loop {
        if Instant::now() >= next_look {
            next_look = Instant::now() + LOCKUP_LOOK;
            let console = std::fs::read_to_string(&console_log).unwrap_or_default();
            if let Some(secs) = stuck_secs(&console).filter(|s| *s >= LOCKUP_LIMIT_SECS) {
                let _ = child.kill();
                let _ = child.wait();
                // tests/cluster/run.sh boots a node again on these words: keep them.
                return Err(Error::Failed(format!(
                    "the guest kernel locked up (a CPU stuck for {secs} s); kernel log ({}): {}",
                    console_log.display(),
                    tail(&console_log)
                )));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(LOCKUP_LOOK)) {
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => continue,
            Ok(raw) => {
                if boot.is_none() {
                    boot = Some(start.elapsed());
                    // QEMU read the initrd into guest memory before the guest ran: the file
                    // can go now, however this run ends (a killed cluster node never gets to
                    // the removal below).
                    let _ = std::fs::remove_file(&initrd);
                }
                let line = String::from_utf8_lossy(&raw);
                let line = line.trim_end_matches(['\n', '\r']).replace('\r', "");
                if let Some(rest) = line.strip_prefix(EXIT_MARKER) {
                    exit_code = rest.trim_end_matches('@').trim().parse().ok();
                } else {
                    on_line(&line);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Failed(format!(
                    "the VM ran over its {:?} time limit; kernel log: {}",
                    config.timeout,
                    tail(&console_log)
                )));
            }
        }
    }
    let _ = reader.join();
    let status = child
        .wait()
        .map_err(|e| Error::Failed(format!("waiting for qemu: {e}")))?;
    let total = start.elapsed();
    let _ = std::fs::remove_file(&initrd);
    match exit_code {
        Some(exit_code) => Ok(Outcome {
            exit_code,
            boot: boot.unwrap_or(total),
            total,
            console_log,
        }),
        None => Err(Error::Failed(format!(
            "the VM stopped ({status}) without reporting an exit code; kernel log ({}):\n{}",
            console_log.display(),
            tail(&console_log)
        ))),
    }
}

/// Removes the initrds and payloads of runs whose process is gone. Each is about 770 MB; a
/// harness that kills `lab run` before its guest printed anything leaves one behind, and the
/// cluster tests left 29 GB of them in a day.
fn sweep_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| {
                n.strip_prefix("initrd-")
                    .or_else(|| n.strip_prefix("payload-"))
            })
            .and_then(|n| n.strip_suffix(".cpio"))
            .filter(|pid| pid.parse::<u32>().is_ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn concat(parts: &[&Path], out: &Path) -> Result<()> {
    let mut w = std::fs::File::create(out).map_err(|e| Error::io(out, e))?;
    for p in parts {
        let mut r = std::fs::File::open(p).map_err(|e| Error::io(p, e))?;
        std::io::copy(&mut r, &mut w).map_err(|e| Error::io(out, e))?;
    }
    Ok(())
}

/// How often the kernel console is looked at for a locked-up CPU.
const LOCKUP_LOOK: Duration = Duration::from_secs(30);

/// A guest CPU stuck this long in its kernel ends the run. Twice under emulation (Debian's
/// 6.1.192, `-M pc`) one never came back, and its VM would have run to its time limit (four
/// hours for the bench); shorter stalls of a loaded emulation pass.
const LOCKUP_LIMIT_SECS: u64 = 300;

/// The longest stall the kernel's watchdog reported (`BUG: soft lockup - CPU#1 stuck for 45s!`).
fn stuck_secs(console: &str) -> Option<u64> {
    console
        .lines()
        .filter_map(|l| {
            l.split_once("soft lockup - CPU#")?
                .1
                .split_once("stuck for ")?
                .1
                .split_once('s')
        })
        .filter_map(|(secs, _)| secs.parse().ok())
        .max()
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines picked from a lab VM's console on 2026-11-29 (kernel 6.1.0-57-cloud-amd64), in the
    /// order it printed them: the longest stall is not always the last line.
    const LOCKED: &str = "\
[   60.045025] rcu: \tPossible timer handling issue on cpu=1 timer-softirq=1957
[   85.097629] watchdog: BUG: soft lockup - CPU#1 stuck for 45s! [scale:524]
[  243.333355] INFO: task iptables-nft-re:539 blocked for more than 120 seconds.
[ 3453.097253] watchdog: BUG: soft lockup - CPU#1 stuck for 3181s! [scale:524]
[ 3425.097249] watchdog: BUG: soft lockup - CPU#1 stuck for 3155s! [scale:524]
";

    #[test]
    fn the_longest_stall_on_the_console_is_found() {
        assert_eq!(stuck_secs(LOCKED), Some(3181));
        assert_eq!(
            stuck_secs(&LOCKED[..LOCKED.find("[  243").unwrap()]),
            Some(45)
        );
        assert_eq!(
            stuck_secs("[    3.3] Bridge firewalling registered\n"),
            None
        );
    }
}

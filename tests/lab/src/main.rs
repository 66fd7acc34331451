//! `lab`: build the lab image, run a program in the VM, run the kernel tests.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use lab::controlplane::ControlPlane;
use lab::image::Image;
use lab::payload::Payload;
use lab::suite::{self, shell_quote};
use lab::vm::{self, Config, Machine};

#[derive(Parser)]
#[command(about = "The kernel lab: a microVM with a real IPVS kernel")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the image (or find it in the cache) and print where it is.
    Image,
    /// Run a command in the VM as root and exit with its exit code.
    Run {
        #[command(flatten)]
        vm: VmArgs,
        /// A host file to copy into the guest at the same path (repeatable); host programs
        /// named as the command are copied with their libraries automatically.
        #[arg(long = "file")]
        files: Vec<PathBuf>,
        /// A host program to copy into the guest at the same path, with its shared libraries
        /// (repeatable).
        #[arg(long = "exe")]
        executables: Vec<PathBuf>,
        /// The command: a host program (copied in) or a program of the image (`ipvsadm`).
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Build every package's `lab` test target and run them in one VM.
    Test {
        #[command(flatten)]
        vm: VmArgs,
        /// Only these packages (repeatable).
        #[arg(short, long = "package")]
        packages: Vec<String>,
        /// Build the tests optimized (the `labtest` profile: release with debug assertions and
        /// overflow checks), so that the emulated CPU spends its time in the kernel, not in
        /// unoptimized code; this is how `tests/run.sh` runs them.
        #[arg(long)]
        release: bool,
        /// Start a real control plane on the host for the tests (etcd, kube-apiserver; see
        /// `lab::controlplane`); the default when the `peers` package is tested.
        #[arg(long)]
        control_plane: bool,
        /// A host program to copy into the guest at the same path, with its shared libraries
        /// (repeatable): a benchmark's release build beside the tests' own.
        #[arg(long = "exe")]
        executables: Vec<PathBuf>,
        /// Also write the summary table (`lab::report`) to this file, as the document
        /// `RELIABILITY.md` (see CONTRIBUTING.md, "The reliability table").
        #[arg(long, value_name = "PATH")]
        reliability_table: Option<PathBuf>,
        /// Arguments for every libtest binary (a name filter, --nocapture, ...).
        #[arg(last = true)]
        test_args: Vec<String>,
    },
    /// Start the test control plane on the host, print its directory and wait for Ctrl-C.
    ControlPlane,
    /// Merge the reliability tables of a run made in shards (each `test --reliability-table`
    /// on part of the suite, at one commit) into one document.
    MergeTables {
        /// Where the merged document goes (`RELIABILITY.md`).
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// The shards' documents.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
    },
}

#[derive(Args)]
struct VmArgs {
    /// Virtual CPUs.
    #[arg(long, default_value_t = 2)]
    smp: u32,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 1024)]
    memory: u32,
    /// Machine type: microvm boots fastest; pc has a precise clock for timings.
    #[arg(long, value_enum, default_value_t = Machine::Microvm)]
    machine: Machine,
    /// Kill the VM after this many seconds.
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    /// Put the NIC on this host tap device instead of QEMU's user network (pc only; the
    /// lab cluster's nodes share a host bridge this way).
    #[arg(long, requires = "mac")]
    tap: Option<String>,
    /// The MAC address of the NIC on `--tap`.
    #[arg(long, requires = "tap")]
    mac: Option<String>,
}

impl VmArgs {
    fn config(&self) -> Config {
        Config {
            smp: self.smp,
            memory_mib: self.memory,
            machine: self.machine,
            timeout: Duration::from_secs(self.timeout),
            tap: self
                .tap
                .clone()
                .zip(self.mac.clone())
                .map(|(ifname, mac)| vm::Tap { ifname, mac }),
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lab: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> lab::Result<ExitCode> {
    let t0 = Instant::now();
    match cli.command {
        Cmd::ControlPlane => {
            let dir = std::env::current_dir()
                .unwrap_or_default()
                .join("target/lab/control-plane");
            let cp = ControlPlane::start(&dir)?;
            println!(
                "control plane in {}: admin-host.kubeconfig (from the host), *.kubeconfig (inside the VM, through a forwarder); press Enter to stop",
                cp.dir().display()
            );
            let _ = std::io::stdin().read_line(&mut String::new());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::MergeTables { out, shards } => {
            let docs = shards
                .iter()
                .map(|p| {
                    std::fs::read_to_string(p)
                        .map_err(|e| lab::Error::Setup(format!("{}: {e}", p.display())))
                })
                .collect::<lab::Result<Vec<String>>>()?;
            let doc = lab::report::merge(&docs).map_err(lab::Error::Failed)?;
            std::fs::write(&out, &doc)
                .map_err(|e| lab::Error::Setup(format!("{}: {e}", out.display())))?;
            let problems = lab::report::problems(&doc);
            eprintln!(
                "lab: {} shards merged into {} ({} problem(s){})",
                docs.len(),
                out.display(),
                problems.len(),
                if problems.is_empty() {
                    String::new()
                } else {
                    format!(": {}", problems.join("; "))
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Image => {
            let image = Image::ensure()?;
            println!(
                "kernel  {}\nvmlinuz {}\ninitrd  {}",
                image.kernel_release,
                image.vmlinuz.display(),
                image.base_cpio.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            vm: args,
            files,
            executables,
            command,
        } => {
            let image = Image::ensure()?;
            let mut payload = Payload::new(&image);
            for f in &files {
                payload.add_host_file(f, 0o644)?;
            }
            for e in &executables {
                payload.add_executable(e)?;
            }
            let mut words = command.clone();
            let host = PathBuf::from(&command[0]);
            if command[0].contains('/') && host.exists() {
                words[0] = payload
                    .add_executable(&host)?
                    .to_string_lossy()
                    .into_owned();
            }
            let line: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
            payload.add_data(
                "/lab/run",
                0o755,
                format!("#!/bin/sh\nexec {}\n", line.join(" ")),
            )?;
            let out = vm::run(&image, &payload, &args.config(), |l| println!("{l}"))?;
            report(&out, t0);
            Ok(ExitCode::from(out.exit_code.clamp(0, 255) as u8))
        }
        Cmd::Test {
            vm: args,
            packages,
            release,
            control_plane,
            executables,
            reliability_table,
            test_args,
        } => {
            let image = Image::ensure()?;
            let mut build = suite::build(&packages, release)?;
            build.programs.extend(executables);
            if build.tests.is_empty() {
                return Err(lab::Error::Setup(
                    "no package has a `lab` test target".into(),
                ));
            }
            eprintln!(
                "lab: {} kernel test binaries, built in {:.1?}",
                build.tests.len(),
                t0.elapsed()
            );
            let wants_peers = build.tests.iter().any(|t| t.package == "peers");
            let cp = if control_plane || wants_peers {
                let dir = std::env::current_dir()
                    .unwrap_or_default()
                    .join(format!("target/lab/control-plane-{}", std::process::id()));
                Some(ControlPlane::start(&dir)?)
            } else {
                None
            };
            let mut config = args.config();
            if cp.is_some() {
                // Only the pc machine has a network device to reach the host with.
                config.machine = Machine::Pc;
            }
            let (out, table) = suite::run(
                &image,
                &build,
                &test_args,
                &config,
                cp.as_ref().map(|c| c.dir()),
            )?;
            drop(cp);
            if let Some(path) = &reliability_table {
                let Some(table) = table else {
                    return Err(lab::Error::Failed(
                        "--reliability-table: no test wrote a row".into(),
                    ));
                };
                let run = lab::report::run_line(
                    &lab::report::today(),
                    lab::report::head_commit().as_deref(),
                );
                let doc = lab::report::document(&table, &image.kernel_release, &run);
                std::fs::write(path, doc)
                    .map_err(|e| lab::Error::Setup(format!("{}: {e}", path.display())))?;
                let problems = lab::report::problems(&table);
                eprintln!(
                    "lab: reliability table written to {} ({} problem(s){})",
                    path.display(),
                    problems.len(),
                    if problems.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", problems.join("; "))
                    }
                );
            }
            report(&out, t0);
            Ok(if out.exit_code == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn report(out: &vm::Outcome, t0: Instant) {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    eprintln!(
        "lab: VM booted in {:.1?} (to the first line of output), ran {:.1?}; exit code {}; whole command {:.1?}",
        out.boot,
        out.total,
        out.exit_code,
        t0.elapsed()
    );
}

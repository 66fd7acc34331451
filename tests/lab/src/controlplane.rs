//! A real Kubernetes control plane for the kernel tests: etcd and kube-apiserver (built from
//! their Go modules by `tests/peers/build.sh`) run on the host, where they run at full speed
//! (under the VM's emulation kube-apiserver takes minutes to become ready), and the tests in
//! the VM reach them through QEMU's user network, which maps the guest's 10.0.2.2 to the
//! host's loopback.
//!
//! Host side, [`ControlPlane::start`]: a CA and a serving certificate (openssl), a static
//! admin token, `--authorization-mode=Node,RBAC`, the agent's ServiceAccount and RBAC from
//! `deploy/rbac.yaml`, a ServiceAccount for upstream kube-proxy bound to `system:node-proxier`
//! (as kubeadm binds it), real ServiceAccount tokens (TokenRequest) in kubeconfigs, and every
//! manifest of `deploy/` validated with `kubectl apply --dry-run=server`. A control port takes
//! the requests only the host can carry out (stop, start or restart the API server, compact
//! etcd): one line in, one line out, so no HTTP server is needed for four verbs.
//!
//! Guest side, [`ControlPlane::from_env`]: `lab test` copies the control plane's directory
//! into the guest and names it in `LAB_CONTROL_PLANE`. Tests run in network namespaces of
//! their own, which cannot reach 10.0.2.2: [`ControlPlane::forward_into`] listens on
//! 127.0.0.1:6443 inside a namespace (where every kubeconfig points) and connects out from the
//! VM's root namespace.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::image::output;
use crate::{Error, Result};

/// The environment variable naming the control plane's directory inside the guest.
pub const ENV: &str = "LAB_CONTROL_PLANE";

/// Where the kubeconfigs point inside a test's namespace (a [`Forward`] listens there).
pub const LOCAL_API: &str = "127.0.0.1:6443";

/// The host as the guest sees it (QEMU user networking).
const HOST_FROM_GUEST: &str = "10.0.2.2";

/// A control plane: started on the host, or described to the guest.
pub struct ControlPlane {
    dir: PathBuf,
    ports: BTreeMap<String, u16>,
    host: Option<Host>,
}

/// The host's processes and the control port's thread.
struct Host {
    procs: Arc<Mutex<Procs>>,
    stop: Arc<AtomicBool>,
}

struct Procs {
    etcd: Child,
    apiserver: Option<Child>,
    apiserver_args: Vec<String>,
    dir: PathBuf,
    etcd_port: u16,
}

fn free_port() -> Result<u16> {
    let l =
        TcpListener::bind("127.0.0.1:0").map_err(|e| Error::Setup(format!("a free port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| Error::Setup(e.to_string()))?
        .port())
}

/// The workspace root (tests/lab/../..).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where `tests/peers/build.sh` puts the upstream programs (on the host, and in the guest
/// when the payload carries them).
pub fn peers_dir() -> PathBuf {
    root().join("target/peers")
}

/// Builds the peers (cached) and returns their directory.
pub fn build_peers() -> Result<PathBuf> {
    let script = root().join("tests/peers/build.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).stderr(Stdio::inherit());
    let out = output(&mut cmd)?;
    let dir = out.lines().last().unwrap_or_default().trim().to_string();
    Ok(PathBuf::from(dir))
}

fn log_file(dir: &Path, name: &str) -> Result<(File, File)> {
    let f = File::options()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .map_err(|e| Error::Setup(format!("{name}: {e}")))?;
    let g = f.try_clone().map_err(|e| Error::Setup(e.to_string()))?;
    Ok((f, g))
}

fn spawn_logged(program: &Path, args: &[String], dir: &Path, log: &str) -> Result<Child> {
    let (out, err) = log_file(dir, log)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    cmd.spawn().map_err(|e| Error::spawn(&cmd, e))
}

fn kill(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    // SAFETY: kill(2) on the process group we made for the child; no memory is involved.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    let _ = child.wait();
}

impl Procs {
    fn kubectl(&self) -> PathBuf {
        self.dir.join("bin/kubectl")
    }

    fn start_apiserver(&mut self) -> Result<()> {
        if self.apiserver.is_none() {
            let bin = self.dir.join("bin/kube-apiserver");
            self.apiserver = Some(spawn_logged(
                &bin,
                &self.apiserver_args,
                &self.dir,
                "kube-apiserver.log",
            )?);
        }
        self.wait_ready(Duration::from_secs(120))
    }

    /// Stops both; the logs and credentials stay for a look after a failure, etcd's data goes.
    fn stop(&mut self) {
        self.stop_apiserver();
        kill(&mut self.etcd);
        let _ = std::fs::remove_dir_all(self.dir.join("etcd"));
    }

    fn stop_apiserver(&mut self) {
        if let Some(mut c) = self.apiserver.take() {
            kill(&mut c);
        }
    }

    fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let ok = Command::new(self.kubectl())
                .args(["--kubeconfig"])
                .arg(self.dir.join("admin-host.kubeconfig"))
                .args(["get", "--raw", "/readyz"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return Ok(());
            }
            if let Some(c) = self.apiserver.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Err(Error::Failed(format!(
                    "kube-apiserver exited ({status}); see {}",
                    self.dir.join("kube-apiserver.log").display()
                )));
            }
            if Instant::now() > deadline {
                return Err(Error::Failed(format!(
                    "kube-apiserver not ready within {limit:?}; see {}",
                    self.dir.join("kube-apiserver.log").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Compacts etcd to its current revision, through etcd's JSON gateway.
    fn compact_etcd(&self) -> Result<String> {
        let addr = format!("127.0.0.1:{}", self.etcd_port);
        let range = http_post(&addr, "/v3/kv/range", r#"{"key":"AA=="}"#)?;
        let v: serde_json::Value = serde_json::from_str(&range)
            .map_err(|e| Error::Failed(format!("etcd range answer {range:?}: {e}")))?;
        let revision = v["header"]["revision"]
            .as_str()
            .map(String::from)
            .or_else(|| v["header"]["revision"].as_i64().map(|r| r.to_string()))
            .ok_or_else(|| Error::Failed(format!("no revision in {range}")))?;
        http_post(
            &addr,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )?;
        Ok(format!("compacted at revision {revision}"))
    }

    fn handle(&mut self, verb: &str) -> Result<String> {
        match verb {
            "apiserver-stop" => {
                self.stop_apiserver();
                Ok("stopped".into())
            }
            "apiserver-start" => self.start_apiserver().map(|_| "ready".into()),
            "apiserver-restart" => {
                self.stop_apiserver();
                self.start_apiserver().map(|_| "ready".into())
            }
            "etcd-compact" => self.compact_etcd(),
            other => Err(Error::Failed(format!("unknown request {other:?}"))),
        }
    }
}

/// A POST with a JSON body and `Connection: close`; the answer's body. Written out because
/// this is its only use (etcd's gateway, two requests per compaction).
fn http_post(addr: &str, path: &str, body: &str) -> Result<String> {
    let fail = |e: std::io::Error| Error::Failed(format!("POST http://{addr}{path}: {e}"));
    let mut s = TcpStream::connect(addr).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(fail)?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(fail)?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(fail)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(Error::Failed(format!(
            "POST http://{addr}{path}: {head} {body}"
        )));
    }
    Ok(body.to_string())
}

fn kubeconfig(ca: &str, server: &str, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: peers\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: peers\n  context: {{cluster: peers, user: {user}}}\ncurrent-context: peers\n"
    )
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver on the host in `dir` (emptied first), with the
    /// credentials, RBAC and kubeconfigs the tests use; checks `deploy/` against the real API.
    pub fn start(dir: &Path) -> Result<ControlPlane> {
        let t0 = Instant::now();
        let peers = build_peers()?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("bin"))
            .map_err(|e| Error::Setup(format!("{}: {e}", dir.display())))?;
        let dir = dir
            .canonicalize()
            .map_err(|e| Error::Setup(e.to_string()))?;
        for b in ["etcd", "kube-apiserver", "kubectl"] {
            std::os::unix::fs::symlink(peers.join(b), dir.join("bin").join(b))
                .map_err(|e| Error::Setup(format!("{b}: {e}")))?;
        }
        let ssl = |args: &str| -> Result<()> {
            let mut cmd = Command::new("sh");
            cmd.current_dir(&dir)
                .args(["-c", &format!("openssl {args}")]);
            output(&mut cmd).map(drop)
        };
        ssl(
            "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj /CN=peers-ca",
        )?;
        ssl(
            "req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver",
        )?;
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,IP:10.0.2.2,IP:10.96.0.1,IP:fd00:10:96::1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n",
        )
        .map_err(|e| Error::Setup(e.to_string()))?;
        ssl(
            "x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 30 -extfile san.ext",
        )?;
        ssl("genrsa -out sa.key 2048 && openssl rsa -in sa.key -pubout -out sa.pub")?;
        let admin_token = format!("admin-{}", std::process::id());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{admin_token},admin,admin,system:masters\n"),
        )
        .map_err(|e| Error::Setup(e.to_string()))?;
        let ca = BASE64
            .encode(std::fs::read(dir.join("ca.crt")).map_err(|e| Error::Setup(e.to_string()))?);

        let (etcd_port, etcd_peer, api_port, control_port) =
            (free_port()?, free_port()?, free_port()?, free_port()?);
        let etcd = spawn_logged(
            &dir.join("bin/etcd"),
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            ],
            &dir,
            "etcd.log",
        )?;
        let d = |f: &str| dir.join(f).display().to_string();
        let apiserver_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            // default/kubernetes's endpoint: where the VM finds the API server.
            format!("--advertise-address={HOST_FROM_GUEST}"),
            format!("--tls-cert-file={}", d("apiserver.crt")),
            format!("--tls-private-key-file={}", d("apiserver.key")),
            format!("--client-ca-file={}", d("ca.crt")),
            "--authorization-mode=Node,RBAC".into(),
            format!("--token-auth-file={}", d("tokens.csv")),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", d("sa.pub")),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112".into(),
            format!("--cert-dir={}", d("certs")),
            "--profiling=false".into(),
            // As kubeadm runs it: the DaemonSet's init container is privileged.
            "--allow-privileged=true".into(),
            // Validation as before 1.36 (ParseIPSloppy), so that tests can store what
            // long-lived clusters still hold: addresses with leading zeros.
            "--feature-gates=StrictIPCIDRValidation=false".into(),
        ];
        std::fs::write(
            dir.join("admin-host.kubeconfig"),
            kubeconfig(
                &ca,
                &format!("https://127.0.0.1:{api_port}"),
                "admin",
                &admin_token,
            ),
        )
        .map_err(|e| Error::Setup(e.to_string()))?;
        let mut procs = Procs {
            etcd,
            apiserver: None,
            apiserver_args,
            dir: dir.clone(),
            etcd_port,
        };
        procs.start_apiserver()?;
        let ready = t0.elapsed();

        let kubectl = |args: &[&str]| -> Result<String> {
            let mut cmd = Command::new(dir.join("bin/kubectl"));
            cmd.arg("--kubeconfig")
                .arg(dir.join("admin-host.kubeconfig"))
                .args(args);
            output(&mut cmd)
        };
        let deploy = root().join("deploy");
        kubectl(&[
            "apply",
            "-f",
            &deploy.join("rbac.yaml").display().to_string(),
        ])?;
        kubectl(&[
            "-n",
            "kube-system",
            "create",
            "serviceaccount",
            "kube-proxy",
        ])?;
        kubectl(&[
            "create",
            "clusterrolebinding",
            "peers-kube-proxy",
            "--clusterrole=system:node-proxier",
            "--serviceaccount=kube-system:kube-proxy",
        ])?;
        let agent_token = kubectl(&[
            "-n",
            "kube-system",
            "create",
            "token",
            "kube-proxy-ipvs",
            "--duration=24h",
        ])?;
        let kp_token = kubectl(&[
            "-n",
            "kube-system",
            "create",
            "token",
            "kube-proxy",
            "--duration=24h",
        ])?;
        let local = format!("https://{LOCAL_API}");
        for (file, user, token) in [
            ("admin.kubeconfig", "admin", admin_token.as_str()),
            ("agent.kubeconfig", "kube-proxy-ipvs", agent_token.trim()),
            ("kube-proxy.kubeconfig", "kube-proxy", kp_token.trim()),
        ] {
            std::fs::write(dir.join(file), kubeconfig(&ca, &local, user, token))
                .map_err(|e| Error::Setup(e.to_string()))?;
        }
        // Every manifest we ship, validated by the real API (schemas, admission, RBAC refs).
        let mut manifests: Vec<PathBuf> = std::fs::read_dir(&deploy)
            .map_err(|e| Error::Setup(e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            // kustomize's own file, not an object the API server knows.
            .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
            .collect();
        manifests.sort();
        for m in &manifests {
            kubectl(&["apply", "--dry-run=server", "-f", &m.display().to_string()]).map_err(
                |e| {
                    Error::Failed(format!(
                        "{} is rejected by the real API server: {e}",
                        m.display()
                    ))
                },
            )?;
        }
        let endpoints = format!(
            "APISERVER={HOST_FROM_GUEST}:{api_port}\nCONTROL={HOST_FROM_GUEST}:{control_port}\nETCD={HOST_FROM_GUEST}:{etcd_port}\n"
        );
        std::fs::write(dir.join("endpoints.env"), endpoints)
            .map_err(|e| Error::Setup(e.to_string()))?;
        eprintln!(
            "lab: control plane ready in {ready:.1?} (etcd, kube-apiserver on 127.0.0.1:{api_port}), set up in {:.1?}; {} manifests of deploy/ pass --dry-run=server",
            t0.elapsed(),
            manifests.len()
        );

        let procs = Arc::new(Mutex::new(procs));
        let stop = Arc::new(AtomicBool::new(false));
        let listener = TcpListener::bind(("127.0.0.1", control_port))
            .map_err(|e| Error::Setup(format!("control port: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::Setup(e.to_string()))?;
        let (p, s) = (procs.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let mut line = String::new();
                        let mut r = BufReader::new(&conn);
                        if r.read_line(&mut line).is_ok() {
                            let verb = line.trim();
                            let answer =
                                match p.lock().unwrap_or_else(|e| e.into_inner()).handle(verb) {
                                    Ok(m) => format!("ok {m}\n"),
                                    Err(e) => {
                                        format!("error {}\n", e.to_string().replace('\n', " "))
                                    }
                                };
                            eprintln!("lab: control plane: {verb}: {}", answer.trim());
                            let _ = (&conn).write_all(answer.as_bytes());
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        });
        let mut ports = BTreeMap::new();
        ports.insert("APISERVER".into(), api_port);
        ports.insert("CONTROL".into(), control_port);
        ports.insert("ETCD".into(), etcd_port);
        Ok(ControlPlane {
            dir,
            ports,
            host: Some(Host { procs, stop }),
        })
    }

    /// The directory to copy into the guest and name in [`ENV`].
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The control plane `lab test` started, inside the guest; `None` outside one.
    pub fn from_env() -> Option<ControlPlane> {
        let dir = PathBuf::from(std::env::var_os(ENV)?);
        let text = std::fs::read_to_string(dir.join("endpoints.env")).ok()?;
        let ports = text
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once('=')?;
                Some((k.to_string(), v.rsplit(':').next()?.parse().ok()?))
            })
            .collect();
        Some(ControlPlane {
            dir,
            ports,
            host: None,
        })
    }

    fn port(&self, name: &str) -> u16 {
        self.ports
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("no {name} port in endpoints.env"))
    }

    /// The admin's kubeconfig (group `system:masters`), for tests that create objects.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The agent's kubeconfig: a token of `deploy/rbac.yaml`'s ServiceAccount.
    pub fn agent_kubeconfig(&self) -> PathBuf {
        self.dir.join("agent.kubeconfig")
    }

    /// Upstream kube-proxy's kubeconfig: a ServiceAccount bound to `system:node-proxier`.
    pub fn kube_proxy_kubeconfig(&self) -> PathBuf {
        self.dir.join("kube-proxy.kubeconfig")
    }

    /// Forwards [`LOCAL_API`] in the calling thread's namespace to the API server.
    pub fn forward_here(&self) -> Forward {
        self.forward_ns(File::open("/proc/thread-self/ns/net").expect("own netns"))
    }

    /// Forwards [`LOCAL_API`] in the named namespace (`ip netns`) to the API server.
    pub fn forward_into(&self, netns: &str) -> Forward {
        let path = format!("/run/netns/{netns}");
        self.forward_ns(File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    }

    fn forward_ns(&self, ns: File) -> Forward {
        let target = format!("{HOST_FROM_GUEST}:{}", self.port("APISERVER"));
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let (s, c) = (stop.clone(), conns.clone());
        std::thread::spawn(move || {
            // SAFETY: setns(2) on a namespace file we own; it moves only this new thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            let listener = (rc == 0)
                .then(|| TcpListener::bind(LOCAL_API).ok())
                .flatten();
            let _ = tx.send(listener.is_some());
            let Some(listener) = listener else { return };
            let _ = listener.set_nonblocking(true);
            let root = File::open("/proc/1/ns/net").expect("the root netns");
            while !s.load(Ordering::Relaxed) {
                let Ok((inside, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let _ = inside.set_nonblocking(false);
                let root = root.try_clone().expect("netns fd");
                let (target, c) = (target.clone(), c.clone());
                std::thread::spawn(move || {
                    // SAFETY: as above, for this connection's thread.
                    if unsafe { libc::setns(root.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return;
                    }
                    let Ok(outside) = TcpStream::connect(&target) else {
                        return;
                    };
                    let pairs = [
                        (inside.try_clone(), outside.try_clone()),
                        (outside.try_clone(), inside.try_clone()),
                    ];
                    {
                        let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
                        c.extend(inside.try_clone().ok());
                        c.extend(outside.try_clone().ok());
                    }
                    let mut handles = Vec::new();
                    for (from, to) in pairs {
                        if let (Ok(mut from), Ok(mut to)) = (from, to) {
                            handles.push(std::thread::spawn(move || {
                                let _ = std::io::copy(&mut from, &mut to);
                                let _ = to.shutdown(Shutdown::Write);
                            }));
                        }
                    }
                    for h in handles {
                        let _ = h.join();
                    }
                });
            }
        });
        let ok = rx.recv().unwrap_or(false);
        assert!(
            ok,
            "cannot listen on {LOCAL_API} in the namespace (setns or bind failed)"
        );
        Forward { stop, conns }
    }

    /// Sends one request to the host's control port (from the VM's root namespace, where
    /// 10.0.2.2 is reachable) and returns its answer.
    fn request(&self, verb: &'static str) -> std::result::Result<String, String> {
        let target = format!("{HOST_FROM_GUEST}:{}", self.port("CONTROL"));
        std::thread::spawn(move || -> std::result::Result<String, String> {
            let root = File::open("/proc/1/ns/net").map_err(|e| e.to_string())?;
            // SAFETY: setns(2) on a namespace file we own; it moves only this new thread.
            if unsafe { libc::setns(root.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error().to_string());
            }
            let mut s = TcpStream::connect(&target).map_err(|e| format!("{target}: {e}"))?;
            writeln!(s, "{verb}").map_err(|e| e.to_string())?;
            let mut line = String::new();
            BufReader::new(&s)
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            match line.trim().split_once(' ') {
                Some(("ok", m)) => Ok(m.to_string()),
                _ => Err(format!("{verb}: {}", line.trim())),
            }
        })
        .join()
        .unwrap_or_else(|_| Err("the request's thread panicked".into()))
    }

    /// Stops kube-apiserver (etcd keeps running).
    pub fn stop_apiserver(&self) -> std::result::Result<String, String> {
        self.request("apiserver-stop")
    }

    /// Starts kube-apiserver again with the same flags; returns once it is ready.
    pub fn start_apiserver(&self) -> std::result::Result<String, String> {
        self.request("apiserver-start")
    }

    /// Stops and starts kube-apiserver; returns once it is ready.
    pub fn restart_apiserver(&self) -> std::result::Result<String, String> {
        self.request("apiserver-restart")
    }

    /// Compacts etcd to its current revision: every older resourceVersion is gone.
    pub fn compact_etcd(&self) -> std::result::Result<String, String> {
        self.request("etcd-compact")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(host) = &self.host {
            host.stop.store(true, Ordering::Relaxed);
            host.procs.lock().unwrap_or_else(|e| e.into_inner()).stop();
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A forwarder into a namespace; dropping it stops listening and cuts every connection it
/// carries (a test cuts a program off from the API server this way).
pub struct Forward {
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

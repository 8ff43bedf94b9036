//! `tagwire-testbed` — multi-host tests on one Linux machine (needs root).
//!
//! A [`Testbed`] is N host network namespaces, each joined by a veth pair to
//! one router namespace that forwards IPv4 between them. Host `i` is
//! `10.200.i.2/24` on its `veth0`; the router is `10.200.i.1` on `to-hi`.
//! The *bottleneck* is the router's port toward the last host, where the
//! traffic of all other hosts converges (the switch port of the YARP paper's
//! Fig. 4(b)); [`Shaping`] puts delay (netem), a rate (htb) and DSCP classes
//! (u32 filters on the TOS byte) there; [`Testbed::shape_egress`] puts the
//! same on a host's own egress instead (the sender's NIC of Fig. 4(a)), and
//! [`ClassSent`] counts what each class sent. Everything is removed when the
//! testbed is dropped, also when the test panics. Where the kernel has no
//! `netem` (this project's CI kernel), [`Testbed::wan_link`] makes a delayed
//! path from one host to another's ports with a software [`DelayRelay`]
//! (delay ± jitter per direction, bytes in order) instead. `scripts/netns.sh` builds
//! the same topology from a shell; `docs/testbed.md` explains both. The
//! `yarp_fig5` experiment (`experiments/`, `scripts/yarp-fig5.sh`) is a
//! benchmark built on it.
//!
//! ```no_run
//! use tagwire_testbed::{Shaping, Testbed, TestbedConfig};
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let tb = Testbed::new(TestbedConfig {
//!     hosts: 2,
//!     bottleneck: Some(Shaping { rate_kbit: Some(10_000), dscp_priority: true, ..Shaping::default() }),
//! })
//! .unwrap_or_else(|e| panic!("{e}"));
//! let mut ping = Command::new("ping");
//! ping.args(["-c", "1", &tb.host(1).addr().to_string()]);
//! let out = tb.host(0).output(&ping, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e}"));
//! assert!(out.status.success());
//! // Sockets made inside `run_in` live in that host's namespace.
//! let listener = tb.host(1).run_in(|| std::net::TcpListener::bind("0.0.0.0:7000")).unwrap_or_else(|e| panic!("{e}"));
//! ```

mod shaping;
mod wan;

use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::marker::PhantomData;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub use shaping::{
    ClassPackets, ClassSent, Sent, Shaping, TrafficClass, DSCP_CLASSES, UNLIMITED_KBIT,
};
pub use wan::{
    DelayLine, DelayRelay, WanLink, WanMechanism, WanPath, CHUNKS_HELD, CHUNK_BYTES, MAX_DELAY,
};

/// Every namespace a testbed (or `scripts/netns.sh`) makes starts with this.
pub const NAME_STEM: &str = "twtb-";
/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Most hosts a testbed may have (host `i` uses the subnet `10.200.i.0/24`).
pub const MAX_HOSTS: usize = 64;

/// What to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestbedConfig {
    /// Number of host namespaces, `1..=MAX_HOSTS`.
    pub hosts: usize,
    /// Shaping of the router's port toward the last host, if any.
    pub bottleneck: Option<Shaping>,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        TestbedConfig {
            hosts: 2,
            bottleneck: None,
        }
    }
}

/// Why a testbed could not be built or used. The messages say how to fix
/// what the machine lacks.
#[derive(Debug)]
#[non_exhaustive]
pub enum TestbedError {
    /// Not running as root.
    NotRoot {
        /// The effective uid.
        euid: u32,
    },
    /// Root, but without a capability namespaces need (a restricted container).
    MissingCapability {
        /// `CAP_NET_ADMIN` or `CAP_SYS_ADMIN`.
        name: &'static str,
    },
    /// A program is not installed.
    MissingTool {
        /// The program.
        tool: String,
        /// The Debian/Ubuntu package that has it.
        package: String,
    },
    /// The kernel has no such queueing discipline (and no module for it).
    QdiscUnavailable {
        /// `netem`, `htb`, …
        kind: String,
    },
    /// `ip` or `tc` failed.
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A process did not finish (or print what was awaited) in time.
    TimedOut {
        /// What was awaited.
        what: String,
        /// The bound.
        after: Duration,
        /// Its output so far.
        output: String,
    },
    /// A configuration value out of range.
    BadConfig {
        /// Which value and why.
        reason: String,
    },
    /// An I/O error.
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for TestbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TestbedError::NotRoot { euid } => write!(
                f,
                "the netns testbed needs root: it creates network namespaces, veth pairs and tc \
                 qdiscs, but this process runs as uid {euid}. Run the tests as root, e.g. \
                 `sudo -E env \"PATH=$PATH\" cargo test -p tagwire-testbed`, or in a container \
                 started with --cap-add NET_ADMIN --cap-add SYS_ADMIN (CI runs as root; see \
                 docs/testbed.md)"
            ),
            TestbedError::MissingCapability { name } => write!(
                f,
                "the netns testbed needs {name}, which this root process lacks (a restricted \
                 container?): start the container with --cap-add NET_ADMIN --cap-add SYS_ADMIN \
                 or --privileged (see docs/testbed.md)"
            ),
            TestbedError::MissingTool { tool, package } => write!(
                f,
                "`{tool}` is not installed: install it with `apt-get install -y {package}` \
                 (.ci/run does this when it is missing)"
            ),
            TestbedError::QdiscUnavailable { kind } => write!(
                f,
                "this kernel has no `{kind}` queueing discipline: it needs CONFIG_NET_SCH_{} \
                 or the module sch_{kind} (try `modprobe sch_{kind}`), or another kernel; \
                 `scripts/netns.sh check {kind}` tells whether a kernel has it",
                kind.to_uppercase()
            ),
            TestbedError::Command {
                command,
                status,
                stderr,
            } => write!(f, "`{command}` failed ({status}): {}", stderr.trim()),
            TestbedError::TimedOut {
                what,
                after,
                output,
            } => write!(
                f,
                "{what}: nothing after {after:?}; output so far: {output}"
            ),
            TestbedError::BadConfig { reason } => write!(f, "bad testbed configuration: {reason}"),
            TestbedError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for TestbedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TestbedError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TestbedError {
    let what = what.into();
    move |source| TestbedError::Io { what, source }
}

/// Checks, in this order, that the process is root, has `CAP_NET_ADMIN` and
/// `CAP_SYS_ADMIN`, and that `ip` and `tc` are installed. [`Testbed::new`]
/// calls it first; tests may call it to fail early with its message.
pub fn check_environment() -> Result<(), TestbedError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(io_err("cannot read /proc/self/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    // "Uid:	real	effective	saved	fs"
    let euid: u32 = field("Uid:")
        .split_whitespace()
        .nth(1)
        .and_then(|u| u.parse().ok())
        .unwrap_or(u32::MAX);
    if euid != 0 {
        return Err(TestbedError::NotRoot { euid });
    }
    let cap_eff = u64::from_str_radix(&field("CapEff:"), 16).unwrap_or(0);
    for (bit, name) in [(12, "CAP_NET_ADMIN"), (21, "CAP_SYS_ADMIN")] {
        if cap_eff & (1 << bit) == 0 {
            return Err(TestbedError::MissingCapability { name });
        }
    }
    require_tool("ip", "iproute2")?;
    require_tool("tc", "iproute2")?;
    Ok(())
}

/// The path of `tool` (searched in `PATH`, then `/usr/sbin`, `/sbin`), or a
/// [`TestbedError::MissingTool`] naming `package`.
pub fn require_tool(tool: &str, package: &str) -> Result<PathBuf, TestbedError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| {
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .ok_or_else(|| TestbedError::MissingTool {
            tool: tool.to_owned(),
            package: package.to_owned(),
        })
}

/// Names of the testbed namespaces that exist now (all runs, all testbeds:
/// every name starting with [`NAME_STEM`]), sorted.
pub fn existing_namespaces() -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(names),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(NAME_STEM) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The programs a testbed runs.
#[derive(Debug, Clone)]
struct Tools {
    ip: PathBuf,
    tc: PathBuf,
}

impl Tools {
    fn find() -> Result<Self, TestbedError> {
        Ok(Tools {
            ip: require_tool("ip", "iproute2")?,
            tc: require_tool("tc", "iproute2")?,
        })
    }
}

/// Runs `program args` to completion; its stdout, or an error with stderr.
fn run(program: &Path, args: &[&str]) -> Result<String, TestbedError> {
    let command = || {
        let mut c = program.display().to_string();
        for a in args {
            c.push(' ');
            c.push_str(a);
        }
        c
    };
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("cannot run `{}`", command())))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(TestbedError::Command {
            command: command(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// A network namespace of a testbed (a host or the router): run programs
/// or closures inside it.
#[derive(Debug)]
pub struct Namespace {
    name: String,
    ip: PathBuf,
}

impl Namespace {
    /// The namespace's name, as `ip netns` knows it (`ip -n NAME …`).
    pub fn ns_name(&self) -> &str {
        &self.name
    }

    /// Starts `cmd` inside the namespace (`ip netns exec NAME …`, which execs
    /// the program, so the child's pid is the program's). The program,
    /// arguments, environment changes and working directory of `cmd` are
    /// kept; stdin is null and stdout and stderr are captured (see
    /// [`NsChild`]). The child is killed when the [`NsChild`] is dropped,
    /// which the borrow makes happen before the testbed is torn down.
    pub fn spawn(&self, cmd: &Command) -> Result<NsChild<'_>, TestbedError> {
        let mut wrapped = Command::new(&self.ip);
        wrapped
            .args([OsStr::new("netns"), OsStr::new("exec"), self.name.as_ref()])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => wrapped.env(k, v),
                None => wrapped.env_remove(k),
            };
        }
        if let Some(dir) = cmd.get_current_dir() {
            wrapped.current_dir(dir);
        }
        let what = format!("{:?} in {}", cmd, self.name);
        let mut child = wrapped
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("cannot start {what}")))?;
        let stdout = child.stdout.take().map(forward_chunks);
        let stderr = child.stderr.take().map(forward_lines);
        Ok(NsChild {
            child,
            what,
            stdout,
            stderr,
            stderr_seen: String::new(),
            _testbed: PhantomData,
        })
    }

    /// Runs `cmd` inside the namespace to completion, at most `timeout`
    /// (then it is killed and this is a [`TestbedError::TimedOut`]).
    pub fn output(&self, cmd: &Command, timeout: Duration) -> Result<Output, TestbedError> {
        self.spawn(cmd)?.finish(timeout)
    }

    /// Runs `f` on a new thread that has joined this network namespace
    /// (setns(2)) and returns its result; a panic in `f` is passed on.
    /// Sockets `f` creates belong to the namespace for good and can be used
    /// from any thread afterwards: this is how a test puts an in-process
    /// router or client on a host.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, TestbedError> {
        let path = Path::new(NETNS_DIR).join(&self.name);
        let ns = File::open(&path).map_err(io_err(format!("cannot open {}", path.display())))?;
        let name = &self.name;
        std::thread::scope(|s| {
            let thread = s.spawn(move || {
                rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(|e| TestbedError::Io {
                    what: format!("cannot enter network namespace {name}"),
                    source: e.into(),
                })?;
                Ok(f())
            });
            match thread.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

/// One host of a testbed.
#[derive(Debug)]
pub struct Host {
    ns: Namespace,
    index: usize,
}

impl Host {
    /// The host's namespace name.
    pub fn ns_name(&self) -> &str {
        self.ns.ns_name()
    }

    /// The host's namespace (for [`Namespace::spawn`] and friends).
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// The host's address, `10.200.i.2`.
    pub fn addr(&self) -> Ipv4Addr {
        host_addr(self.index)
    }

    /// The router's address on this host's link, `10.200.i.1` (the host's
    /// default gateway).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.index as u8, 1)
    }

    /// The host's interface, `veth0`.
    pub fn iface(&self) -> &'static str {
        "veth0"
    }

    /// The router's interface toward this host, `to-hi`.
    pub fn router_iface(&self) -> String {
        format!("to-h{}", self.index)
    }

    /// [`Namespace::spawn`] in this host.
    pub fn spawn(&self, cmd: &Command) -> Result<NsChild<'_>, TestbedError> {
        self.ns.spawn(cmd)
    }

    /// [`Namespace::output`] in this host.
    pub fn output(&self, cmd: &Command, timeout: Duration) -> Result<Output, TestbedError> {
        self.ns.output(cmd, timeout)
    }

    /// [`Namespace::run_in`] in this host.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, TestbedError> {
        self.ns.run_in(f)
    }
}

fn host_addr(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, index as u8, 2)
}

/// A program started in a namespace by [`Namespace::spawn`]; killed (and
/// reaped) when dropped. Its stdout and stderr are read by background
/// threads, so a chatty child never blocks on a full pipe.
#[derive(Debug)]
pub struct NsChild<'tb> {
    child: Child,
    what: String,
    stdout: Option<Receiver<Vec<u8>>>,
    stderr: Option<Receiver<String>>,
    stderr_seen: String,
    _testbed: PhantomData<&'tb Testbed>,
}

fn forward_chunks(mut r: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0; 8192];
        while let Ok(n @ 1..) = r.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

fn forward_lines(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut line = Vec::new();
        while let Ok(1..) = r.read_until(b'\n', &mut line) {
            if tx
                .send(String::from_utf8_lossy(&line).into_owned())
                .is_err()
            {
                break;
            }
            line.clear();
        }
    });
    rx
}

impl NsChild<'_> {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits until a line of the child's stderr contains `needle` (e.g.
    /// tcpdump's "listening on"), at most `timeout`.
    pub fn wait_for_stderr(&mut self, needle: &str, timeout: Duration) -> Result<(), TestbedError> {
        self.wait_for_stderr_line(&format!("{needle:?}"), |l| l.contains(needle), timeout)
            .map(|_| ())
    }

    /// Waits until a line of the child's stderr satisfies `accept` (`what`
    /// describes it for the error), at most `timeout`; returns that line.
    pub fn wait_for_stderr_line(
        &mut self,
        what: &str,
        accept: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, TestbedError> {
        let deadline = Instant::now() + timeout;
        let timed_out = |seen: &str| TestbedError::TimedOut {
            what: format!("waiting for {what} from {}", self.what),
            after: timeout,
            output: seen.to_owned(),
        };
        let Some(lines) = &self.stderr else {
            return Err(timed_out(&self.stderr_seen));
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    self.stderr_seen.push_str(&line);
                    if accept(&line) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Err(timed_out(&self.stderr_seen)),
                Err(RecvTimeoutError::Disconnected) => {
                    self.stderr = None;
                    return Err(timed_out(&self.stderr_seen));
                }
            }
        }
    }

    /// Waits for the child to exit, at most `timeout`, and returns its exit
    /// status and everything it printed. A child still running at the
    /// deadline is killed and reported as [`TestbedError::TimedOut`].
    pub fn finish(mut self, timeout: Duration) -> Result<Output, TestbedError> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(io_err(format!("waiting for {}", self.what))(e)),
            }
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The pipes close when the child exits, unless something it started
        // still holds them: read what is there for a short while at most.
        let drain_until = Instant::now() + Duration::from_millis(500);
        let mut stdout = Vec::new();
        if let Some(chunks) = self.stdout.take() {
            while let Ok(chunk) =
                chunks.recv_timeout(drain_until.saturating_duration_since(Instant::now()))
            {
                stdout.extend_from_slice(&chunk);
            }
        }
        let mut stderr = std::mem::take(&mut self.stderr_seen);
        if let Some(lines) = self.stderr.take() {
            while let Ok(line) =
                lines.recv_timeout(drain_until.saturating_duration_since(Instant::now()))
            {
                stderr.push_str(&line);
            }
        }
        match status {
            Some(status) => Ok(Output {
                status,
                stdout,
                stderr: stderr.into_bytes(),
            }),
            None => Err(TestbedError::TimedOut {
                what: format!("waiting for {} to exit", self.what),
                after: timeout,
                output: format!("{}{stderr}", String::from_utf8_lossy(&stdout)),
            }),
        }
    }

    /// Has the child exited? (`None`: still running.)
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }
}

impl Drop for NsChild<'_> {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

static NEXT_TESTBED: AtomicU32 = AtomicU32::new(0);

/// Host namespaces joined through a router namespace; torn down on drop.
/// See the crate documentation for the topology and addresses.
#[derive(Debug)]
pub struct Testbed {
    prefix: String,
    tools: Tools,
    router: Namespace,
    hosts: Vec<Host>,
    /// Namespaces created so far (all of them once `new` returns).
    created: Vec<String>,
    bottleneck: Option<Shaping>,
}

impl Testbed {
    /// Builds the testbed. Fails first, with a message saying how to get
    /// it, if the process is not root or lacks `ip`/`tc`; fails with
    /// [`TestbedError::QdiscUnavailable`] if the kernel lacks a qdisc the
    /// shaping needs. A half-built testbed is removed before this returns.
    pub fn new(config: TestbedConfig) -> Result<Testbed, TestbedError> {
        check_environment()?;
        if !(1..=MAX_HOSTS).contains(&config.hosts) {
            return Err(TestbedError::BadConfig {
                reason: format!("hosts {} is out of range 1..={MAX_HOSTS}", config.hosts),
            });
        }
        if let Some(s) = &config.bottleneck {
            shaping::validate(s).map_err(|reason| TestbedError::BadConfig { reason })?;
        }
        let tools = Tools::find()?;
        remove_stale(&tools);
        let prefix = format!(
            "{NAME_STEM}{}-{}",
            std::process::id(),
            NEXT_TESTBED.fetch_add(1, Ordering::Relaxed)
        );
        let ns = |name: String| Namespace {
            name,
            ip: tools.ip.clone(),
        };
        let mut tb = Testbed {
            router: ns(format!("{prefix}-r")),
            hosts: (0..config.hosts)
                .map(|index| Host {
                    ns: ns(format!("{prefix}-h{index}")),
                    index,
                })
                .collect(),
            prefix,
            tools,
            created: Vec::new(),
            bottleneck: config.bottleneck,
        };
        tb.build()?; // on error, dropping `tb` removes what was made
        Ok(tb)
    }

    fn ip(&self, args: &[&str]) -> Result<String, TestbedError> {
        run(&self.tools.ip, args)
    }

    /// Runs the `tc` commands of `shaping` on `dev` in namespace `ns`.
    fn apply_shaping(&self, ns: &str, dev: &str, shaping: &Shaping) -> Result<(), TestbedError> {
        for args in shaping::tc_commands(dev, shaping) {
            let mut full = vec!["-n", ns];
            full.extend(args.iter().map(String::as_str));
            run(&self.tools.tc, &full).map_err(|e| match e {
                TestbedError::Command { stderr, .. }
                    if stderr.contains("qdisc kind is unknown") =>
                {
                    TestbedError::QdiscUnavailable {
                        kind: args
                            .iter()
                            .skip_while(|a| *a != "handle")
                            .nth(2)
                            .cloned()
                            .unwrap_or_default(),
                    }
                }
                e => e,
            })?;
        }
        Ok(())
    }

    fn class_sent(&self, ns: &str, dev: &str) -> Result<ClassSent, TestbedError> {
        let text = run(
            &self.tools.tc,
            &["-n", ns, "-s", "class", "show", "dev", dev],
        )?;
        Ok(shaping::parse_class_sent(&text))
    }

    fn build(&mut self) -> Result<(), TestbedError> {
        let router = self.router.name.clone();
        self.ip(&["netns", "add", &router])?;
        self.created.push(router.clone());
        self.ip(&["-n", &router, "link", "set", "lo", "up"])?;
        self.router.run_in(|| {
            std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
                .map_err(io_err("cannot turn on IPv4 forwarding in the router"))
        })??;
        for i in 0..self.hosts.len() {
            let host = self.hosts[i].ns.name.clone();
            self.ip(&["netns", "add", &host])?;
            self.created.push(host.clone());
            let (port, addr) = (self.hosts[i].router_iface(), host_addr(i));
            let gw = self.hosts[i].gateway();
            // Both ends are created inside their namespaces: names only need
            // to be unique there, so parallel testbeds never collide.
            self.ip(&[
                "link", "add", "veth0", "netns", &host, "type", "veth", "peer", "name", &port,
                "netns", &router,
            ])?;
            self.ip(&[
                "-n",
                &router,
                "addr",
                "add",
                &format!("{gw}/24"),
                "dev",
                &port,
            ])?;
            self.ip(&["-n", &router, "link", "set", &port, "up"])?;
            self.ip(&[
                "-n",
                &host,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "veth0",
            ])?;
            self.ip(&["-n", &host, "link", "set", "veth0", "up"])?;
            self.ip(&["-n", &host, "link", "set", "lo", "up"])?;
            self.ip(&[
                "-n",
                &host,
                "route",
                "add",
                "default",
                "via",
                &gw.to_string(),
            ])?;
        }
        if let Some(s) = self.bottleneck {
            self.apply_shaping(&router, &self.bottleneck_iface(), &s)?;
        }
        Ok(())
    }

    /// The name prefix shared by this testbed's namespaces
    /// (`twtb-PID-N`); unique per testbed and process.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Host `i` (0-based).
    ///
    /// # Panics
    /// If `i` is not below the configured number of hosts.
    pub fn host(&self, i: usize) -> &Host {
        assert!(
            i < self.hosts.len(),
            "host {i} asked of a testbed with {} hosts",
            self.hosts.len()
        );
        &self.hosts[i]
    }

    /// The hosts.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The router's namespace name.
    pub fn router_ns(&self) -> &str {
        &self.router.name
    }

    /// The router's namespace (to run `tc`, `tcpdump` … there).
    pub fn router(&self) -> &Namespace {
        &self.router
    }

    /// The bottleneck: the router's interface toward the last host.
    pub fn bottleneck_iface(&self) -> String {
        format!("to-h{}", self.hosts.len() - 1)
    }

    /// Every namespace name of this testbed (router first).
    pub fn namespaces(&self) -> Vec<String> {
        std::iter::once(self.router.name.clone())
            .chain(self.hosts.iter().map(|h| h.ns.name.clone()))
            .collect()
    }

    /// Packets sent so far by each class of the bottleneck; all zero when
    /// the bottleneck has no htb classes (no rate and no `dscp_priority`).
    pub fn bottleneck_class_packets(&self) -> Result<ClassPackets, TestbedError> {
        let dev = self.bottleneck_iface();
        let text = run(
            &self.tools.tc,
            &["-n", &self.router.name, "-s", "class", "show", "dev", &dev],
        )?;
        Ok(shaping::parse_class_packets(&text))
    }

    /// Bytes and packets sent so far by each class of the bottleneck and by
    /// the link as a whole; all zero without htb classes.
    pub fn bottleneck_class_sent(&self) -> Result<ClassSent, TestbedError> {
        self.class_sent(&self.router.name, &self.bottleneck_iface())
    }

    /// Shapes the *sending* side of host `i`: the same htb tree as the
    /// bottleneck's ([`Shaping`]: rate, DSCP classes, delay) on the host's
    /// own `veth0`, for everything the host sends. This is where the YARP
    /// paper's Fig. 4(a) congests: in the sender's network driver, when
    /// several of its applications write to one NIC. Locally generated TCP
    /// is then also held back by TCP Small Queues, so a bulk sender keeps
    /// only a few packets in this qdisc and the rest in its socket buffer.
    /// Call it once per host, on a testbed built without shaping there.
    ///
    /// # Panics
    /// If `i` is not below the number of hosts.
    pub fn shape_egress(&self, i: usize, shaping: &Shaping) -> Result<(), TestbedError> {
        shaping::validate(shaping).map_err(|reason| TestbedError::BadConfig { reason })?;
        let host = self.host(i);
        self.apply_shaping(host.ns_name(), host.iface(), shaping)
    }

    /// Bytes and packets sent so far by each class of host `i`'s egress
    /// (see [`Testbed::shape_egress`]); all zero when it is not shaped.
    ///
    /// # Panics
    /// If `i` is not below the number of hosts.
    pub fn egress_class_sent(&self, i: usize) -> Result<ClassSent, TestbedError> {
        let host = self.host(i);
        self.class_sent(host.ns_name(), host.iface())
    }

    /// Makes every host hand its qdiscs packets of at most one MTU, as a
    /// NIC puts them on the wire and a switch port queues them: sets
    /// `gso_max_segs 1` on each host's `veth0`. By default a veth takes
    /// TCP's segmentation-offload "super-packets" of up to 64 KiB whole,
    /// and a shaped port then queues and releases them as single units.
    pub fn mtu_sized_packets(&self) -> Result<(), TestbedError> {
        for host in &self.hosts {
            self.ip(&[
                "-n",
                host.ns_name(),
                "link",
                "set",
                "dev",
                host.iface(),
                "gso_max_segs",
                "1",
            ])?;
        }
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for name in self.created.iter().rev() {
            if let Err(e) = remove_namespace(&self.tools, name) {
                eprintln!("tagwire-testbed: could not remove namespace {name}: {e}");
            }
        }
    }
}

/// Kills every process left in namespace `name` (bounded wait), then
/// deletes it; its veth ends go with it.
fn remove_namespace(tools: &Tools, name: &str) -> Result<(), TestbedError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = run(&tools.ip, &["netns", "pids", name])?;
        let pids: Vec<i32> = pids
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() || Instant::now() >= deadline {
            break;
        }
        for pid in pids {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    run(&tools.ip, &["netns", "del", name]).map(drop)
}

/// Removes namespaces left by testbeds of processes that died without
/// dropping them (SIGKILL, abort): names `twtb-PID-N-…` whose PID is gone.
/// Namespaces of `scripts/netns.sh` (`twtb-sh…` or a chosen name) are left.
fn remove_stale(tools: &Tools) {
    for name in existing_namespaces().unwrap_or_default() {
        let Some(pid) = name
            .strip_prefix(NAME_STEM)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            if let Err(e) = remove_namespace(tools, &name) {
                eprintln!("tagwire-testbed: could not remove stale namespace {name}: {e}");
            }
        }
    }
}

//! The two OS knobs behind a channel's priority, as YARP turns them (paper
//! §2): the scheduling policy of the thread that serves it
//! ([`apply_sched`]) and the DSCP class its packets carry ([`set_dscp`]).
//!
//! Which to turn when: `sched` decides which *thread* runs first when
//! several lanes have work (it matters when the CPU is busy); `dscp`
//! decides which *packet* leaves first where links queue — the host's
//! qdisc and DSCP-aware switches (it matters when the network is busy).
//! YARP's experiment (Fig. 5) sets both: `fifo:30` and AF42.
//!
//! Real-time policies need `CAP_SYS_NICE` (or `RLIMIT_RTPRIO`, `ulimit
//! -r`). Without it [`apply_sched`] does not fail: it falls back to
//! `SCHED_OTHER` with a nice value mapped from the requested priority (see
//! [`nice_for_rt_priority`]) and says so in [`Applied::FellBack`], for the
//! caller to log once and show in admin output.

use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::str::FromStr;

use rustix::net::sockopt;
use rustix::net::AddressFamily;
use thread_priority::{
    NormalThreadSchedulePolicy, RealtimeThreadSchedulePolicy, ThreadPriority, ThreadPriorityValue,
    ThreadSchedulePolicy,
};

/// DSCP of the `low` band: AF11 (TOS byte 0x28).
pub const DSCP_AF11: u8 = 10;
/// DSCP of the `normal` band: CS0, best effort (TOS byte 0x00).
pub const DSCP_CS0: u8 = 0;
/// DSCP of the `high` band: AF42 (TOS byte 0x90).
pub const DSCP_AF42: u8 = 36;
/// DSCP of the `critical` band: VOICE-ADMIT (TOS byte 0xb0).
pub const DSCP_VA: u8 = 44;

/// Marks every packet `socket` sends with `dscp` (0..=63): sets `IP_TOS`
/// to `dscp << 2` on IPv4 sockets; on IPv6 sockets sets `IPV6_TCLASS` and
/// also `IP_TOS`, which IPv4-mapped peers (`::ffff:a.b.c.d`) use. The two
/// ECN bits stay 0 (for TCP the kernel owns them). A Unix-domain socket has
/// no packets on a network: the call does nothing and returns `Ok`.
///
/// Set it before `connect` for the SYN to carry it too; a listening socket's
/// class is inherited by the sockets it accepts. A DSCP above 63 is refused
/// with [`io::ErrorKind::InvalidInput`]; other socket families with
/// [`io::ErrorKind::Unsupported`].
pub fn set_dscp(socket: impl AsFd, dscp: u8) -> io::Result<()> {
    if dscp > 63 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("DSCP {dscp} is out of range 0..=63"),
        ));
    }
    let fd = socket.as_fd();
    let tos = dscp << 2;
    match sockopt::socket_domain(fd)? {
        AddressFamily::INET => sockopt::set_ip_tos(fd, tos)?,
        AddressFamily::INET6 => {
            sockopt::set_ipv6_tclass(fd, tos.into())?;
            sockopt::set_ip_tos(fd, tos)?;
        }
        AddressFamily::UNIX => {}
        other => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("DSCP applies to IP sockets, not to address family {other:?}"),
            ))
        }
    }
    Ok(())
}

/// A thread scheduling policy and its priority, as users write it:
/// `other`, `other:NICE` (-20..=19), `fifo:N`, `rr:N` (1..=99; higher runs
/// first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchedPolicy {
    /// `SCHED_OTHER`, the time-sharing default, with a nice value
    /// (-20 = most favoured … 19 = least).
    Other {
        /// The nice value.
        nice: i8,
    },
    /// `SCHED_FIFO` at a real-time priority (1..=99): runs until it blocks
    /// or a higher priority wakes up.
    Fifo(u8),
    /// `SCHED_RR` at a real-time priority (1..=99): like `Fifo`, with time
    /// slices among threads of the same priority.
    RoundRobin(u8),
}

impl Default for SchedPolicy {
    fn default() -> Self {
        SchedPolicy::Other { nice: 0 }
    }
}

/// Real-time priorities `fifo:N` and `rr:N` accept.
pub const RT_PRIORITIES: std::ops::RangeInclusive<u8> = 1..=99;
/// Nice values `other:NICE` accepts.
pub const NICE_VALUES: std::ops::RangeInclusive<i8> = -20..=19;

impl fmt::Display for SchedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedPolicy::Other { nice: 0 } => f.write_str("other"),
            SchedPolicy::Other { nice } => write!(f, "other:{nice}"),
            SchedPolicy::Fifo(p) => write!(f, "fifo:{p}"),
            SchedPolicy::RoundRobin(p) => write!(f, "rr:{p}"),
        }
    }
}

/// Parsed by core's [`Sched`](tagwire_core::qos::Sched), the one parser of
/// `sched` values (its errors name the property, the value and the range).
impl FromStr for SchedPolicy {
    type Err = tagwire_core::qos::QosError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<tagwire_core::qos::Sched>().map(SchedPolicy::from)
    }
}

impl From<tagwire_core::qos::Sched> for SchedPolicy {
    fn from(s: tagwire_core::qos::Sched) -> Self {
        use tagwire_core::qos::Sched;
        match s {
            Sched::Other { nice } => SchedPolicy::Other { nice },
            Sched::Fifo { priority } => SchedPolicy::Fifo(priority),
            Sched::RoundRobin { priority } => SchedPolicy::RoundRobin(priority),
        }
    }
}

/// What [`apply_sched`] put in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The policy asked for.
    Exactly(SchedPolicy),
    /// Not permitted: `got` is in force instead. Log `reason` once (it says
    /// what was refused and how to permit it) and show it in admin output.
    FellBack {
        /// What was asked for.
        wanted: SchedPolicy,
        /// What is in force.
        got: SchedPolicy,
        /// What was refused, why, and what would permit it.
        reason: String,
    },
}

impl Applied {
    /// The policy in force.
    pub fn policy(&self) -> SchedPolicy {
        match self {
            Applied::Exactly(p) | Applied::FellBack { got: p, .. } => *p,
        }
    }
}

/// Why [`apply_sched`] could not apply anything (a refusal for lack of
/// permission is not an error: it falls back).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedError {
    /// A priority outside [`RT_PRIORITIES`] or a nice outside
    /// [`NICE_VALUES`] (only possible when built in code, not parsed).
    #[error("{policy}: priority out of range (fifo/rr 1..=99, other -20..=19)")]
    InvalidPriority {
        /// The policy given.
        policy: SchedPolicy,
    },
    /// The OS refused for another reason than permission.
    #[error("cannot apply {policy} to this thread: {source}")]
    Os {
        /// The policy tried.
        policy: SchedPolicy,
        /// The OS error.
        source: io::Error,
    },
}

/// The nice value that stands in for real-time priority `p` when the
/// real-time policy is not permitted: `-ceil(p / 5)`, so 1..=5 → -1,
/// 10 → -2, 30 → -6, 50 → -10, 96..=99 → -20. Higher real-time priority,
/// more favoured nice; every fallback is still above plain `other` (0).
pub fn nice_for_rt_priority(p: u8) -> i8 {
    let p = p.clamp(*RT_PRIORITIES.start(), *RT_PRIORITIES.end());
    -(p.div_ceil(5) as i8)
}

/// The fallback decision, a pure function: having tried `tried` and got
/// `err`, with the thread's nice value at `current_nice`, what to try next
/// — or `None` to give up and report `err`.
///
/// Only a permission error (`EPERM` from a real-time policy, `EACCES` from
/// a lower nice) falls back:
/// - `fifo:N` / `rr:N` → `other:NICE` with NICE = [`nice_for_rt_priority`]
///   (or the current nice, if that is already more favoured);
/// - `other:NICE` below the current nice → `other:CURRENT` (keep what the
///   thread has: raising or keeping one's nice needs no privilege).
pub fn fallback(tried: SchedPolicy, err: &io::Error, current_nice: i8) -> Option<SchedPolicy> {
    if err.kind() != io::ErrorKind::PermissionDenied {
        return None;
    }
    match tried {
        SchedPolicy::Fifo(p) | SchedPolicy::RoundRobin(p) => Some(SchedPolicy::Other {
            nice: nice_for_rt_priority(p).min(current_nice),
        }),
        SchedPolicy::Other { nice } if nice < current_nice => {
            Some(SchedPolicy::Other { nice: current_nice })
        }
        SchedPolicy::Other { .. } => None,
    }
}

/// Why a policy was refused and what would permit it, for the log.
fn refusal(tried: SchedPolicy, err: &io::Error) -> String {
    let permit = match tried {
        SchedPolicy::Fifo(p) | SchedPolicy::RoundRobin(p) => {
            format!("needs CAP_SYS_NICE or RLIMIT_RTPRIO >= {p} (`ulimit -r {p}`, or LimitRTPRIO= in a systemd unit)")
        }
        SchedPolicy::Other { nice } => format!(
            "needs CAP_SYS_NICE or RLIMIT_NICE >= {} (`ulimit -e {}`)",
            20 - i32::from(nice),
            20 - i32::from(nice)
        ),
    };
    format!("{tried} refused ({err}): {permit}")
}

/// Applies `policy` to the calling thread (a lane calls it first thing).
/// A policy the process lacks permission for falls back (see [`fallback`])
/// and returns [`Applied::FellBack`]; it never aborts. Bounded: at most
/// three attempts (real-time, mapped nice, current nice).
pub fn apply_sched(policy: SchedPolicy) -> Result<Applied, SchedError> {
    let valid = match policy {
        SchedPolicy::Other { nice } => NICE_VALUES.contains(&nice),
        SchedPolicy::Fifo(p) | SchedPolicy::RoundRobin(p) => RT_PRIORITIES.contains(&p),
    };
    if !valid {
        return Err(SchedError::InvalidPriority { policy });
    }
    let current_nice = current_nice().map_err(|source| SchedError::Os { policy, source })?;
    let mut attempt = policy;
    let mut refusals: Vec<String> = Vec::new();
    for _ in 0..3 {
        match set_policy(attempt) {
            Ok(()) if refusals.is_empty() => return Ok(Applied::Exactly(attempt)),
            Ok(()) => {
                return Ok(Applied::FellBack {
                    wanted: policy,
                    got: attempt,
                    reason: refusals.join("; "),
                })
            }
            Err(e) => match fallback(attempt, &e, current_nice) {
                Some(next) => {
                    refusals.push(refusal(attempt, &e));
                    attempt = next;
                }
                None => {
                    return Err(SchedError::Os {
                        policy: attempt,
                        source: e,
                    })
                }
            },
        }
    }
    Err(SchedError::Os {
        policy: attempt,
        source: io::Error::other(format!(
            "no fallback was permitted: {}",
            refusals.join("; ")
        )),
    })
}

/// The calling thread's policy, priority and nice value, as the OS has
/// them. `SCHED_BATCH`, `SCHED_IDLE` and `SCHED_DEADLINE`, which
/// [`SchedPolicy`] does not name, are [`io::ErrorKind::Unsupported`].
pub fn current_sched() -> io::Result<SchedPolicy> {
    let (policy, params) =
        thread_priority::unix::thread_schedule_policy_param(thread_priority::thread_native_id())
            .map_err(os_error)?;
    let rt = u8::try_from(params.sched_priority).unwrap_or(0);
    match policy {
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other) => Ok(SchedPolicy::Other {
            nice: current_nice()?,
        }),
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo) => {
            Ok(SchedPolicy::Fifo(rt))
        }
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::RoundRobin) => {
            Ok(SchedPolicy::RoundRobin(rt))
        }
        other => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the thread runs under {other:?}, which SchedPolicy does not name"),
        )),
    }
}

/// The calling thread's nice value (Linux keeps one per thread).
fn current_nice() -> io::Result<i8> {
    let nice = rustix::process::getpriority_process(Some(rustix::thread::gettid()))?;
    Ok(nice.clamp(-20, 19) as i8)
}

fn os_error(e: thread_priority::Error) -> io::Error {
    match e {
        thread_priority::Error::OS(code) => io::Error::from_raw_os_error(code),
        other => io::Error::new(io::ErrorKind::InvalidInput, other.to_string()),
    }
}

/// One attempt, no fallback.
pub(crate) fn set_policy(policy: SchedPolicy) -> io::Result<()> {
    let thread = thread_priority::thread_native_id();
    match policy {
        SchedPolicy::Fifo(p) | SchedPolicy::RoundRobin(p) => {
            let rt = if let SchedPolicy::Fifo(_) = policy {
                RealtimeThreadSchedulePolicy::Fifo
            } else {
                RealtimeThreadSchedulePolicy::RoundRobin
            };
            let value = ThreadPriorityValue::try_from(p)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            thread_priority::set_thread_priority_and_policy(
                thread,
                ThreadPriority::Crossplatform(value),
                ThreadSchedulePolicy::Realtime(rt),
            )
            .map_err(os_error)
        }
        SchedPolicy::Other { nice } => {
            let other = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other);
            let (now, _) =
                thread_priority::unix::thread_schedule_policy_param(thread).map_err(os_error)?;
            if now != other {
                // thread-priority switches to SCHED_OTHER and then sets a nice
                // of its own (it cannot take an exact one: its OS value type
                // has no public constructor). Ask for the most favoured, -20:
                // if that is refused the policy has switched all the same, and
                // the exact nice is set below either way.
                let switched = thread_priority::set_thread_priority_and_policy(
                    thread,
                    ThreadPriority::Max,
                    other,
                );
                let (now, _) = thread_priority::unix::thread_schedule_policy_param(thread)
                    .map_err(os_error)?;
                if now != other {
                    return Err(match switched {
                        Err(e) => os_error(e),
                        Ok(()) => io::Error::other("the thread did not switch to SCHED_OTHER"),
                    });
                }
            }
            rustix::process::setpriority_process(Some(rustix::thread::gettid()), i32::from(nice))?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};

    fn pair(addr: std::net::IpAddr) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind((addr, 0)).expect("bind loopback");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    #[test]
    fn af42_on_a_tcp_pair_reads_back_as_tos_0x90_on_both_ends() {
        let (client, server) = pair(Ipv4Addr::LOCALHOST.into());
        set_dscp(&client, DSCP_AF42).unwrap();
        set_dscp(&server, DSCP_AF42).unwrap();
        for s in [&client, &server] {
            assert_eq!(socket2::SockRef::from(s).tos().unwrap(), 0x90);
        }
    }

    #[test]
    fn af42_on_an_ipv6_tcp_pair_reads_back_as_traffic_class_0x90() {
        let (client, server) = pair(Ipv6Addr::LOCALHOST.into());
        set_dscp(&client, DSCP_AF42).unwrap();
        set_dscp(&server, DSCP_AF42).unwrap();
        for s in [&client, &server] {
            let s = socket2::SockRef::from(s);
            assert_eq!(s.tclass_v6().unwrap(), 0x90);
            // For IPv4-mapped peers.
            assert_eq!(s.tos().unwrap(), 0x90);
        }
    }

    #[test]
    fn dscp_0_clears_an_earlier_mark() {
        let (client, _server) = pair(Ipv4Addr::LOCALHOST.into());
        set_dscp(&client, DSCP_VA).unwrap();
        assert_eq!(socket2::SockRef::from(&client).tos().unwrap(), 0xb0);
        set_dscp(&client, DSCP_CS0).unwrap();
        assert_eq!(socket2::SockRef::from(&client).tos().unwrap(), 0);
    }

    #[test]
    fn dscp_above_63_is_refused_naming_value_and_range() {
        let (client, _server) = pair(Ipv4Addr::LOCALHOST.into());
        let e = set_dscp(&client, 64).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string().contains("DSCP 64 is out of range 0..=63"),
            "{e}"
        );
    }

    #[test]
    fn dscp_on_a_unix_socket_is_a_no_op() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        set_dscp(&a, DSCP_AF42).unwrap();
    }

    #[test]
    fn dscp_on_a_file_is_an_error() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(set_dscp(&f, DSCP_AF42).is_err());
    }

    #[test]
    fn policies_parse_and_display_round_trip() {
        for (text, policy) in [
            ("other", SchedPolicy::Other { nice: 0 }),
            ("other:-5", SchedPolicy::Other { nice: -5 }),
            ("other:19", SchedPolicy::Other { nice: 19 }),
            ("fifo:30", SchedPolicy::Fifo(30)),
            ("rr:1", SchedPolicy::RoundRobin(1)),
            ("rr:99", SchedPolicy::RoundRobin(99)),
        ] {
            assert_eq!(text.parse::<SchedPolicy>(), Ok(policy), "{text}");
            assert_eq!(policy.to_string(), text);
        }
        assert_eq!(
            "other:0".parse::<SchedPolicy>().map(|p| p.to_string()),
            Ok("other".to_owned())
        );
    }

    #[test]
    fn bad_policies_are_refused_naming_value_and_range() {
        for (text, needle) in [
            ("fifo:0", "1..=99"),
            ("fifo:200", "1..=99"),
            ("rr:x", "1..=99"),
            ("other:20", "-20..=19"),
            ("deadline:3", "deadline:3"),
        ] {
            let e = text.parse::<SchedPolicy>().unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("sched"), "{text}: {e}");
        }
    }

    #[test]
    fn rt_priorities_map_to_ever_more_favoured_nice_values() {
        assert_eq!(nice_for_rt_priority(1), -1);
        assert_eq!(nice_for_rt_priority(5), -1);
        assert_eq!(nice_for_rt_priority(6), -2);
        assert_eq!(nice_for_rt_priority(10), -2);
        assert_eq!(nice_for_rt_priority(30), -6);
        assert_eq!(nice_for_rt_priority(99), -20);
        let all: Vec<i8> = RT_PRIORITIES.map(nice_for_rt_priority).collect();
        assert!(all.windows(2).all(|w| w[1] <= w[0]));
        assert!(all.iter().all(|n| NICE_VALUES.contains(n) && *n < 0));
    }

    fn eperm() -> io::Error {
        io::Error::from_raw_os_error(1)
    }
    fn eacces() -> io::Error {
        io::Error::from_raw_os_error(13)
    }

    #[test]
    fn refused_fifo_falls_back_to_the_mapped_nice() {
        assert_eq!(
            fallback(SchedPolicy::Fifo(30), &eperm(), 0),
            Some(SchedPolicy::Other { nice: -6 })
        );
        assert_eq!(
            fallback(SchedPolicy::RoundRobin(10), &eperm(), 0),
            Some(SchedPolicy::Other { nice: -2 })
        );
    }

    #[test]
    fn refused_fifo_keeps_a_nice_that_is_already_more_favoured() {
        assert_eq!(
            fallback(SchedPolicy::Fifo(10), &eperm(), -8),
            Some(SchedPolicy::Other { nice: -8 })
        );
    }

    #[test]
    fn refused_nice_falls_back_to_the_current_nice_and_stops_there() {
        let next = fallback(SchedPolicy::Other { nice: -6 }, &eacces(), 0);
        assert_eq!(next, Some(SchedPolicy::Other { nice: 0 }));
        // Keeping the current nice needs no privilege: a refusal is an error.
        assert_eq!(fallback(SchedPolicy::Other { nice: 0 }, &eacces(), 0), None);
    }

    #[test]
    fn errors_other_than_permission_do_not_fall_back() {
        let einval = io::Error::from_raw_os_error(22);
        assert_eq!(fallback(SchedPolicy::Fifo(30), &einval, 0), None);
        let esrch = io::Error::from_raw_os_error(3);
        assert_eq!(fallback(SchedPolicy::Other { nice: -1 }, &esrch, 0), None);
    }

    #[test]
    fn out_of_range_priorities_built_in_code_are_refused() {
        for p in [
            SchedPolicy::Fifo(0),
            SchedPolicy::RoundRobin(100),
            SchedPolicy::Other { nice: 20 },
        ] {
            assert!(
                matches!(apply_sched(p), Err(SchedError::InvalidPriority { .. })),
                "{p:?}"
            );
        }
    }

    /// The effective uid, from /proc (std has no getuid).
    fn euid() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
        uid.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    fn require_root(what: &str) {
        assert_eq!(
            euid(),
            0,
            "{what} needs root (CAP_SYS_NICE): run the tests as root, e.g. \
             `sudo -E env \"PATH=$PATH\" cargo test -p tagwire-router priority` (CI runs as root)"
        );
    }

    /// Runs `f` on a fresh thread, so a policy set there dies with it.
    fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f)
            .join()
            .expect("the test thread panicked")
    }

    #[test]
    fn fifo_10_applies_exactly_as_root_and_reads_back() {
        require_root("SCHED_FIFO");
        let (applied, now) = on_thread(|| {
            let a = apply_sched(SchedPolicy::Fifo(10)).unwrap();
            (a, current_sched().unwrap())
        });
        assert_eq!(applied, Applied::Exactly(SchedPolicy::Fifo(10)));
        assert_eq!(now, SchedPolicy::Fifo(10));
    }

    #[test]
    fn rr_then_other_switches_back_with_the_exact_nice() {
        require_root("SCHED_RR");
        let (rr, other) = on_thread(|| {
            apply_sched(SchedPolicy::RoundRobin(5)).unwrap();
            let rr = current_sched().unwrap();
            apply_sched(SchedPolicy::Other { nice: 3 }).unwrap();
            (rr, current_sched().unwrap())
        });
        assert_eq!(rr, SchedPolicy::RoundRobin(5));
        assert_eq!(other, SchedPolicy::Other { nice: 3 });
    }

    #[test]
    fn a_higher_nice_needs_no_privilege() {
        let (applied, now) = on_thread(|| {
            let a = apply_sched(SchedPolicy::Other { nice: 7 }).unwrap();
            (a, current_sched().unwrap())
        });
        assert_eq!(applied, Applied::Exactly(SchedPolicy::Other { nice: 7 }));
        assert_eq!(now, SchedPolicy::Other { nice: 7 });
    }

    /// Capabilities are per thread on Linux: this thread drops
    /// CAP_SYS_NICE and sees what an unprivileged lane sees (as root
    /// RLIMIT_RTPRIO and RLIMIT_NICE are 0 unless raised).
    #[test]
    fn without_cap_sys_nice_fifo_falls_back_to_other_and_says_why() {
        require_root("dropping CAP_SYS_NICE from a thread");
        let (applied, now) = on_thread(|| {
            use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
            let mut caps = capabilities(None).unwrap();
            caps.effective.remove(CapabilitySet::SYS_NICE);
            set_capabilities(None, caps).unwrap();
            let start = current_nice().unwrap();
            let a = apply_sched(SchedPolicy::Fifo(10)).unwrap();
            (a, (current_sched().unwrap(), start))
        });
        let (now, start_nice) = now;
        let rlimit_nice = std::fs::read_to_string("/proc/self/limits").unwrap();
        let Applied::FellBack {
            wanted,
            got,
            reason,
        } = &applied
        else {
            panic!(
                "expected a fallback without CAP_SYS_NICE, got {applied:?}; limits: {rlimit_nice}"
            );
        };
        assert_eq!(*wanted, SchedPolicy::Fifo(10));
        // -2 when RLIMIT_NICE permits it, else the nice the thread had.
        assert!(
            *got == SchedPolicy::Other { nice: -2 }
                || *got == SchedPolicy::Other { nice: start_nice },
            "{got:?}"
        );
        assert_eq!(now, *got);
        assert!(
            reason.contains("fifo:10 refused") && reason.contains("CAP_SYS_NICE"),
            "{reason}"
        );
    }
}

/// A set of CPUs a lane (and its band's client threads) may run on, written
/// as `taskset -c` and `/sys/…/cpulist` write it: `0`, `2-3`, `0,2-3`.
/// Kept sorted and without repeats; at most [`CpuList::MAX_CPU`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList(Vec<usize>);

/// Why a CPU list was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuListError {
    /// The text names no CPU.
    #[error("an empty CPU list: name CPUs as in `taskset -c`, e.g. \"1\" or \"0,2-3\"")]
    Empty,
    /// An item is not a number or a range `A-B` with A ≤ B.
    #[error("{item:?} is not a CPU number or a range A-B with A <= B (e.g. \"0,2-3\")")]
    Item {
        /// The offending item.
        item: String,
    },
    /// A CPU past what the OS can address.
    #[error("CPU {cpu} is past the largest CPU number the OS takes ({max})")]
    TooLarge {
        /// The offending CPU.
        cpu: usize,
        /// The largest accepted.
        max: usize,
    },
}

impl CpuList {
    /// The largest CPU number a list may hold (the kernel's `CPU_SETSIZE`).
    pub const MAX_CPU: usize = rustix::thread::CpuSet::MAX_CPU - 1;

    /// The CPUs, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }
}

impl FromStr for CpuList {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut cpus = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = || CpuListError::Item { item: item.into() };
            let num = |t: &str| -> Result<usize, CpuListError> {
                let cpu: usize = t.trim().parse().map_err(|_| bad())?;
                if cpu > Self::MAX_CPU {
                    return Err(CpuListError::TooLarge {
                        cpu,
                        max: Self::MAX_CPU,
                    });
                }
                Ok(cpu)
            };
            let (a, b) = match item.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let c = num(item)?;
                    (c, c)
                }
            };
            if a > b {
                return Err(bad());
            }
            cpus.extend(a..=b);
        }
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.is_empty() {
            return Err(CpuListError::Empty);
        }
        Ok(CpuList(cpus))
    }
}

impl fmt::Display for CpuList {
    /// The canonical form: ascending ranges (`0,2-3`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// Pins the calling thread to `cpus` (`sched_setaffinity(2)`). Fails, and
/// changes nothing, when none of them is online or the process may not use
/// them (a cpuset cgroup): the caller logs it once and runs unpinned.
pub fn apply_affinity(cpus: &CpuList) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus.cpus() {
        set.set(c);
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(io::Error::from)
}

#[cfg(test)]
mod cpu_list_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_lists_parse_as_taskset_writes_them() {
        let l: CpuList = "3, 0-1,1".parse().expect("valid");
        assert_eq!(l.cpus(), [0, 1, 3]);
        assert_eq!(l.to_string(), "0-1,3");
        assert_eq!(
            "2".parse::<CpuList>().map(|l| l.to_string()),
            Ok("2".into())
        );
    }

    #[test]
    fn bad_cpu_lists_are_refused_naming_the_item() {
        assert_eq!("".parse::<CpuList>(), Err(CpuListError::Empty));
        assert_eq!(
            "0,x".parse::<CpuList>(),
            Err(CpuListError::Item { item: "x".into() })
        );
        assert_eq!(
            "3-1".parse::<CpuList>(),
            Err(CpuListError::Item { item: "3-1".into() })
        );
        assert!(matches!(
            "99999".parse::<CpuList>(),
            Err(CpuListError::TooLarge { cpu: 99999, .. })
        ));
    }

    #[test]
    fn pinning_to_a_cpu_this_thread_may_use_takes_effect() {
        let allowed = rustix::thread::sched_getaffinity(None).expect("getaffinity");
        let cpu = (0..CpuList::MAX_CPU)
            .find(|&c| allowed.is_set(c))
            .expect("some CPU");
        let list: CpuList = cpu.to_string().parse().expect("valid");
        std::thread::spawn(move || {
            apply_affinity(&list).expect("pin");
            let now = rustix::thread::sched_getaffinity(None).expect("getaffinity");
            assert_eq!(now.count(), 1);
            assert!(now.is_set(cpu));
        })
        .join()
        .expect("thread");
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_refused_without_panic(s in ".{0,40}") {
            let _ = s.parse::<CpuList>();
        }

        #[test]
        fn display_round_trips(cpus in proptest::collection::btree_set(0usize..256, 1..20)) {
            let text = cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
            let l: CpuList = text.parse().expect("valid");
            let back: CpuList = l.to_string().parse().expect("canonical form parses");
            prop_assert_eq!(l.cpus(), back.cpus());
            let want: Vec<usize> = cpus.into_iter().collect();
            prop_assert_eq!(l.cpus(), want.as_slice());
        }
    }
}

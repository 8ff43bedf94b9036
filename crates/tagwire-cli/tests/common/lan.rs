//! One Ethernet segment of network namespaces: a bridge (in its own
//! namespace) and `n` hosts, each joined to it by a veth pair, addresses
//! `10.203.0.(i+1)/24`, multicast on (the route for 224.0.0.0/4 on the
//! segment). What UDP and multicast tests need: the routed testbed has one
//! subnet per host. Needs root and iproute2; removed on drop (processes
//! still running in its namespaces are killed first), also after a panic;
//! names start `twtb-` so that `scripts/netns.sh down --all` removes
//! what a killed test left.

use std::path::Path;
use std::process::Command;

/// The segment and its host namespaces.
pub struct Lan {
    bridge: String,
    hosts: Vec<String>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run ip (apt-get install -y iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {} (these tests need root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    /// A segment of `n` hosts.
    pub fn new(n: usize) -> Lan {
        let tag = std::process::id();
        let lan = Lan {
            bridge: format!("twtb-lan{tag}-br"),
            hosts: (0..n).map(|i| format!("twtb-lan{tag}-h{i}")).collect(),
        };
        ip(&["netns", "add", &lan.bridge]);
        ip(&["-n", &lan.bridge, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &lan.bridge, "link", "set", "br0", "up"]);
        for (i, h) in lan.hosts.iter().enumerate() {
            ip(&["netns", "add", h]);
            let port = format!("p{i}");
            ip(&[
                "link",
                "add",
                "eth0",
                "netns",
                h,
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &lan.bridge,
            ]);
            ip(&["-n", &lan.bridge, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &lan.bridge, "link", "set", &port, "up"]);
            ip(&[
                "-n",
                h,
                "addr",
                "add",
                &format!("{}/24", Lan::addr(i)),
                "dev",
                "eth0",
            ]);
            ip(&["-n", h, "link", "set", "eth0", "up", "multicast", "on"]);
            ip(&["-n", h, "link", "set", "lo", "up"]);
            ip(&["-n", h, "route", "add", "224.0.0.0/4", "dev", "eth0"]);
        }
        lan
    }

    /// Host `i`'s address.
    pub fn addr(i: usize) -> String {
        format!("10.203.0.{}", i + 1)
    }

    /// `cmd` to run in host `i` (program, arguments and environment; not
    /// stdio).
    pub fn exec(&self, i: usize, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.hosts[i]])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    /// Drops 1 in 10 of the packets host `i` receives that `matching`
    /// selects (an nft match, e.g. `meta l4proto udp`), with the `nft` at
    /// `nft`; the rules live in table `table` of the host's namespace (gone
    /// with it).
    pub fn drop_one_in_ten(&self, i: usize, nft: &Path, table: &str, matching: &str) {
        for rule in [
            format!("add table inet {table}"),
            format!("add chain inet {table} in {{ type filter hook input priority 0 ; }}"),
            format!("add rule inet {table} in {matching} numgen random mod 10 0 counter drop"),
        ] {
            let mut c = Command::new(nft);
            c.args(rule.split(' '));
            let out = self.exec(i, &c).output().expect("nft");
            assert!(
                out.status.success(),
                "nft {rule}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for n in self.hosts.iter().chain(std::iter::once(&self.bridge)) {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", n]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).output();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

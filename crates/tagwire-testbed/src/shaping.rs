//! The `tc` setup of the bottleneck link, built as plain argument lists so
//! that it can be unit-tested (and compared with `scripts/netns.sh`, which
//! builds the same tree) without root.
//!
//! ```text
//!   root 1: htb default 20
//!   └─ 1:1  rate R ceil R                  (the link rate)
//!      ├─ 1:10 prio 0  rate R-2F ceil R    high:   DSCP 36 (AF42), 44 (VA)
//!      ├─ 1:20 prio 1  rate F    ceil R    normal: everything else
//!      └─ 1:30 prio 2  rate F    ceil R    low:    DSCP 10 (AF11)
//!   each class: leaf netem delay D (or pfifo when there is no delay)
//! ```
//!
//! F, the floor of the normal and low classes, is 1 % of R (at least
//! 1 kbit/s): marked traffic takes the link first, unmarked traffic is never
//! starved completely. Without `dscp_priority` only 1:20 exists. With a
//! delay but no rate and no classes, the root is a plain `netem`.

use std::time::Duration;

/// Link rate used when classes are wanted but no rate is given: the
/// classifier then counts and orders packets but hardly ever queues them.
pub const UNLIMITED_KBIT: u32 = 10_000_000;

/// What the bottleneck link does: the router's port toward the last host.
///
/// All three are optional. `Shaping::default()` shapes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shaping {
    /// One-way delay added to every packet toward the last host (`netem`;
    /// needs `CONFIG_NET_SCH_NETEM` in the kernel).
    pub delay: Option<Duration>,
    /// Packets dropped at random, in percent (`netem loss`; needs netem).
    pub loss_percent: Option<u8>,
    /// Link rate in kbit/s (`htb`).
    pub rate_kbit: Option<u32>,
    /// Classify by DSCP into high, normal and low classes of strictly
    /// decreasing priority, as Table 1 of the YARP paper maps classes to
    /// `pfifo_fast` bands: AF42 (36) and VA (44) → high, AF11 (10) → low,
    /// the rest (CS0 …) → normal.
    pub dscp_priority: bool,
}

/// An HTB class of the bottleneck, by its minor number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficClass {
    /// `1:10`, prio 0: DSCP 36 (AF42) and 44 (VA).
    High = 10,
    /// `1:20`, prio 1: everything unmarked or not listed (the default).
    Normal = 20,
    /// `1:30`, prio 2: DSCP 10 (AF11).
    Low = 30,
}

/// The DSCP values the classifier recognises and where they go, as
/// `(dscp, class)`; the u32 filter matches the TOS byte `dscp << 2` under
/// the mask `0xfc` (ECN bits ignored).
pub const DSCP_CLASSES: [(u8, TrafficClass); 3] = [
    (36, TrafficClass::High),
    (44, TrafficClass::High),
    (10, TrafficClass::Low),
];

/// A configuration `tc` would refuse or that makes no sense.
pub(crate) fn validate(s: &Shaping) -> Result<(), String> {
    if let Some(r) = s.rate_kbit {
        if !(8..=UNLIMITED_KBIT).contains(&r) {
            return Err(format!(
                "rate_kbit {r} is out of range 8..={UNLIMITED_KBIT}"
            ));
        }
    }
    if let Some(d) = s.delay {
        if d.is_zero() || d > Duration::from_secs(10) {
            return Err(format!("delay {d:?} is out of range 1us..=10s"));
        }
    }
    if let Some(l) = s.loss_percent {
        if !(1..=100).contains(&l) {
            return Err(format!("loss_percent {l} is out of range 1..=100"));
        }
    }
    Ok(())
}

/// The `netem` arguments for the delay and loss, if either is set.
fn netem(s: &Shaping) -> Option<String> {
    let mut args = Vec::new();
    if let Some(d) = s.delay {
        args.push(format!("delay {}us", d.as_micros()));
    }
    if let Some(l) = s.loss_percent {
        args.push(format!("loss {l}%"));
    }
    (!args.is_empty()).then(|| format!("netem {} limit 10000", args.join(" ")))
}

/// The `tc` argument lists (without the leading `tc -n NS`) that set up
/// `shaping` on `dev`, in order. Empty when nothing is shaped.
pub(crate) fn tc_commands(dev: &str, s: &Shaping) -> Vec<Vec<String>> {
    let mut cmds: Vec<Vec<String>> = Vec::new();
    let mut add = |line: String| cmds.push(line.split(' ').map(str::to_owned).collect());
    let leaf = |parent: &str, handle: u32| match netem(s) {
        Some(n) => format!("qdisc add dev {dev} parent {parent} handle {handle}: {n}"),
        None => format!("qdisc add dev {dev} parent {parent} handle {handle}: pfifo limit 1000"),
    };
    if s.rate_kbit.is_none() && !s.dscp_priority {
        if let Some(n) = netem(s) {
            add(format!("qdisc add dev {dev} root handle 1: {n}"));
        }
        return cmds;
    }
    let rate = s.rate_kbit.unwrap_or(UNLIMITED_KBIT);
    add(format!("qdisc add dev {dev} root handle 1: htb default 20"));
    add(format!(
        "class add dev {dev} parent 1: classid 1:1 htb rate {rate}kbit ceil {rate}kbit quantum 1514"
    ));
    let classes: Vec<(TrafficClass, u32)> = if s.dscp_priority {
        let floor = (rate / 100).max(1);
        vec![
            (TrafficClass::High, rate - 2 * floor),
            (TrafficClass::Normal, floor),
            (TrafficClass::Low, floor),
        ]
    } else {
        vec![(TrafficClass::Normal, rate)]
    };
    for (prio, (class, class_rate)) in classes.iter().enumerate() {
        let minor = *class as u32;
        add(format!(
            "class add dev {dev} parent 1:1 classid 1:{minor} htb rate {class_rate}kbit ceil {rate}kbit prio {prio} quantum 1514"
        ));
        add(leaf(&format!("1:{minor}"), minor));
    }
    if s.dscp_priority {
        for (pref, (dscp, class)) in DSCP_CLASSES.iter().enumerate() {
            add(format!(
                "filter add dev {dev} parent 1: protocol ip prio {} u32 match ip dsfield {:#04x} 0xfc flowid 1:{}",
                pref + 1,
                dscp << 2,
                *class as u32
            ));
        }
    }
    cmds
}

/// Parses `tc -s class show dev D` output into packets sent per class.
pub(crate) fn parse_class_packets(text: &str) -> ClassPackets {
    let sent = parse_class_sent(text);
    ClassPackets {
        high: sent.high.packets,
        normal: sent.normal.packets,
        low: sent.low.packets,
    }
}

/// Parses `tc -s class show dev D` output into bytes and packets sent per
/// class (and by the link class `1:1`).
pub(crate) fn parse_class_sent(text: &str) -> ClassSent {
    let mut out = ClassSent::default();
    let mut current: Option<&mut Sent> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("class htb ") {
            current = match rest.split(' ').next() {
                Some("1:1") => Some(&mut out.link),
                Some("1:10") => Some(&mut out.high),
                Some("1:20") => Some(&mut out.normal),
                Some("1:30") => Some(&mut out.low),
                _ => None,
            };
        } else if let Some(rest) = line.strip_prefix("Sent ") {
            // "Sent 1234 bytes 12 pkt (dropped 0, overlimits 0 requeues 0)"
            if let Some(sent) = current.take() {
                let words: Vec<&str> = rest.split(' ').collect();
                let number = |i: usize| words.get(i).and_then(|w| w.parse().ok()).unwrap_or(0);
                *sent = Sent {
                    bytes: number(0),
                    packets: number(2),
                };
            }
        }
    }
    out
}

/// Packets each class of the bottleneck has sent so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassPackets {
    /// Class 1:10 (AF42, VA).
    pub high: u64,
    /// Class 1:20 (the rest).
    pub normal: u64,
    /// Class 1:30 (AF11).
    pub low: u64,
}

/// What one htb class has sent so far (`tc -s class show`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sent {
    /// Bytes, IP headers included (as htb counts them against the rate).
    pub bytes: u64,
    /// Packets.
    pub packets: u64,
}

/// Bytes and packets sent by each class of a shaped link, and by the link
/// as a whole (class `1:1`). Take two readings and [`ClassSent::since`] to
/// see what a stretch of an experiment sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassSent {
    /// Class 1:1, the link: everything the shaped port sent.
    pub link: Sent,
    /// Class 1:10 (AF42, VA).
    pub high: Sent,
    /// Class 1:20 (the rest; the only class without `dscp_priority`).
    pub normal: Sent,
    /// Class 1:30 (AF11).
    pub low: Sent,
}

impl ClassSent {
    /// What was sent between `earlier` and this reading.
    pub fn since(&self, earlier: &ClassSent) -> ClassSent {
        let d = |a: Sent, b: Sent| Sent {
            bytes: a.bytes.saturating_sub(b.bytes),
            packets: a.packets.saturating_sub(b.packets),
        };
        ClassSent {
            link: d(self.link, earlier.link),
            high: d(self.high, earlier.high),
            normal: d(self.normal, earlier.normal),
            low: d(self.low, earlier.low),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(cmds: &[Vec<String>]) -> Vec<String> {
        cmds.iter().map(|c| c.join(" ")).collect()
    }

    #[test]
    fn no_shaping_builds_no_commands() {
        assert!(tc_commands("to-h1", &Shaping::default()).is_empty());
    }

    #[test]
    fn loss_is_a_netem_argument_beside_the_delay() {
        let s = Shaping {
            loss_percent: Some(10),
            ..Shaping::default()
        };
        assert_eq!(
            lines(&tc_commands("to-h1", &s)),
            ["qdisc add dev to-h1 root handle 1: netem loss 10% limit 10000"]
        );
        assert!(validate(&Shaping {
            loss_percent: Some(0),
            ..Shaping::default()
        })
        .is_err());
    }

    #[test]
    fn delay_alone_is_a_root_netem() {
        let s = Shaping {
            loss_percent: None,
            delay: Some(Duration::from_millis(20)),
            ..Shaping::default()
        };
        assert_eq!(
            lines(&tc_commands("to-h1", &s)),
            ["qdisc add dev to-h1 root handle 1: netem delay 20000us limit 10000"]
        );
    }

    #[test]
    fn dscp_priority_builds_three_classes_and_af42_goes_high() {
        let s = Shaping {
            loss_percent: None,
            delay: None,
            rate_kbit: Some(10_000),
            dscp_priority: true,
        };
        let l = lines(&tc_commands("to-h1", &s));
        assert!(l.contains(&"class add dev to-h1 parent 1:1 classid 1:10 htb rate 9800kbit ceil 10000kbit prio 0 quantum 1514".to_owned()));
        assert!(l.contains(&"class add dev to-h1 parent 1:1 classid 1:20 htb rate 100kbit ceil 10000kbit prio 1 quantum 1514".to_owned()));
        assert!(l.contains(&"class add dev to-h1 parent 1:1 classid 1:30 htb rate 100kbit ceil 10000kbit prio 2 quantum 1514".to_owned()));
        assert!(l.contains(&"filter add dev to-h1 parent 1: protocol ip prio 1 u32 match ip dsfield 0x90 0xfc flowid 1:10".to_owned()));
        assert!(l.contains(&"filter add dev to-h1 parent 1: protocol ip prio 2 u32 match ip dsfield 0xb0 0xfc flowid 1:10".to_owned()));
        assert!(l.contains(&"filter add dev to-h1 parent 1: protocol ip prio 3 u32 match ip dsfield 0x28 0xfc flowid 1:30".to_owned()));
        assert_eq!(l[0], "qdisc add dev to-h1 root handle 1: htb default 20");
    }

    #[test]
    fn delay_with_classes_puts_netem_under_each_class() {
        let s = Shaping {
            loss_percent: None,
            delay: Some(Duration::from_millis(5)),
            rate_kbit: None,
            dscp_priority: true,
        };
        let netems = lines(&tc_commands("d", &s))
            .into_iter()
            .filter(|l| l.contains("netem delay 5000us"))
            .count();
        assert_eq!(netems, 3);
    }

    #[test]
    fn out_of_range_rate_and_delay_are_refused_naming_the_value() {
        let e = validate(&Shaping {
            rate_kbit: Some(1),
            ..Shaping::default()
        })
        .unwrap_err();
        assert!(e.contains("rate_kbit 1"), "{e}");
        let e = validate(&Shaping {
            delay: Some(Duration::ZERO),
            ..Shaping::default()
        })
        .unwrap_err();
        assert!(e.contains("delay 0ns"), "{e}");
    }

    #[test]
    fn class_statistics_are_parsed_per_class() {
        let text = "class htb 1:1 root rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b \n Sent 900 bytes 9 pkt (dropped 0, overlimits 0 requeues 0) \n\
class htb 1:10 parent 1:1 leaf 10: prio 0 rate 9800Kbit ceil 10Mbit burst 1600b cburst 1600b \n Sent 294 bytes 3 pkt (dropped 0, overlimits 0 requeues 0) \n\
class htb 1:20 parent 1:1 leaf 20: prio 1 rate 100Kbit ceil 10Mbit burst 1600b cburst 1600b \n Sent 500 bytes 5 pkt (dropped 0, overlimits 0 requeues 0) \n\
class htb 1:30 parent 1:1 leaf 30: prio 2 rate 100Kbit ceil 10Mbit burst 1600b cburst 1600b \n Sent 98 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n";
        assert_eq!(
            parse_class_packets(text),
            ClassPackets {
                high: 3,
                normal: 5,
                low: 1
            }
        );
    }

    #[test]
    fn class_bytes_and_the_link_class_are_parsed() {
        let text = "class htb 1:1 root rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b \n Sent 900 bytes 9 pkt (dropped 0, overlimits 0 requeues 0) \n\
class htb 1:10 parent 1:1 leaf 10: prio 0 rate 9800Kbit ceil 10Mbit burst 1600b cburst 1600b \n Sent 294 bytes 3 pkt (dropped 0, overlimits 0 requeues 0) \n\
class htb 1:20 parent 1:1 leaf 20: prio 1 rate 100Kbit ceil 10Mbit burst 1600b cburst 1600b \n Sent 500 bytes 5 pkt (dropped 0, overlimits 0 requeues 0) \n";
        let sent = parse_class_sent(text);
        assert_eq!(
            sent.link,
            Sent {
                bytes: 900,
                packets: 9
            }
        );
        assert_eq!(
            sent.high,
            Sent {
                bytes: 294,
                packets: 3
            }
        );
        assert_eq!(
            sent.normal,
            Sent {
                bytes: 500,
                packets: 5
            }
        );
        assert_eq!(sent.low, Sent::default());
        let later = ClassSent {
            link: Sent {
                bytes: 1900,
                packets: 19,
            },
            ..sent
        };
        assert_eq!(
            later.since(&sent).link,
            Sent {
                bytes: 1000,
                packets: 10
            }
        );
        assert_eq!(later.since(&sent).high, Sent::default());
    }
}

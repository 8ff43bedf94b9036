//! The placement model: nodes with CPU capacity, links with bandwidth and
//! latency, tags with one publisher and their subscribers. [`TopologySpec`]
//! is what the file says (serde, TOML or JSON); [`Topology`] is the validated
//! form with names resolved to indices, which the algorithms take.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::PlaceError;
use crate::limits;

/// How the subscribers of a tag share proxies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxySharing {
    /// One proxy per tag serves all its subscribers (the paper's §2.4).
    #[default]
    Shared,
    /// Each subscriber gets its own proxy, placed independently (each one a
    /// new set of binary variables in the MIP, as §2.4.2 describes).
    PerSubscriber,
}

/// A node as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Unique name (e.g. `"1"` or `"cmu"`).
    pub name: String,
    /// CPU capacity in CPU units per second; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Free-text description (a city, a host), shown in reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// An undirected link as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Unique name (e.g. `"a"`); defaults to `"<end0>-<end1>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The two nodes it joins.
    pub between: [String; 2],
    /// Bandwidth capacity in bytes/s, shared by both directions; absent
    /// means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<f64>,
    /// Propagation latency in ms, added to the delay of every path that
    /// crosses the link (default 0, as in the paper).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
}

/// A subscriber as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriberSpec {
    /// Name, unique within its tag.
    pub name: String,
    /// The node it runs on.
    pub node: String,
    /// Scaled period T' in ms (temporal scaling); defaults to the tag's T.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_ms: Option<f64>,
    /// Scaled message size in bytes (spatial scaling); defaults to the tag's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_bytes: Option<f64>,
    /// Required end-to-end delay δʳ in ms; absent means unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<f64>,
}

/// A tag (one publisher) as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagSpec {
    /// Unique tag name, e.g. `"/cam/left"`.
    pub name: String,
    /// The publisher's node.
    pub publisher: String,
    /// Publisher period T in ms (rate f = 1000 / T per second).
    pub period_ms: f64,
    /// Message size in bytes: the constant K of the paper's cost, so that
    /// bandwidth L = K·f. Default 1 (costs then count messages, as K·f).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_bytes: Option<f64>,
    /// Shared proxy (default) or one per subscriber.
    #[serde(default)]
    pub proxy: ProxySharing,
    /// CPU units a proxy spends per input message to scale it (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_cpu: Option<f64>,
    /// CPU units a node spends per message it sends or receives
    /// (protocol processing, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_cpu: Option<f64>,
    /// The subscribers.
    #[serde(default)]
    pub subscribers: Vec<SubscriberSpec>,
}

/// A whole topology file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// The nodes.
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
    /// The links.
    #[serde(default)]
    pub links: Vec<LinkSpec>,
    /// The tags to place proxies for.
    #[serde(default)]
    pub tags: Vec<TagSpec>,
}

/// Input format of a topology file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// TOML (the default).
    Toml,
    /// JSON (chosen by a `.json` extension).
    Json,
}

impl InputFormat {
    /// Picks JSON for a `.json` extension, TOML otherwise.
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => InputFormat::Json,
            _ => InputFormat::Toml,
        }
    }
}

impl TopologySpec {
    /// Parses TOML text (not yet validated).
    pub fn from_toml_str(text: &str) -> Result<Self, PlaceError> {
        toml::from_str(text).map_err(|e| PlaceError::Malformed {
            format: "TOML",
            message: e.to_string().trim_end().to_owned(),
        })
    }

    /// Parses JSON text (not yet validated).
    pub fn from_json_str(text: &str) -> Result<Self, PlaceError> {
        serde_json::from_str(text).map_err(|e| PlaceError::Malformed {
            format: "JSON",
            message: e.to_string(),
        })
    }

    /// Parses text in the given format.
    pub fn parse(text: &str, format: InputFormat) -> Result<Self, PlaceError> {
        match format {
            InputFormat::Toml => Self::from_toml_str(text),
            InputFormat::Json => Self::from_json_str(text),
        }
    }

    /// Reads and parses a file, refusing files over `max_bytes` before
    /// reading them (and reading at most `max_bytes + 1` bytes in any case,
    /// so a file that grows while being read is refused too).
    pub fn read_file(path: &Path, max_bytes: u64) -> Result<Self, PlaceError> {
        let read_err = |source| PlaceError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let size = file.metadata().map_err(read_err)?.len();
        if size > max_bytes {
            return Err(PlaceError::FileTooLarge {
                path: path.to_owned(),
                size,
                max: max_bytes,
            });
        }
        let mut bytes = Vec::new();
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 > max_bytes {
            return Err(PlaceError::FileTooLarge {
                path: path.to_owned(),
                size: bytes.len() as u64,
                max: max_bytes,
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| PlaceError::Malformed {
            format: match InputFormat::from_path(path) {
                InputFormat::Toml => "TOML",
                InputFormat::Json => "JSON",
            },
            message: format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        Self::parse(&text, InputFormat::from_path(path))
    }

    /// Validates the spec into a [`Topology`].
    pub fn validate(&self) -> Result<Topology, PlaceError> {
        Topology::new(self)
    }
}

/// A validated node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Name.
    pub name: String,
    /// CPU capacity (units/s), `None` = unlimited.
    pub cpu: Option<f64>,
    /// Description.
    pub label: Option<String>,
}

/// A validated undirected link.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Name.
    pub name: String,
    /// Its two end nodes (indices into [`Topology::nodes`]).
    pub ends: [usize; 2],
    /// Bandwidth capacity (bytes/s), `None` = unlimited.
    pub bandwidth: Option<f64>,
    /// Latency in ms.
    pub latency_ms: f64,
}

/// A validated subscriber.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscriber {
    /// Name (unique within its tag).
    pub name: String,
    /// Node index.
    pub node: usize,
    /// T' in ms.
    pub period_ms: f64,
    /// Scaled message size in bytes.
    pub message_bytes: f64,
    /// δʳ in ms, `None` = unbounded.
    pub max_delay_ms: Option<f64>,
}

impl Subscriber {
    /// Scaled rate f' in messages/s.
    pub fn rate(&self) -> f64 {
        1000.0 / self.period_ms
    }
    /// Scaled bandwidth L' in bytes/s.
    pub fn bandwidth(&self) -> f64 {
        self.message_bytes * self.rate()
    }
}

/// A validated tag.
#[derive(Debug, Clone, PartialEq)]
pub struct Tag {
    /// Name.
    pub name: String,
    /// Publisher node index.
    pub publisher: usize,
    /// T in ms.
    pub period_ms: f64,
    /// Message size (K) in bytes.
    pub message_bytes: f64,
    /// Proxy sharing.
    pub proxy: ProxySharing,
    /// CPU per input message at the proxy.
    pub scale_cpu: f64,
    /// CPU per message sent or received at a node.
    pub forward_cpu: f64,
    /// Subscribers (at least one).
    pub subscribers: Vec<Subscriber>,
}

impl Tag {
    /// Publisher rate f in messages/s.
    pub fn rate(&self) -> f64 {
        1000.0 / self.period_ms
    }
    /// Unscaled bandwidth L in bytes/s.
    pub fn bandwidth(&self) -> f64 {
        self.message_bytes * self.rate()
    }
}

/// A validated topology: names resolved, numbers checked, graph connected.
/// Fields are public for reading (and for tests and benchmarks that tweak a
/// capacity); changing them skips validation, so prefer editing the
/// [`TopologySpec`] and validating again.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Nodes in declaration order.
    pub nodes: Vec<Node>,
    /// Links in declaration order.
    pub links: Vec<Link>,
    /// Tags in declaration order.
    pub tags: Vec<Tag>,
    /// For each node, `(neighbour, link)` in link declaration order.
    pub(crate) adjacency: Vec<Vec<(usize, usize)>>,
}

fn check_positive(value: f64, what: impl FnOnce() -> String) -> Result<f64, PlaceError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(PlaceError::InvalidValue {
            what: what(),
            value,
            requirement: "a positive finite number",
        })
    }
}

fn check_non_negative(value: f64, what: impl FnOnce() -> String) -> Result<f64, PlaceError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(PlaceError::InvalidValue {
            what: what(),
            value,
            requirement: "a finite number >= 0",
        })
    }
}

fn check_limit(what: &'static str, value: usize, max: usize) -> Result<(), PlaceError> {
    if value > max {
        Err(PlaceError::LimitExceeded {
            what,
            value: value as u64,
            max: max as u64,
        })
    } else {
        Ok(())
    }
}

fn check_name(kind: &'static str, name: &str) -> Result<(), PlaceError> {
    if name.trim().is_empty() {
        Err(PlaceError::EmptyName { kind })
    } else {
        Ok(())
    }
}

impl Topology {
    /// Validates a spec; see [`PlaceError`] for everything it refuses.
    pub fn new(spec: &TopologySpec) -> Result<Self, PlaceError> {
        check_limit("number of nodes", spec.nodes.len(), limits::MAX_NODES)?;
        check_limit("number of links", spec.links.len(), limits::MAX_LINKS)?;
        check_limit("number of tags", spec.tags.len(), limits::MAX_TAGS)?;
        let total_subs: usize = spec.tags.iter().map(|t| t.subscribers.len()).sum();
        check_limit("number of subscribers", total_subs, limits::MAX_SUBSCRIBERS)?;
        if spec.nodes.is_empty() {
            return Err(PlaceError::NoNodes);
        }
        if spec.tags.is_empty() {
            return Err(PlaceError::NoTags);
        }

        let mut index: HashMap<&str, usize> = HashMap::with_capacity(spec.nodes.len());
        let mut nodes = Vec::with_capacity(spec.nodes.len());
        for (i, n) in spec.nodes.iter().enumerate() {
            check_name("node", &n.name)?;
            if index.insert(n.name.as_str(), i).is_some() {
                return Err(PlaceError::Duplicate {
                    kind: "node",
                    name: n.name.clone(),
                });
            }
            if let Some(cpu) = n.cpu {
                if !(cpu.is_finite() && cpu > 0.0) {
                    return Err(PlaceError::NonPositiveCpu {
                        node: n.name.clone(),
                        value: cpu,
                    });
                }
            }
            nodes.push(Node {
                name: n.name.clone(),
                cpu: n.cpu,
                label: n.label.clone(),
            });
        }
        let resolve = |name: &str, referenced_by: &dyn Fn() -> String| {
            index
                .get(name)
                .copied()
                .ok_or_else(|| PlaceError::UnknownNode {
                    referenced_by: referenced_by(),
                    node: name.to_owned(),
                })
        };

        let mut link_names: HashMap<String, ()> = HashMap::with_capacity(spec.links.len());
        let mut links = Vec::with_capacity(spec.links.len());
        let mut adjacency = vec![Vec::new(); nodes.len()];
        for l in &spec.links {
            let name = l
                .name
                .clone()
                .unwrap_or_else(|| format!("{}-{}", l.between[0], l.between[1]));
            check_name("link", &name)?;
            let a = resolve(&l.between[0], &|| format!("link {name:?}"))?;
            let b = resolve(&l.between[1], &|| format!("link {name:?}"))?;
            if a == b {
                return Err(PlaceError::SelfLoop {
                    link: name,
                    node: l.between[0].clone(),
                });
            }
            if let Some(bw) = l.bandwidth {
                if !(bw.is_finite() && bw > 0.0) {
                    return Err(PlaceError::NonPositiveBandwidth {
                        link: name,
                        value: bw,
                    });
                }
            }
            let latency_ms = check_non_negative(l.latency_ms.unwrap_or(0.0), || {
                format!("latency_ms of link {name:?}")
            })?;
            if link_names.insert(name.clone(), ()).is_some() {
                return Err(PlaceError::Duplicate { kind: "link", name });
            }
            let id = links.len();
            adjacency[a].push((b, id));
            adjacency[b].push((a, id));
            links.push(Link {
                name,
                ends: [a, b],
                bandwidth: l.bandwidth,
                latency_ms,
            });
        }

        let mut tag_names: HashMap<&str, ()> = HashMap::with_capacity(spec.tags.len());
        let mut tags = Vec::with_capacity(spec.tags.len());
        for t in &spec.tags {
            check_name("tag", &t.name)?;
            if tag_names.insert(t.name.as_str(), ()).is_some() {
                return Err(PlaceError::Duplicate {
                    kind: "tag",
                    name: t.name.clone(),
                });
            }
            let tn = &t.name;
            let publisher = resolve(&t.publisher, &|| format!("the publisher of tag {tn:?}"))?;
            let period_ms = check_positive(t.period_ms, || format!("period_ms of tag {tn:?}"))?;
            let message_bytes = check_positive(t.message_bytes.unwrap_or(1.0), || {
                format!("message_bytes of tag {tn:?}")
            })?;
            let scale_cpu = check_non_negative(t.scale_cpu.unwrap_or(1.0), || {
                format!("scale_cpu of tag {tn:?}")
            })?;
            let forward_cpu = check_non_negative(t.forward_cpu.unwrap_or(1.0), || {
                format!("forward_cpu of tag {tn:?}")
            })?;
            if t.subscribers.is_empty() {
                return Err(PlaceError::NoSubscribers { tag: tn.clone() });
            }
            let mut sub_names: HashMap<&str, ()> = HashMap::with_capacity(t.subscribers.len());
            let mut subscribers = Vec::with_capacity(t.subscribers.len());
            for s in &t.subscribers {
                check_name("subscriber", &s.name)?;
                let sn = &s.name;
                if sub_names.insert(sn.as_str(), ()).is_some() {
                    return Err(PlaceError::Duplicate {
                        kind: "subscriber",
                        name: format!("{sn} (tag {tn})"),
                    });
                }
                let node = resolve(&s.node, &|| format!("subscriber {sn:?} of tag {tn:?}"))?;
                let sp = check_positive(s.period_ms.unwrap_or(period_ms), || {
                    format!("period_ms of subscriber {sn:?} of tag {tn:?}")
                })?;
                if sp < period_ms {
                    return Err(PlaceError::SubscriberFasterThanPublisher {
                        tag: tn.clone(),
                        subscriber: sn.clone(),
                        period_ms: sp,
                        publisher_period_ms: period_ms,
                    });
                }
                let sb = check_positive(s.message_bytes.unwrap_or(message_bytes), || {
                    format!("message_bytes of subscriber {sn:?} of tag {tn:?}")
                })?;
                if sb > message_bytes {
                    return Err(PlaceError::SubscriberLargerThanPublisher {
                        tag: tn.clone(),
                        subscriber: sn.clone(),
                        message_bytes: sb,
                        publisher_message_bytes: message_bytes,
                    });
                }
                let max_delay_ms = match s.max_delay_ms {
                    None => None,
                    // 0 is a real bound: a subscriber on the publisher's
                    // node with the proxy there meets it.
                    Some(d) => Some(check_non_negative(d, || {
                        format!("max_delay_ms of subscriber {sn:?} of tag {tn:?}")
                    })?),
                };
                subscribers.push(Subscriber {
                    name: sn.clone(),
                    node,
                    period_ms: sp,
                    message_bytes: sb,
                    max_delay_ms,
                });
            }
            tags.push(Tag {
                name: tn.clone(),
                publisher,
                period_ms,
                message_bytes,
                proxy: t.proxy,
                scale_cpu,
                forward_cpu,
                subscribers,
            });
        }

        let topo = Topology {
            nodes,
            links,
            tags,
            adjacency,
        };
        topo.check_connected()?;
        Ok(topo)
    }

    fn check_connected(&self) -> Result<(), PlaceError> {
        let tree = crate::paths::RouteTree::new(self, 0);
        if let Some(unreached) = tree.first_unreached() {
            return Err(PlaceError::DisconnectedGraph {
                node: self.nodes[unreached].name.clone(),
                from: self.nodes[0].name.clone(),
            });
        }
        Ok(())
    }

    /// Index of the node with this name.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }
}

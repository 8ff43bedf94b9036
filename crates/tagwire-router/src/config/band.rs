//! The `[[bands]]` configuration ([`BandConfig`], the default bands) and
//! its plan: every band's lane policy, DSCP and listeners ([`Band`]), as
//! the configuration is checked and the router starts. Binding a band's
//! listeners is the `band` module's, whose documentation tells what bands
//! are.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tagwire_core::qos::Dscp;

use crate::config::error::ConfigError;
use crate::priority::{CpuList, SchedPolicy};

/// The name of the band the main listeners serve.
pub const DEFAULT_BAND: &str = "normal";

/// Most bands a router runs (each is a thread and up to two listeners).
pub const MAX_BANDS: usize = 16;

/// One band in the configuration (`[[bands]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandConfig {
    /// Its name (`low`, `normal`, `high`, `critical`, or your own).
    pub name: String,
    /// The lane's scheduling: `other`, `other:NICE`, `fifo:N` or `rr:N`
    /// (N 1..=99). Without the right to a real-time policy the lane runs
    /// `other` with a nice level instead, and says so.
    #[serde(default = "default_sched")]
    pub sched: String,
    /// DSCP of the band's sockets: a class (`af11`..`af43`, `cs0`..`cs7`,
    /// `ef`, `va`, or the band names `low`/`normal`/`high`/`critical`) or
    /// 0..=63.
    #[serde(default = "default_dscp")]
    pub dscp: String,
    /// TCP listen address (default: derived from the main `tcp`).
    #[serde(default)]
    pub tcp: Option<SocketAddr>,
    /// Unix socket path (default: derived from the main `unix`).
    #[serde(default)]
    pub unix: Option<PathBuf>,
    /// CPUs the lane runs on, as `taskset -c` takes them (`"1"`, `"0,2-3"`);
    /// clients apply it to the band's threads too. Default: any CPU.
    #[serde(default)]
    pub cpus: Option<String>,
}

fn default_sched() -> String {
    "other".into()
}

fn default_dscp() -> String {
    "cs0".into()
}

/// The default bands.
pub fn default_bands() -> Vec<BandConfig> {
    [
        // Not niced: every lane takes the shared table lock, and a niced
        // holder that a busy machine preempts stalls the lanes above it
        // (measured: 200 ms stalls with `other:10` under load).
        ("low", "other", "af11"),
        ("normal", "other", "cs0"),
        ("high", "fifo:10", "af42"),
        ("critical", "fifo:20", "va"),
    ]
    .into_iter()
    .map(|(name, sched, dscp)| BandConfig {
        name: name.into(),
        sched: sched.into(),
        dscp: dscp.into(),
        tcp: None,
        unix: None,
        cpus: None,
    })
    .collect()
}

/// A band as the router runs it: parsed and with its listeners decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Band {
    /// Its name.
    pub name: String,
    /// Its position (0: the lowest priority, which also serves admin work).
    pub rank: usize,
    /// The lane's scheduling policy as configured.
    pub sched: SchedPolicy,
    /// The DSCP of its sockets.
    pub dscp: u8,
    /// Its TCP listener, if any.
    pub tcp: Option<SocketAddr>,
    /// Whether `tcp` was derived from the main port (then, if that port is
    /// taken, the band listens on a free one and says so).
    pub tcp_derived: bool,
    /// Its Unix listener, if any.
    pub unix: Option<PathBuf>,
    /// The CPUs its lane is pinned to (`None`: any).
    pub cpus: Option<CpuList>,
}

/// Parses a band's DSCP with core's [`Dscp`] (a class name, a band name or
/// 0..=63); `auto` is the DSCP of the band's rank (low, normal, high,
/// critical, then critical for any further band).
pub fn parse_dscp(text: &str, rank: usize) -> Result<u8, String> {
    let d: Dscp = text
        .parse()
        .map_err(|e: tagwire_core::qos::QosError| e.to_string())?;
    let class_priority = [0u8, 64, 128, 192][rank.min(3)];
    Ok(d.code(class_priority))
}

/// Decides every band's lane policy, DSCP and listeners from the
/// configured `bands`, the `default_band`'s name and the main `tcp` and
/// `unix` listeners (`RouterConfig`'s fields of those names). The bands
/// keep their configured order, lowest priority first.
pub(crate) fn plan_bands(
    bands: &[BandConfig],
    default_band: &str,
    tcp: Option<SocketAddr>,
    unix: Option<&Path>,
) -> Result<Vec<Band>, ConfigError> {
    let bad = |m: String| ConfigError::Invalid(m);
    if bands.is_empty() || bands.len() > MAX_BANDS {
        return Err(bad(format!(
            "{} [[bands]] configured: between 1 and {MAX_BANDS} are needed",
            bands.len()
        )));
    }
    let default = bands
        .iter()
        .position(|b| b.name == default_band)
        .ok_or_else(|| {
            bad(format!(
                "default_band = {:?} is not one of the configured bands ({})",
                default_band,
                names(bands)
            ))
        })?;
    let mut out: Vec<Band> = Vec::new();
    let mut offset = 0u16;
    for (rank, b) in bands.iter().enumerate() {
        if b.name.is_empty()
            || !b
                .name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        {
            return Err(bad(format!(
                "band name {:?}: use letters, digits, '-' and '_'",
                b.name
            )));
        }
        if out.iter().any(|o| o.name == b.name) {
            return Err(bad(format!("band {:?} is configured twice", b.name)));
        }
        let sched: SchedPolicy = b
            .sched
            .parse()
            .map_err(|e| bad(format!("band {:?}: sched {:?}: {e}", b.name, b.sched)))?;
        let dscp = parse_dscp(&b.dscp, rank).map_err(|e| bad(format!("band {:?}: {e}", b.name)))?;
        let cpus = match &b.cpus {
            None => None,
            Some(text) => Some(
                text.parse::<CpuList>()
                    .map_err(|e| bad(format!("band {:?}: cpus {:?}: {e}", b.name, text)))?,
            ),
        };
        let tcp_derived = rank != default && b.tcp.is_none();
        let (tcp, unix) = if rank == default {
            (
                b.tcp.or(tcp),
                b.unix.clone().or(unix.map(Path::to_path_buf)),
            )
        } else {
            offset += 1;
            let tcp = b.tcp.or_else(|| {
                tcp.map(|mut a| {
                    if a.port() != 0 {
                        a.set_port(a.port().saturating_add(offset));
                    }
                    a
                })
            });
            let unix = b
                .unix
                .clone()
                .or_else(|| unix.map(|p| band_socket(p, &b.name)));
            (tcp, unix)
        };
        out.push(Band {
            name: b.name.clone(),
            rank,
            sched,
            dscp,
            tcp,
            tcp_derived,
            unix,
            cpus,
        });
    }
    Ok(out)
}

fn names(bands: &[BandConfig]) -> String {
    bands
        .iter()
        .map(|b| b.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `dir/tagwire.sock` → `dir/tagwire-NAME.sock`.
pub fn band_socket(main: &Path, name: &str) -> PathBuf {
    let stem = main
        .file_stem()
        .map_or_else(|| "tagwire".into(), |s| s.to_string_lossy().into_owned());
    let file = match main.extension() {
        Some(ext) => format!("{stem}-{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{name}"),
    };
    main.with_file_name(file)
}

//! The `[[multicast]]` entries: IP multicast groups a tag's events go to on
//! the LAN segment (docs/transports.md, "Multicast"). Running them is
//! [`crate::multicast`]'s.

use std::net::{Ipv4Addr, SocketAddrV4};

use serde::{Deserialize, Serialize};

use crate::config::error::ConfigError;

/// One `[[multicast]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MulticastConfig {
    /// The group's IPv4 multicast address and UDP port (`239.x.y.z:PORT`).
    pub group: SocketAddrV4,
    /// Tag patterns whose events go to the group (first entry that matches
    /// wins).
    pub tags: Vec<String>,
    /// The IPv4 address of the interface to send and join on (`None`: the
    /// kernel's choice, by its routes).
    #[serde(default)]
    pub interface: Option<Ipv4Addr>,
    /// The datagrams' IP TTL: 1 keeps them on the segment.
    #[serde(default = "default_ttl")]
    pub ttl: u32,
    /// The band whose lane serves the group and whose DSCP its datagrams
    /// carry (`None`: the default band).
    #[serde(default)]
    pub band: Option<String>,
    /// Largest group datagram, bytes; a larger event takes the links.
    #[serde(default = "default_max_datagram")]
    pub max_datagram: usize,
    /// The group's secret (`None`: `[federation] token`); every member
    /// needs the same.
    #[serde(default)]
    pub key: Option<String>,
}

fn default_ttl() -> u32 {
    1
}

fn default_max_datagram() -> usize {
    tagwire_proto::datagram::DEFAULT_MAX_DATAGRAM
}

impl MulticastConfig {
    /// The secret the group key is derived from.
    pub fn secret<'a>(&'a self, federation_token: &'a str) -> &'a str {
        self.key.as_deref().unwrap_or(federation_token)
    }
}

/// Checks every entry: a multicast address, tags that parse, a TTL of
/// 1..=255, a valid `max_datagram`, a key, a known band, no group twice,
/// at most [`tagwire_core::multicast::MAX_GROUPS`].
pub fn validate(
    entries: &[MulticastConfig],
    federation_token: &str,
    bands: &[String],
) -> Result<(), ConfigError> {
    let bad = |i: usize, m: String| ConfigError::Invalid(format!("multicast[{i}]: {m}"));
    if entries.len() > tagwire_core::multicast::MAX_GROUPS {
        return Err(ConfigError::Invalid(format!(
            "{} [[multicast]] entries: at most {} groups",
            entries.len(),
            tagwire_core::multicast::MAX_GROUPS
        )));
    }
    for (i, e) in entries.iter().enumerate() {
        if !e.group.ip().is_multicast() {
            return Err(bad(
                i,
                format!("group = {} is not an IPv4 multicast address (224.0.0.0/4; 239.0.0.0/8 is for local use)", e.group),
            ));
        }
        if e.group.port() == 0 {
            return Err(bad(
                i,
                format!("group = {}: the port must not be 0", e.group),
            ));
        }
        if e.tags.is_empty() {
            return Err(bad(
                i,
                "tags is empty: name the tag patterns whose events go to the group".into(),
            ));
        }
        for t in &e.tags {
            tagwire_core::tags::Pattern::parse(t)
                .map_err(|err| bad(i, format!("tags: {t:?} is not a tag pattern: {err}")))?;
        }
        if !(1..=255).contains(&e.ttl) {
            return Err(bad(i, format!("ttl = {} is outside 1..=255", e.ttl)));
        }
        tagwire_proto::datagram::validate_max_datagram(e.max_datagram).map_err(|m| bad(i, m))?;
        if e.secret(federation_token).is_empty() {
            return Err(bad(
                i,
                "no key: set key = \"...\" or [federation] token (group datagrams are authenticated with it)".into(),
            ));
        }
        if let Some(b) = &e.band {
            if !bands.iter().any(|n| n == b) {
                return Err(bad(
                    i,
                    format!(
                        "band = {b:?} is not a configured band ({})",
                        bands.join(", ")
                    ),
                ));
            }
        }
        if entries[..i].iter().any(|o| o.group == e.group) {
            return Err(bad(i, format!("group {} is configured twice", e.group)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(group: &str) -> MulticastConfig {
        MulticastConfig {
            group: group.parse().expect("addr"),
            tags: vec!["/cam/**".into()],
            interface: None,
            ttl: 1,
            band: None,
            max_datagram: 1400,
            key: None,
        }
    }

    #[test]
    fn bad_entries_are_refused_naming_what_is_wrong() {
        let bands = vec!["normal".to_string()];
        let check = |e: MulticastConfig, token: &str| {
            validate(&[e], token, &bands)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(check(entry("239.1.2.3:7800"), "t"), Ok(()));
        let e = check(entry("10.1.2.3:7800"), "t").expect_err("unicast");
        assert!(e.contains("not an IPv4 multicast address"), "{e}");
        let e = check(entry("239.1.2.3:7800"), "").expect_err("no key");
        assert!(e.contains("no key"), "{e}");
        let mut k = entry("239.1.2.3:7800");
        k.key = Some("k".into());
        assert_eq!(check(k, ""), Ok(()));
        let mut t = entry("239.1.2.3:7800");
        t.tags = vec!["cam".into()];
        assert!(check(t, "t")
            .expect_err("tag")
            .contains("\"cam\" is not a tag pattern"));
        let mut t = entry("239.1.2.3:7800");
        t.ttl = 0;
        assert!(check(t, "t").expect_err("ttl").contains("ttl = 0"));
        let mut t = entry("239.1.2.3:7800");
        t.max_datagram = 100;
        assert!(check(t, "t")
            .expect_err("size")
            .contains("max_datagram 100"));
        let mut t = entry("239.1.2.3:7800");
        t.band = Some("turbo".into());
        assert!(check(t, "t").expect_err("band").contains("\"turbo\""));
        let twice = validate(
            &[entry("239.1.2.3:7800"), entry("239.1.2.3:7800")],
            "t",
            &bands,
        )
        .expect_err("twice")
        .to_string();
        assert!(
            twice.contains("multicast[1]") && twice.contains("twice"),
            "{twice}"
        );
        let many: Vec<_> = (0..17)
            .map(|i| entry(&format!("239.1.2.{i}:7800")))
            .collect();
        assert!(validate(&many, "t", &bands)
            .expect_err("many")
            .to_string()
            .contains("at most 16"));
    }

    #[test]
    fn an_entry_parses_from_toml_with_defaults() {
        let e: MulticastConfig =
            toml::from_str("group = \"239.1.2.3:7800\"\ntags = [\"/a/*\"]\n").expect("toml");
        assert_eq!(
            (e.ttl, e.max_datagram, e.interface, e.band),
            (1, 1400, None, None)
        );
        let err =
            toml::from_str::<MulticastConfig>("group = \"239.1.2.3:7800\"\ntags = []\nttll = 2\n")
                .expect_err("unknown field")
                .to_string();
        assert!(err.contains("ttll"), "{err}");
    }
}

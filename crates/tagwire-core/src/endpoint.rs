//! Named endpoints: the registry that makes publishers and subscribers
//! addressable by name (YARP ports). A name is unique per router; a duplicate
//! is refused with an error naming it.

use std::collections::HashMap;

use tagwire_proto::limits::MAX_NAME_LEN;
use tagwire_proto::EndpointKind;

/// Why an endpoint could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// The name is taken.
    #[error("endpoint name {name:?} is already registered")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// The name is empty, too long, or has whitespace/control characters.
    #[error("invalid endpoint name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The registry is full.
    #[error("endpoint table is full ({max} endpoints)")]
    TableFull {
        /// The limit.
        max: usize,
    },
}

/// One registered endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    /// Its name.
    pub name: String,
    /// Publisher or subscriber.
    pub kind: EndpointKind,
    /// The connection (or session) that owns it.
    pub owner: u64,
}

/// Endpoint names → owners. Bounded by `max`; at the bound, new names are refused.
#[derive(Debug)]
pub struct EndpointRegistry {
    by_name: HashMap<String, EndpointInfo>,
    max: usize,
}

impl EndpointRegistry {
    /// A registry holding at most `max` endpoints.
    pub fn new(max: usize) -> Self {
        EndpointRegistry {
            by_name: HashMap::new(),
            max,
        }
    }

    /// Registers `name` for `owner`.
    pub fn declare(
        &mut self,
        name: &str,
        kind: EndpointKind,
        owner: u64,
    ) -> Result<(), EndpointError> {
        validate_name(name)?;
        if self.by_name.contains_key(name) {
            return Err(EndpointError::Duplicate {
                name: name.to_owned(),
            });
        }
        if self.by_name.len() >= self.max {
            return Err(EndpointError::TableFull { max: self.max });
        }
        self.by_name.insert(
            name.to_owned(),
            EndpointInfo {
                name: name.to_owned(),
                kind,
                owner,
            },
        );
        Ok(())
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: &str) -> Option<EndpointInfo> {
        self.by_name.remove(name)
    }

    /// Looks up `name`.
    pub fn get(&self, name: &str) -> Option<&EndpointInfo> {
        self.by_name.get(name)
    }

    /// Every endpoint, sorted by name.
    pub fn list(&self) -> Vec<&EndpointInfo> {
        let mut v: Vec<_> = self.by_name.values().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// Checks an endpoint name: 1..=255 bytes, no whitespace or control characters.
pub fn validate_name(name: &str) -> Result<(), EndpointError> {
    let bad = |reason| EndpointError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(bad("longer than 255 bytes"));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("contains whitespace or a control character"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_name_is_refused_naming_it() {
        let mut r = EndpointRegistry::new(10);
        r.declare("/cam/left", EndpointKind::Publisher, 1)
            .expect("first declare");
        let e = r
            .declare("/cam/left", EndpointKind::Subscriber, 2)
            .unwrap_err();
        assert_eq!(
            e,
            EndpointError::Duplicate {
                name: "/cam/left".into()
            }
        );
        assert!(e.to_string().contains("/cam/left"));
        assert_eq!(r.get("/cam/left").map(|i| i.owner), Some(1));
    }

    #[test]
    fn registry_refuses_new_names_at_its_bound() {
        let mut r = EndpointRegistry::new(1);
        r.declare("a", EndpointKind::Publisher, 1)
            .expect("room for one");
        assert_eq!(
            r.declare("b", EndpointKind::Publisher, 1),
            Err(EndpointError::TableFull { max: 1 })
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let mut r = EndpointRegistry::new(10);
        assert!(r.declare("", EndpointKind::Publisher, 1).is_err());
        assert!(r.declare("a b", EndpointKind::Publisher, 1).is_err());
    }
}

//! Bandwidth reservations (push-pull §3.2.1–3.2.2: Resource Kernel and
//! Darwin's guaranteed bandwidth), sans I/O: admission and class ids.
//!
//! A channel asks for `reserve=RATE` (`10mbit`, `500kbit`, …). Reservations
//! are kept **per band**: every channel that reserves on band B adds to B's
//! share, and B gets one traffic class (an htb class id `1:MINOR`) whose
//! rate is the sum; the router puts the band's sockets in that class. The
//! rule that keeps this bounded: at most `max` reservations, and the sum of
//! all of them at most the link's capacity. [`Reservations::reserve`] and
//! [`Reservations::release`] return the [`ClassChange`] the router applies
//! with `tc`.

use std::collections::BTreeMap;

/// Largest rate a reservation or a link may have: 100 Gbit/s.
pub const MAX_RATE_BPS: u64 = 100_000_000_000;
/// The first class minor handed out (`1:101` in tc's hex notation); band
/// classes take `0x101`, `0x102`, … in order of first use.
pub const FIRST_CLASS_MINOR: u16 = 0x101;

/// Why a rate or a reservation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReserveError {
    /// The rate text is not `DIGITS` followed by `bit`, `kbit`, `mbit` or `gbit`.
    #[error("reserve={value:?}: {why} (write e.g. 10mbit, 500kbit, 1gbit)")]
    BadRate {
        /// The text given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The reservation would take the sum over the link's capacity.
    #[error("reserve: {asked_bps} bit/s asked, {reserved_bps} of {capacity_bps} bit/s already reserved: the sum may not exceed the link's capacity")]
    OverCapacity {
        /// What this channel asked.
        asked_bps: u64,
        /// What is reserved already.
        reserved_bps: u64,
        /// The link's capacity.
        capacity_bps: u64,
    },
    /// As many reservations as allowed exist.
    #[error("reserve: {max} reservations exist already (the bound)")]
    TooMany {
        /// The bound.
        max: usize,
    },
    /// The holder has a reservation already.
    #[error("reserve: this channel holds a reservation already")]
    Duplicate,
}

/// Parses a rate: decimal digits and a unit `bit`, `kbit`, `mbit` or
/// `gbit` (lower case, powers of 1000, as tc reads them), no sign, no
/// space, not zero, at most [`MAX_RATE_BPS`]. Returns bit/s.
pub fn parse_rate(text: &str) -> Result<u64, ReserveError> {
    let bad = |why| ReserveError::BadRate {
        value: text.to_owned(),
        why,
    };
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(bad("no number"));
    }
    if digits > 12 {
        return Err(bad("too many digits"));
    }
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().map_err(|_| bad("not a number"))?;
    let scale = match unit {
        "bit" => 1,
        "kbit" => 1_000,
        "mbit" => 1_000_000,
        "gbit" => 1_000_000_000,
        "" => return Err(bad("no unit")),
        _ => return Err(bad("unknown unit")),
    };
    let bps = n.checked_mul(scale).ok_or_else(|| bad("too large"))?;
    if bps == 0 {
        return Err(bad("zero"));
    }
    if bps > MAX_RATE_BPS {
        return Err(bad("over 100gbit"));
    }
    Ok(bps)
}

/// What the router must do to the traffic classes after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassChange {
    /// Create class `minor` for `band` at `rate_bps`, and put the band's
    /// sockets in it.
    Create {
        /// The band.
        band: String,
        /// The class's minor number.
        minor: u16,
        /// Its guaranteed rate.
        rate_bps: u64,
    },
    /// Set class `minor`'s rate to `rate_bps`.
    Change {
        /// The band.
        band: String,
        /// The class's minor number.
        minor: u16,
        /// Its new guaranteed rate.
        rate_bps: u64,
    },
    /// Remove class `minor`; the band's sockets go back to the default.
    Remove {
        /// The band.
        band: String,
        /// The class's minor number.
        minor: u16,
    },
}

/// One band's reserved share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandShare {
    /// The class minor.
    pub minor: u16,
    /// The sum of its holders' rates.
    pub rate_bps: u64,
    /// Holder (a channel id) → its rate.
    pub holders: BTreeMap<u64, u64>,
}

/// The reservations of one link (a daemon's egress), per band.
#[derive(Debug, Clone)]
pub struct Reservations {
    capacity_bps: u64,
    max: usize,
    bands: BTreeMap<String, BandShare>,
    holder_band: BTreeMap<u64, String>,
}

impl Reservations {
    /// No reservations yet, on a link of `capacity_bps`, at most `max`.
    pub fn new(capacity_bps: u64, max: usize) -> Reservations {
        Reservations {
            capacity_bps,
            max,
            bands: BTreeMap::new(),
            holder_band: BTreeMap::new(),
        }
    }

    /// The link's capacity.
    pub fn capacity_bps(&self) -> u64 {
        self.capacity_bps
    }

    /// The sum of all reservations.
    pub fn reserved_bps(&self) -> u64 {
        self.bands.values().map(|b| b.rate_bps).sum()
    }

    /// Each band's share, by band name.
    pub fn bands(&self) -> &BTreeMap<String, BandShare> {
        &self.bands
    }

    /// Reserves `rate_bps` on `band` for `holder`, if the sum stays within
    /// the capacity and the count within the bound; the class change to
    /// apply. Nothing changes on an error.
    pub fn reserve(
        &mut self,
        holder: u64,
        band: &str,
        rate_bps: u64,
    ) -> Result<ClassChange, ReserveError> {
        if self.holder_band.contains_key(&holder) {
            return Err(ReserveError::Duplicate);
        }
        if self.holder_band.len() >= self.max {
            return Err(ReserveError::TooMany { max: self.max });
        }
        let reserved = self.reserved_bps();
        if reserved.saturating_add(rate_bps) > self.capacity_bps {
            return Err(ReserveError::OverCapacity {
                asked_bps: rate_bps,
                reserved_bps: reserved,
                capacity_bps: self.capacity_bps,
            });
        }
        let change = match self.bands.get_mut(band) {
            Some(share) => {
                share.rate_bps += rate_bps;
                share.holders.insert(holder, rate_bps);
                ClassChange::Change {
                    band: band.to_owned(),
                    minor: share.minor,
                    rate_bps: share.rate_bps,
                }
            }
            None => {
                let minor = self.free_minor();
                self.bands.insert(
                    band.to_owned(),
                    BandShare {
                        minor,
                        rate_bps,
                        holders: BTreeMap::from([(holder, rate_bps)]),
                    },
                );
                ClassChange::Create {
                    band: band.to_owned(),
                    minor,
                    rate_bps,
                }
            }
        };
        self.holder_band.insert(holder, band.to_owned());
        Ok(change)
    }

    /// Gives back `holder`'s reservation, if it has one.
    pub fn release(&mut self, holder: u64) -> Option<ClassChange> {
        let band = self.holder_band.remove(&holder)?;
        let share = self.bands.get_mut(&band)?;
        let rate = share.holders.remove(&holder).unwrap_or(0);
        share.rate_bps -= rate;
        if share.holders.is_empty() {
            let minor = share.minor;
            self.bands.remove(&band);
            return Some(ClassChange::Remove { band, minor });
        }
        Some(ClassChange::Change {
            band,
            minor: share.minor,
            rate_bps: share.rate_bps,
        })
    }

    /// The lowest minor no band uses (bands ≤ `max`, so one is free).
    fn free_minor(&self) -> u16 {
        (FIRST_CLASS_MINOR..)
            .find(|m| !self.bands.values().any(|b| b.minor == *m))
            .unwrap_or(FIRST_CLASS_MINOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_strictly() {
        assert_eq!(parse_rate("10mbit"), Ok(10_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("64000bit"), Ok(64_000));
        for bad in [
            "",
            "mbit",
            "10",
            "10 mbit",
            "10Mbit",
            "10mb",
            "-1mbit",
            "0mbit",
            "1.5mbit",
            "101gbit",
            "99999999999999gbit",
            "+5kbit",
        ] {
            let e = parse_rate(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn the_sum_may_not_exceed_the_capacity() {
        let mut r = Reservations::new(10_000_000, 8);
        assert!(r.reserve(1, "high", 6_000_000).is_ok());
        let e = r.reserve(2, "high", 5_000_000).unwrap_err();
        assert_eq!(
            e,
            ReserveError::OverCapacity {
                asked_bps: 5_000_000,
                reserved_bps: 6_000_000,
                capacity_bps: 10_000_000
            }
        );
        // Nothing changed; exactly the rest still fits.
        assert_eq!(r.reserved_bps(), 6_000_000);
        assert!(r.reserve(2, "low", 4_000_000).is_ok());
    }

    #[test]
    fn a_band_gets_one_class_whose_rate_is_the_sum() {
        let mut r = Reservations::new(100_000_000, 8);
        assert_eq!(
            r.reserve(1, "high", 10_000_000),
            Ok(ClassChange::Create {
                band: "high".into(),
                minor: 0x101,
                rate_bps: 10_000_000
            })
        );
        assert_eq!(
            r.reserve(2, "high", 5_000_000),
            Ok(ClassChange::Change {
                band: "high".into(),
                minor: 0x101,
                rate_bps: 15_000_000
            })
        );
        assert!(matches!(
            r.reserve(3, "low", 1_000_000),
            Ok(ClassChange::Create { minor: 0x102, .. })
        ));
        assert_eq!(
            r.release(1),
            Some(ClassChange::Change {
                band: "high".into(),
                minor: 0x101,
                rate_bps: 5_000_000
            })
        );
        assert_eq!(
            r.release(2),
            Some(ClassChange::Remove {
                band: "high".into(),
                minor: 0x101
            })
        );
        assert_eq!(r.release(2), None);
        // The freed minor is handed out again.
        assert!(matches!(
            r.reserve(4, "critical", 1_000),
            Ok(ClassChange::Create { minor: 0x101, .. })
        ));
    }

    #[test]
    fn the_count_is_bounded_and_a_holder_reserves_once() {
        let mut r = Reservations::new(100_000_000, 2);
        assert!(r.reserve(1, "high", 1_000).is_ok());
        assert_eq!(r.reserve(1, "high", 1_000), Err(ReserveError::Duplicate));
        assert!(r.reserve(2, "high", 1_000).is_ok());
        assert_eq!(
            r.reserve(3, "high", 1_000),
            Err(ReserveError::TooMany { max: 2 })
        );
        r.release(1);
        assert!(r.reserve(3, "high", 1_000).is_ok());
    }
}

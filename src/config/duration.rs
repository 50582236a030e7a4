//! Human-readable durations (`"250ms"`, `"5s"`, `"2m"`) in config files.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as a string in config files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// Parses `"250ms"`, `"5s"`, `"1m 30s"`; a bare number is rejected because its unit would be
    /// a guess.
    pub fn parse(s: &str) -> Result<Self, String> {
        humantime::parse_duration(s.trim())
            .map(HumanDuration)
            .map_err(|e| format!("`{s}` is not a duration ({e}); write e.g. \"250ms\" or \"5s\""))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        HumanDuration::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_rejects_bare_numbers() {
        assert_eq!(HumanDuration::parse("250ms").unwrap().0, Duration::from_millis(250));
        assert_eq!(HumanDuration::parse("5s").unwrap().0, Duration::from_secs(5));
        assert!(HumanDuration::parse("5").is_err());
        assert!(HumanDuration::parse("soon").is_err());
    }
}

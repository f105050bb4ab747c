//! Sizes and durations as operators write them ("64MiB", "10s"), validating
//! themselves while being parsed so a bad value is reported at its own line
//! and column. A leaf module: the config and the capabilities' limits use it.

use serde::{Deserialize, Deserializer, de::Error as _};

/// A byte count written as "64MiB", "512 KiB" or a plain number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(s) => s
                .parse::<bytesize::ByteSize>()
                .map(|b| ByteSize(b.as_u64()))
                .map_err(|_| {
                    D::Error::custom(format!(
                        "invalid size {s:?}: expected for example \"64MiB\""
                    ))
                }),
        }
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", bytesize::ByteSize(self.0).display().iec())
    }
}

fn parse_duration<E: serde::de::Error>(text: &str) -> Result<std::time::Duration, E> {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(E::custom(format!(
            "invalid duration {text:?}: expected for example \"10s\", \"500ms\" or \"5m\""
        ))),
    }
}

pub mod duration {
    use super::*;
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
        parse_duration(&String::deserialize(d)?)
    }
}

/// A duration that may be zero ("0s": no limit).
pub mod duration_or_zero {
    use super::*;
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|_| {
            D::Error::custom(format!(
                "invalid duration {text:?}: expected for example \"0s\", \"30s\" or \"5m\""
            ))
        })
    }
}

pub mod optional_duration {
    use super::*;
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::time::Duration>, D::Error> {
        parse_duration(&String::deserialize(d)?).map(Some)
    }
}

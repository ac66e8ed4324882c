//! Identities: the execution id (one accepted attempt to perform an action) and timestamps.
//!
//! The core only formats and parses them; generating a UUIDv7 needs a clock and randomness,
//! which belong to the crates that do I/O.

use std::fmt;
use std::str::FromStr;

/// Crockford base32 alphabet (no I, L, O, U): unambiguous when read aloud or copied by hand.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Each byte's digit value in [`ALPHABET`] (either case), 255 for bytes that are not digits.
const DIGIT_VALUES: [u8; 256] = {
    let mut table = [255u8; 256];
    let mut i = 0;
    while i < 32 {
        let c = ALPHABET[i];
        table[c as usize] = i as u8;
        table[c.to_ascii_uppercase() as usize] = i as u8;
        i += 1;
    }
    table
};

/// The identity of ONE accepted attempt to perform an action, shown as `exe_<26 base32 chars>`.
/// It is forwarded to the target as its idempotency key, so it must never be reused for another
/// action and never change between re-dispatches of the same one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutionId(u128);

impl ExecutionId {
    /// Wraps the 16 bytes of a UUID (the ledger hands in a UUIDv7, so ids sort by time).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        ExecutionId(u128::from_be_bytes(bytes))
    }
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The id's text (`exe_` and 26 base32 digits) as ASCII bytes, without allocating: the
    /// audit chain writes one into every event it hashes.
    pub fn ascii(&self) -> [u8; 30] {
        let mut out = *b"exe_00000000000000000000000000";
        for (i, slot) in out[4..].iter_mut().enumerate() {
            let shift = 5 * (25 - i);
            *slot = ALPHABET[((self.0 >> shift) & 31) as usize];
        }
        out
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(&self.ascii()).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An execution id string that is not of the form `exe_<26 base32 chars>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid execution id {0:?}: expected exe_ followed by 26 base32 characters")]
pub struct InvalidExecutionId(pub String);

impl FromStr for ExecutionId {
    type Err = InvalidExecutionId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidExecutionId(s.chars().take(64).collect());
        let body = s.strip_prefix("exe_").ok_or_else(bad)?;
        if body.len() != 26 {
            return Err(bad());
        }
        let mut value: u128 = 0;
        for (i, c) in body.bytes().enumerate() {
            // A table lookup per digit: the verifier parses one id per event.
            let digit = DIGIT_VALUES[usize::from(c)];
            // 26 × 5 = 130 bits: the first character carries only the top 3 bits.
            if digit > 31 || (i == 0 && digit > 7) {
                return Err(bad());
            }
            value = (value << 5) | u128::from(digit);
        }
        Ok(ExecutionId(value))
    }
}

impl serde::Serialize for ExecutionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ExecutionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Milliseconds since the Unix epoch, UTC. The core never reads a clock: callers pass `now`.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn millis(self) -> i64 {
        self.0
    }
    pub fn saturating_add(self, d: std::time::Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T21:21:19.123Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.rem_euclid(1000);
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let (h, min, sec) = (sod / 3600, (sod % 3600) / 60, sod % 60);
        if (0..=9999).contains(&y) {
            // Digit by digit: `write!` with seven padded arguments took ~2,700 instructions a
            // timestamp, and a call's answer formats two.
            let mut text = *b"0000-00-00T00:00:00.000Z";
            for (at, width, value) in [
                (0, 4, y),
                (5, 2, m),
                (8, 2, d),
                (11, 2, h),
                (14, 2, min),
                (17, 2, sec),
                (20, 3, ms),
            ] {
                put_digits(&mut text[at..at + width], value);
            }
            return f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?);
        }
        write!(f, "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{sec:02}.{ms:03}Z")
    }
}

/// Writes `value` (not negative, at most `slot.len()` digits) as decimal digits filling `slot`.
fn put_digits(slot: &mut [u8], mut value: i64) {
    for digit in slot.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_id_round_trips_through_text() {
        for v in [
            0u128,
            1,
            u128::MAX,
            0x0193_8f00_dead_beef_0000_0000_0000_0001,
        ] {
            let id = ExecutionId(v);
            let s = id.to_string();
            assert_eq!(s.len(), 30, "{s}");
            assert_eq!(s.parse::<ExecutionId>().unwrap(), id);
        }
        assert!("exe_".parse::<ExecutionId>().is_err());
        assert!("exe_zzzzzzzzzzzzzzzzzzzzzzzzzz"
            .parse::<ExecutionId>()
            .is_err());
        assert!("inv_00000000000000000000000000"
            .parse::<ExecutionId>()
            .is_err());
        // Upper case reads as the same id; letters outside the alphabet (I, L, O, U) and
        // non-ASCII bytes are refused.
        let id = ExecutionId(0x0193_8f00_dead_beef_0000_0000_0000_0001);
        let upper = format!("exe_{}", id.to_string()[4..].to_ascii_uppercase());
        assert_eq!(upper.parse::<ExecutionId>().unwrap(), id);
        for bad in ["i", "l", "o", "u", "é"] {
            let text = format!("exe_0000000000000000000000000{bad}");
            assert!(text.parse::<ExecutionId>().is_err(), "{text}");
        }
    }

    /// The digit-by-digit text is what `write!` with padded arguments gives, over every
    /// field's range and the years a four-digit field cannot hold.
    #[test]
    fn timestamps_format_as_padded_write_would() {
        fn padded(t: Timestamp) -> String {
            let ms = t.0.rem_euclid(1000);
            let secs = t.0.div_euclid(1000);
            let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
            let sod = secs.rem_euclid(86_400);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
                sod / 3600,
                (sod % 3600) / 60,
                sod % 60
            )
        }
        let mut samples = vec![
            0,
            -1,
            1,
            999,
            1000,
            -1000,
            253_402_300_799_999,
            253_402_300_800_000,
        ];
        samples.extend([
            -62_167_219_200_000,
            -62_167_219_200_001,
            i64::MAX / 2,
            i64::MIN / 2,
        ]);
        // Every millisecond, second, minute and hour of a day, and days across four centuries.
        samples.extend((0..86_400_000).step_by(997));
        samples.extend((0..146_097 * 4).map(|day| day * 86_400_000 - 12_345_678_901_234));
        for t in samples {
            assert_eq!(Timestamp(t).to_string(), padded(Timestamp(t)), "{t}");
        }
    }

    #[test]
    fn timestamps_format_as_rfc3339() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp(1_795_987_279_123).to_string(),
            "2026-11-29T21:21:19.123Z"
        );
        assert_eq!(
            Timestamp(951_782_400_000).to_string(),
            "2000-02-29T00:00:00.000Z"
        );
    }
}

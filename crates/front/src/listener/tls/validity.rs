//! A certificate's validity period, read from its DER encoding (RFC 5280 §4.1): the listener
//! refuses to start with, or reload to, a certificate every client would refuse. rustls checks
//! the peer's certificate but never its own, and an X.509 parser for two dates would be the
//! largest dependency of the gateway; this walks the five fields before `validity`, bounds
//! checked, and gives up (`None`) on anything unexpected.

use postern_core::Timestamp;

use super::ListenerTlsError;

/// When a certificate starts and stops being valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: Timestamp,
    pub not_after: Timestamp,
}

impl Validity {
    /// The validity of the certificate `der`, or `None` if it is not a well-formed X.509
    /// certificate as far as this reads.
    pub fn of(der: &[u8]) -> Option<Validity> {
        let (SEQUENCE, certificate, _) = element(der)? else {
            return None;
        };
        let (SEQUENCE, tbs, _) = element(certificate)? else {
            return None;
        };
        let mut rest = tbs;
        // [0] EXPLICIT version, absent for v1 certificates.
        if let (0xa0, _, after) = element(rest)? {
            rest = after;
        }
        // serialNumber, signature (AlgorithmIdentifier), issuer (Name).
        for expected in [INTEGER, SEQUENCE, SEQUENCE] {
            let (tag, _, after) = element(rest)?;
            if tag != expected {
                return None;
            }
            rest = after;
        }
        let (SEQUENCE, validity, _) = element(rest)? else {
            return None;
        };
        let (tag, not_before, after) = element(validity)?;
        let not_before = time(tag, not_before)?;
        let (tag, not_after, _) = element(after)?;
        let not_after = time(tag, not_after)?;
        Some(Validity {
            not_before,
            not_after,
        })
    }

    /// Whether the certificate is valid at `now`.
    pub fn check(self, now: Timestamp) -> Result<(), ListenerTlsError> {
        if now > self.not_after {
            Err(ListenerTlsError::Expired(self.not_after))
        } else if now < self.not_before {
            Err(ListenerTlsError::NotYetValid(self.not_before))
        } else {
            Ok(())
        }
    }
}

const INTEGER: u8 = 0x02;
const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element: its tag, its contents and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (digits, after) = rest.split_at(count);
        rest = after;
        digits
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b))
    };
    if rest.len() < len {
        return None;
    }
    let (contents, after) = rest.split_at(len);
    Some((tag, contents, after))
}

/// `UTCTime` (`YYMMDDHHMMSSZ`, years 1950–2049) or `GeneralizedTime` (`YYYYMMDDHHMMSSZ`), the
/// only forms RFC 5280 allows.
fn time(tag: u8, text: &[u8]) -> Option<Timestamp> {
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.iter().try_fold(0i64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
        })
    };
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 15) => (digits(0..4)?, 4),
        _ => return None,
    };
    if text.last() != Some(&b'Z') {
        return None;
    }
    let field = |i: usize| digits(rest + 2 * i..rest + 2 * i + 2);
    let (month, day, hour, minute, second) =
        (field(0)?, field(1)?, field(2)?, field(3)?, field(4)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(Timestamp(
        (days * 86_400 + hour * 3600 + minute * 60 + second) * 1000,
    ))
}

/// Howard Hinnant's civil-to-days algorithm (proleptic Gregorian), the inverse of the one
/// `Timestamp`'s display uses.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_time_forms_read_as_utc() {
        assert_eq!(
            time(UTC_TIME, b"000101000000Z").unwrap().to_string(),
            "2000-01-01T00:00:00.000Z"
        );
        assert_eq!(
            time(UTC_TIME, b"991231235959Z").unwrap().to_string(),
            "1999-12-31T23:59:59.000Z"
        );
        assert_eq!(
            time(GENERALIZED_TIME, b"40960101000000Z")
                .unwrap()
                .to_string(),
            "4096-01-01T00:00:00.000Z"
        );
        assert_eq!(
            time(GENERALIZED_TIME, b"20240229120000Z")
                .unwrap()
                .to_string(),
            "2024-02-29T12:00:00.000Z"
        );
    }

    #[test]
    fn malformed_input_is_none_not_a_panic() {
        assert_eq!(time(UTC_TIME, b"0001010000Z"), None);
        assert_eq!(time(UTC_TIME, b"001301000000Z"), None);
        assert_eq!(time(GENERALIZED_TIME, b"2024022912000Z0"), None);
        assert_eq!(Validity::of(&[]), None);
        assert_eq!(Validity::of(&[0x30, 0x82, 0xff]), None);
        assert_eq!(Validity::of(&[0x30, 0x03, 0x30, 0x01]), None);
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 0x30) as u8).collect();
            let _ = Validity::of(&junk);
        }
    }
}

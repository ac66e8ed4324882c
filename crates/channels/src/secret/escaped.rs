//! Reading a needle in text that may hold JSON escapes: a target may write a secret with any
//! of its characters escaped (`\u002B`, `\/`: System.Text.Json and PHP do by default), which no
//! byte form of it matches and every JSON reader decodes to the secret.

/// How far a needle reads at a place in a text.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// The whole needle, ending (exclusive) at this offset of the text.
    Whole(usize),
    /// The text ends while it still reads as the needle (an escape the end cuts in two
    /// included).
    Prefix,
    No,
}

/// Reads `needle` in `text` from `at`: each of its bytes as written, or a character of it as
/// the JSON escape that decodes to it (`\uXXXX` in either hex case, a surrogate pair for one
/// outside the BMP, `\/`, `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`).
pub(super) fn read(text: &[u8], at: usize, needle: &[u8]) -> Found {
    let (mut p, mut q) = (at, 0);
    while q < needle.len() {
        let Some(&b) = text.get(p) else {
            return Found::Prefix;
        };
        if b == b'\\' {
            match escape(text, p) {
                Escape::Cut => return Found::Prefix,
                Escape::Decoded(decoded, len) => {
                    let decoded = decoded.as_slice();
                    if needle[q..].starts_with(decoded) {
                        p += len;
                        q += decoded.len();
                        continue;
                    }
                }
                Escape::Not => {}
            }
        }
        if b != needle[q] {
            return Found::No;
        }
        p += 1;
        q += 1;
    }
    Found::Whole(p)
}

/// What a backslash at some place starts.
enum Escape {
    /// The bytes it decodes to, and its length in the text.
    Decoded(Decoded, usize),
    /// The text ends inside what would be an escape.
    Cut,
    Not,
}

/// A decoded character: at most 4 bytes of UTF-8.
struct Decoded([u8; 4], usize);

impl Decoded {
    fn as_slice(&self) -> &[u8] {
        &self.0[..self.1]
    }

    fn of(c: char) -> Decoded {
        let mut buf = [0u8; 4];
        let len = c.encode_utf8(&mut buf).len();
        Decoded(buf, len)
    }
}

/// The escape that starts with the backslash at `text[p]`.
fn escape(text: &[u8], p: usize) -> Escape {
    let simple = match text.get(p + 1) {
        None => return Escape::Cut,
        Some(b'u') => None,
        Some(b'/') => Some('/'),
        Some(b'"') => Some('"'),
        Some(b'\\') => Some('\\'),
        Some(b'b') => Some('\u{8}'),
        Some(b'f') => Some('\u{c}'),
        Some(b'n') => Some('\n'),
        Some(b'r') => Some('\r'),
        Some(b't') => Some('\t'),
        Some(_) => return Escape::Not,
    };
    if let Some(c) = simple {
        return Escape::Decoded(Decoded::of(c), 2);
    }
    let unit = match hex4(text, p + 2) {
        Hex::Unit(u) => u,
        Hex::Cut => return Escape::Cut,
        Hex::Not => return Escape::Not,
    };
    if !(0xD800..0xDC00).contains(&unit) {
        return char::from_u32(unit).map_or(Escape::Not, |c| Escape::Decoded(Decoded::of(c), 6));
    }
    // A high surrogate: the character is whole only with its low one.
    let low_at = p + 6;
    let rest = &text[low_at.min(text.len())..];
    if rest.len() < 2 {
        return if b"\\u".starts_with(rest) {
            Escape::Cut
        } else {
            Escape::Not
        };
    }
    if &rest[..2] != b"\\u" {
        return Escape::Not;
    }
    match hex4(text, low_at + 2) {
        Hex::Unit(low) if (0xDC00..0xE000).contains(&low) => {
            char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                .map_or(Escape::Not, |c| Escape::Decoded(Decoded::of(c), 12))
        }
        Hex::Cut => Escape::Cut,
        _ => Escape::Not,
    }
}

enum Hex {
    Unit(u32),
    /// The text ends after fewer than four hex digits.
    Cut,
    Not,
}

/// The four hex digits at `text[at..]`.
fn hex4(text: &[u8], at: usize) -> Hex {
    let digits = &text[at.min(text.len())..];
    let digits = &digits[..digits.len().min(4)];
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return Hex::Not;
    }
    if digits.len() < 4 {
        return Hex::Cut;
    }
    let value = digits.iter().fold(0u32, |v, &d| {
        (v << 4) | char::from(d).to_digit(16).unwrap_or(0)
    });
    Hex::Unit(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_needle_reads_through_any_escapes() {
        let needle = "a+/é😀".as_bytes();
        let whole = |t: &str| read(t.as_bytes(), 0, needle);
        assert_eq!(whole("a+/é😀!"), Found::Whole(needle.len()));
        let t = r"\u0061\u002b\/\u00E9\ud83d\ude00";
        assert_eq!(whole(t), Found::Whole(t.len()));
        let t = r"a\u002B/\u00e9😀";
        assert_eq!(whole(t), Found::Whole(t.len()));
        for cut in [
            r"a\",
            r"a\u",
            r"a\u00",
            r"a\u002",
            r"a+/é\ud83d",
            r"a+/é\ud83d\u",
            r"a+/é\ud83d\ude0",
        ] {
            assert_eq!(whole(cut), Found::Prefix, "{cut}");
        }
        assert_eq!(whole("a+"), Found::Prefix);
        assert_eq!(whole(r"a\u002Cx"), Found::No);
        assert_eq!(whole(r"a\x"), Found::No);
        assert_eq!(whole("b"), Found::No);
        // A backslash in the needle is read as written too.
        assert_eq!(read(br"x\u0041y", 0, br"x\u0041y"), Found::Whole(8));
    }
}

//! Looking for a secret in what a test got back, the way whoever reads it could find it: as
//! written, behind JSON escapes (decoded once, and again for text that held JSON as a string),
//! and base64-encoded (issue 49).

/// `text`, and `text` with its JSON escapes decoded once and twice (a lenient reader's view:
/// a lone surrogate as U+FFFD, an escape cut short by the end of the text dropped).
pub fn readings(text: &str) -> Vec<String> {
    let once = decode_json_escapes(text);
    let twice = decode_json_escapes(&once);
    vec![text.to_string(), once, twice]
}

/// The runs of 4 characters of `secret` that some reading of `answer` holds, leaving out
/// those that some reading of `around` (the text a target wrote around the secret) holds.
pub fn leaked_windows(secret: &str, around: &str, answer: &str) -> Vec<String> {
    let chars: Vec<char> = secret.chars().collect();
    let around = readings(around);
    let answer = readings(answer);
    let mut leaked: Vec<String> = chars
        .windows(4)
        .map(|w| w.iter().collect::<String>())
        .filter(|w| !around.iter().any(|r| r.contains(w.as_str())))
        .filter(|w| answer.iter().any(|r| r.contains(w.as_str())))
        .collect();
    leaked.dedup();
    leaked
}

/// `text` with its JSON escapes decoded.
pub fn decode_json_escapes(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut high: Option<u32> = None;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '\\' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let Some(&e) = chars.get(i + 1) else { break };
        if e != 'u' {
            out.push(match e {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                'b' => '\u{8}',
                'f' => '\u{c}',
                other => other,
            });
            i += 2;
            continue;
        }
        let hex: String = chars.iter().skip(i + 2).take(4).collect();
        let all_hex = hex.chars().all(|c| c.is_ascii_hexdigit());
        if hex.len() < 4 && all_hex {
            // An escape cut off at the end: nothing of it is a character yet.
            break;
        }
        let Some(unit) = all_hex
            .then(|| u32::from_str_radix(&hex, 16).ok())
            .flatten()
        else {
            out.push('\\');
            i += 1;
            continue;
        };
        i += 6;
        match (high.take(), unit) {
            (Some(h), 0xDC00..=0xDFFF) => out.push(
                char::from_u32(0x10000 + ((h - 0xD800) << 10) + (unit - 0xDC00))
                    .unwrap_or('\u{fffd}'),
            ),
            (_, 0xD800..=0xDBFF) => high = Some(unit),
            (_, unit) => out.push(char::from_u32(unit).unwrap_or('\u{fffd}')),
        }
    }
    out
}

/// Base64 as a bit string cut in sixes (standard or URL-safe alphabet, padded): written apart
/// from the encoders under test.
pub fn base64_of(bytes: &[u8], url_safe: bool) -> String {
    let alphabet = alphabet(url_safe);
    let bits: Vec<u8> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let mut out: String = bits
        .chunks(6)
        .map(|six| {
            let v = six.iter().fold(0usize, |v, &b| (v << 1) | usize::from(b));
            alphabet[v << (6 - six.len())]
        })
        .collect();
    while !out.len().is_multiple_of(4) {
        out.push('=');
    }
    out
}

/// Everything a reader could decode out of the base64 in `text`: each run of at least 8
/// characters of either alphabet, from each of its first four characters, as far as it makes
/// whole groups of four.
pub fn base64_decodings(text: &str) -> Vec<Vec<u8>> {
    let mut decoded = Vec::new();
    for url_safe in [false, true] {
        let alphabet = alphabet(url_safe);
        let value = |c: char| alphabet.iter().position(|&a| a == c);
        let chars: Vec<char> = text.chars().collect();
        for run in chars
            .split(|&c| value(c).is_none())
            .filter(|r| r.len() >= 8)
        {
            for phase in 0..4 {
                let bits: Vec<u8> = run[phase..]
                    .chunks_exact(4)
                    .flatten()
                    .flat_map(|&c| {
                        let v = value(c).unwrap_or(0);
                        (0..6).rev().map(move |i| ((v >> i) & 1) as u8)
                    })
                    .collect();
                let bytes = bits
                    .chunks_exact(8)
                    .map(|byte| byte.iter().fold(0u8, |v, &b| (v << 1) | b))
                    .collect();
                decoded.push(bytes);
            }
        }
    }
    decoded
}

fn alphabet(url_safe: bool) -> Vec<char> {
    let mut alphabet: Vec<char> = ('A'..='Z').chain('a'..='z').chain('0'..='9').collect();
    alphabet.extend(if url_safe { ['-', '_'] } else { ['+', '/'] });
    alphabet
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_escapes_and_base64() {
        assert_eq!(
            decode_json_escapes(r#"a\u002Bb\/\u00e9\ud83d\ude00\"\u00"#),
            "a+b/é😀\""
        );
        assert_eq!(base64_of(b"foobar", false), "Zm9vYmFy");
        assert_eq!(base64_of(b"\xfb\xff", true), "-_8=");
        let text = format!("x {} y", base64_of(b"..secret!", false));
        assert!(base64_decodings(&text)
            .iter()
            .any(|d| d.windows(7).any(|w| w == b"secret!")));
        assert_eq!(
            leaked_windows("abcdef", "", r"x\u0062cde"),
            vec!["bcde".to_string()]
        );
    }
}

//! The agent's side of the bridge, before rmcp parses it. rmcp's typed model would lose two
//! things the gateway reads from the raw request: `params.idempotencyKey` (not a field of
//! `CallToolRequestParams`) and the strictness of the JSON (a duplicate key or an inexact
//! number would be silently resolved by serde). So each line is looked at first: an
//! `idempotencyKey` moves into `_meta` (where the gateway also reads it, and where it survives a
//! re-issue), and a `tools/call` the gateway would refuse is marked so the bridge refuses it
//! with the gateway's words instead of forwarding a different call.

use postern_core::canon::{parse_strict, CanonError};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

use super::{KEY_META, REFUSED_META};

/// The longest line passed on (rmcp's own limit for one message).
const MAX_LINE: u64 = 16 * 1024 * 1024;

/// Copies `input` line by line, rewritten where needed, into the stream rmcp reads.
pub fn spawn(input: impl AsyncRead + Unpin + Send + 'static) -> DuplexStream {
    let (rmcp_side, mut ours) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let mut reader = BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(MAX_LINE)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if !line.ends_with(b"\n") {
                if line.len() as u64 >= MAX_LINE {
                    // Too long: skip the rest of it, as rmcp would.
                    let mut rest = Vec::new();
                    let _ = reader.read_until(b'\n', &mut rest).await;
                    continue;
                }
                line.push(b'\n');
            }
            let out = rewrite(&line);
            if ours
                .write_all(out.as_deref().unwrap_or(&line))
                .await
                .is_err()
            {
                break;
            }
        }
        let _ = ours.shutdown().await;
    });
    rmcp_side
}

/// The line to pass on instead of `line`, if it needs changing.
pub(super) fn rewrite(line: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(line).ok()?.trim();
    if !text.starts_with('{') {
        return None;
    }
    let mut msg = match parse_strict(text) {
        Ok(v) => v,
        // Not JSON at all: rmcp answers or ignores it.
        Err(CanonError::Malformed { .. }) => return None,
        Err(e) => return refused(text, &e),
    };
    if msg.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let params = msg.get_mut("params")?.as_object_mut()?;
    let key = params.get("idempotencyKey")?.as_str()?.to_string();
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    let meta = meta.as_object_mut()?;
    if meta.contains_key(KEY_META) {
        // The gateway prefers the `_meta` key too.
        return None;
    }
    meta.insert(KEY_META.into(), Value::String(key));
    Some(line_of(&msg))
}

/// A `tools/call` whose JSON the gateway would refuse, replaced by one the bridge refuses.
fn refused(text: &str, e: &CanonError) -> Option<Vec<u8>> {
    let lenient: Value = serde_json::from_str(text).ok()?;
    if lenient.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let id = lenient.get("id")?.clone();
    let name = lenient
        .pointer("/params/name")
        .filter(|n| n.is_string())
        .cloned()
        .unwrap_or_else(|| json!(""));
    Some(line_of(&json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": {REFUSED_META: e.to_string()}},
    })))
}

fn line_of(v: &Value) -> Vec<u8> {
    let mut out = v.to_string().into_bytes();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(line: &str) -> Option<Value> {
        rewrite(line.as_bytes()).map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn an_idempotency_key_moves_into_meta() {
        let v = rewritten(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1},"idempotencyKey":"k-1"}}"#).unwrap();
        assert_eq!(v["params"]["_meta"][KEY_META], "k-1");
        assert_eq!(v["params"]["arguments"]["a"], 1);
        assert_eq!(v["id"], 1);
    }

    #[test]
    fn a_meta_key_wins_and_other_lines_pass_unchanged() {
        assert!(rewritten(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","idempotencyKey":"a","_meta":{"io.postern/idempotency-key":"b"}}}"#).is_none());
        assert!(rewritten(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#
        )
        .is_none());
        assert!(rewritten(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).is_none());
        assert!(rewritten("not json").is_none());
    }

    #[test]
    fn an_ambiguous_call_is_marked_refused() {
        let v = rewritten(r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"t","arguments":{"amount":5,"amount":500}}}"#).unwrap();
        assert_eq!(v["id"], "x");
        assert_eq!(v["params"]["name"], "t");
        let reason = v["params"]["_meta"][REFUSED_META].as_str().unwrap();
        assert!(
            reason.contains("duplicate object key \"amount\""),
            "{reason}"
        );
        let big = rewritten(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t","arguments":{"n":18014398509481985}}}"#).unwrap();
        assert!(big["params"]["_meta"][REFUSED_META]
            .as_str()
            .unwrap()
            .contains("outside ±2^53"));
    }
}

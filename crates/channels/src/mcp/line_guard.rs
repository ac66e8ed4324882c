//! A stdio upstream's output, read with a bound on one message. rmcp drops a line over its
//! limit and reads on, so the request it answered would wait its whole timeout for an answer
//! that came and was thrown away. Here a line that reaches the bound ends the link at once
//! instead, saying why: the calls in flight end now (their outcome unknown: the upstream acted
//! and answered), and the reason is kept for their records.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The longest message line read from a stdio upstream (rmcp's own limit: a longer line
/// would be dropped by it silently).
pub(super) const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH - 1;

/// Why a link was ended by its output, when it was.
pub(super) type Broken = Arc<Mutex<Option<String>>>;

pub(super) struct LineGuard<R> {
    inner: R,
    /// Bytes since the last newline.
    line: usize,
    limit: usize,
    broken: Broken,
    upstream: String,
}

impl<R> LineGuard<R> {
    pub(super) fn new(inner: R, limit: usize, broken: Broken, upstream: String) -> Self {
        LineGuard {
            inner,
            line: 0,
            limit,
            broken,
            upstream,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineGuard<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let fresh = &buf.filled()[before..];
            self.line = match fresh.iter().rposition(|&b| b == b'\n') {
                Some(at) => fresh.len() - at - 1,
                None => self.line + fresh.len(),
            };
            if self.line > self.limit {
                let why = format!(
                    "upstream {} sent a message over {} bytes on one line; the link was ended so the calls waiting on it end now",
                    self.upstream, self.limit
                );
                tracing::error!(upstream = %self.upstream, limit = self.limit, "an upstream message was too long; ending the link");
                if let Ok(mut broken) = self.broken.lock() {
                    *broken = Some(why.clone());
                }
                // An error reads nothing: the bytes of this read are not handed on.
                buf.set_filled(before);
                return Poll::Ready(Err(io::Error::other(why)));
            }
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_line_over_the_bound_ends_the_read_and_says_why() {
        let broken = Broken::default();
        let mut data = b"{\"short\":1}\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 100));
        let mut r = LineGuard::new(&data[..], 50, broken.clone(), "ev".into());
        let mut out = Vec::new();
        let e = r.read_to_end(&mut out).await.unwrap_err();
        assert!(e.to_string().contains("over 50 bytes"), "{e}");
        assert!(broken
            .lock()
            .unwrap()
            .as_deref()
            .unwrap()
            .contains("upstream ev"));
        let mut fine = LineGuard::new(&b"a\nbb\nccc\n"[..], 3, Broken::default(), "ev".into());
        let mut out = Vec::new();
        fine.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"a\nbb\nccc\n");
    }
}

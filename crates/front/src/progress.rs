//! A target's progress reports, passed to the caller in the order they came and all before
//! the call's answer: one forwarding task per call with a progress token, drained before the
//! result is returned (a detached send per report could overtake another, or the answer).

use std::time::Duration;

use postern_channels::{Progress, ProgressSink};
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use tokio::sync::{mpsc, oneshot};

/// The longest the answer waits for the reports before it.
const DRAIN_WAIT: Duration = Duration::from_secs(2);

enum Relay {
    Report(Progress),
    Drained(oneshot::Sender<()>),
}

/// The progress reports of one call on their way to its client.
pub(super) struct ProgressRelay {
    queue: mpsc::UnboundedSender<Relay>,
}

impl ProgressRelay {
    /// A relay for the request of `ctx`, when it carries a progress token.
    pub(super) fn of(ctx: &RequestContext<RoleServer>) -> Option<(ProgressRelay, ProgressSink)> {
        let token = ctx.meta.get_progress_token()?;
        let peer = ctx.peer.clone();
        let (queue, mut reports) = mpsc::unbounded_channel::<Relay>();
        tokio::spawn(async move {
            while let Some(relay) = reports.recv().await {
                match relay {
                    Relay::Report(p) => {
                        let mut param = ProgressNotificationParam::new(token.clone(), p.progress);
                        param.total = p.total;
                        param.message = p.message;
                        let _ = peer.notify_progress(param).await;
                    }
                    Relay::Drained(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        let sink_queue = queue.clone();
        let sink: ProgressSink = std::sync::Arc::new(move |p: Progress| {
            let _ = sink_queue.send(Relay::Report(p));
        });
        Some((ProgressRelay { queue }, sink))
    }

    /// Waits until every report sent so far has been handed to the client (bounded).
    pub(super) async fn drain(self) {
        let (done, drained) = oneshot::channel();
        if self.queue.send(Relay::Drained(done)).is_ok() {
            let _ = tokio::time::timeout(DRAIN_WAIT, drained).await;
        }
    }
}

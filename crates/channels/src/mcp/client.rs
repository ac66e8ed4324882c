//! The client side of one upstream link: what Postern tells the server about itself, and what
//! it does with the server's notifications (a changed tool list, progress of a call).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::Notify;

use crate::channel::{Progress, ProgressSink};

/// Progress sinks of calls in flight, by the progress token their request carries.
pub(super) type ProgressRoutes = Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>;

#[derive(Clone)]
pub(super) struct LinkClient {
    /// Woken by `notifications/tools/list_changed`: the link reads the list again.
    pub refresh: Arc<Notify>,
    pub progress: ProgressRoutes,
}

impl ClientHandler for LinkClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("postern", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.refresh.notify_one();
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let sink = self
            .progress
            .lock()
            .ok()
            .and_then(|routes| routes.get(&params.progress_token).cloned());
        if let Some(sink) = sink {
            sink(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }
}

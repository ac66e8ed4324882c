//! What the layers in front of `/mcp` share: the gateway, the durable streams, the actors'
//! credentials, the resource server, the body bound and the per-actor limits.

use std::sync::Arc;

use postern_pipeline::Gateway;

use super::auth::ActorCredentials;
use super::limits::ActorLimits;
use super::oauth::ResourceServer;
use super::streams::DurableStreams;

pub(crate) struct FrontState {
    pub gateway: Arc<Gateway>,
    pub streams: Arc<DurableStreams>,
    pub credentials: ActorCredentials,
    pub oauth: Option<Arc<ResourceServer>>,
    pub max_body: usize,
    pub limits: ActorLimits,
}

//! What the operations behind the front door work with: the shared core plus the handles of
//! the subtrees they reach (the runner registry for controls, the resolver for `run.start`,
//! the view cache for reads).
//!
//! Architecture Invariant: no operation receives more than this, and nothing outside
//! `ops/` and `clients/` receives it.

use std::sync::Arc;

use super::rate_limit::UpdateLimiter;
use super::status_cache::StatusCache;
use crate::server::channels::Channels;
use crate::server::coordinators::Coordinators;
use crate::server::resolvers::handle::Resolvers;
use crate::server::runners::registry::Runners;
use crate::server::shared::Shared;
use crate::server::views::cache::Views;
use crate::store::Store;

pub struct OpsContext {
    /// The same store as `shared.store`, named for the many operations that only need it.
    pub store: Arc<Store>,
    pub shared: Arc<Shared>,
    pub runners: Arc<Runners>,
    pub resolvers: Arc<Resolvers>,
    pub views: Arc<Views>,
    /// Rate limits of `interaction.update`.
    pub update_limiter: UpdateLimiter,
    /// Plain `run.status` answers while the store is unchanged.
    pub status_cache: StatusCache,
    /// Which connection coordinates each origin session (shared with `clients/`).
    pub coordinators: Arc<Coordinators>,
    /// The channel adapters' handle (`channel.*`).
    pub channels: Arc<Channels>,
}

impl OpsContext {
    pub fn new(
        shared: Arc<Shared>,
        runners: Arc<Runners>,
        resolvers: Arc<Resolvers>,
        views: Arc<Views>,
        channels: Arc<Channels>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store: Arc::clone(&shared.store),
            shared,
            runners,
            resolvers,
            views,
            update_limiter: UpdateLimiter::default(),
            status_cache: StatusCache::default(),
            coordinators: Arc::new(Coordinators::default()),
            channels,
        })
    }
}

//! The peers of one app (and of its other instances), and a handle on them
//! that outlives any one server process.

use crate::codexhome::CodexHome;
use crate::fakemodel::FakeModel;
use crate::giteasim::GiteaSim;
use crate::gitsim::GitSim;
use crate::support::PgDb;
use std::sync::Arc;

pub(super) struct Peers {
    pub(super) git: Option<GitSim>,
    pub(super) gitea: Option<GiteaSim>,
    pub(super) model: Option<FakeModel>,
    pub(super) home: Option<CodexHome>,
    /// Holds the PostgreSQL database for as long as any instance lives.
    pub(super) _pg: Option<PgDb>,
}

/// The simulator and model of an app, shared with a thread that keeps
/// using them while the test kills and restarts the server.
#[derive(Clone)]
pub struct SharedPeers(Arc<Peers>);

impl SharedPeers {
    pub(super) fn new(peers: Arc<Peers>) -> SharedPeers {
        SharedPeers(peers)
    }

    pub fn gitea(&self) -> &GiteaSim {
        self.0
            .gitea
            .as_ref()
            .expect("the app has no Gitea simulator")
    }

    pub fn model(&self) -> &FakeModel {
        self.0.model.as_ref().expect("the app has no fake model")
    }
}

//! Everything that talks to Gitea: the REST client ([`client`]), the reply
//! markers and the recognition of the agent's comment tool calls ([`reply`]),
//! the verifier / REST fallback / trigger permission the actors use
//! ([`forge`]), and the posting of receipts ([`receipts`]). It is a client:
//! it imports neither the store nor the actors.

pub mod client;
pub mod forge;
pub mod receipts;
pub mod reply;

pub use client::{GiteaClient, GiteaError, Permission};
pub use forge::{ForgeNotConfigured, GiteaForge, TriggerPolicy};

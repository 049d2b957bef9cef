//! Everything that talks to Gitea: the REST client ([`client`], with
//! [`paging`] for listings read to the end), repository webhooks
//! ([`hooks`]), commit statuses ([`statuses`]), what a pull request's
//! trust rests on ([`pulls`]), a repository's comments
//! ([`comments`]), the bot's repositories ([`repos`]), the reply markers and
//! the recognition of the agent's comment tool calls ([`reply`]), the
//! verifier / REST fallback / trigger permission the actors use
//! ([`forge`]), and the posting of receipts ([`receipts`]). It is a client:
//! it imports neither the store nor the actors.

pub mod client;
pub mod comments;
mod context;
pub mod forge;
pub mod hooks;
pub mod paging;
pub mod pulls;
pub mod receipts;
pub mod reply;
pub mod repos;
pub mod reviews;
pub mod statuses;

pub use client::{GiteaClient, GiteaError, Permission};
pub use forge::{ForgeNotConfigured, GiteaForge, TriggerPolicy};

//! Background jobs above the actors: work that runs on its own schedule,
//! reads and writes the store and calls the clients, outside any session:
//! the receipts worker ([`receipts`]), the commit statuses worker
//! ([`statuses`]), the catch-up of comments whose webhook never arrived
//! ([`catchup`]), retention ([`retention`]) and this process's heartbeat
//! in the registry of server processes ([`instances`]).

pub mod catchup;
pub mod instances;
pub mod receipts;
pub mod retention;
pub mod statuses;
mod wake;

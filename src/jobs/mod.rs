//! Background jobs above the actors: work that runs on its own schedule,
//! reads and writes the store and calls the clients, outside any session.
//! The receipts worker ([`receipts`]) and the commit statuses worker
//! ([`statuses`]); later the catch-up of missed webhooks belongs here too.

pub mod receipts;
pub mod statuses;

//! Background jobs above the actors: work that runs on its own schedule,
//! reads and writes the store and calls the clients, outside any session.
//! Now the receipts worker ([`receipts`]); later the status updates and the
//! catch-up of missed webhooks belong here too.

pub mod receipts;

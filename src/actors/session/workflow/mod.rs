//! The session's workflow: work that outlives a turn. Its decisions are
//! pure (`decide`); the session commits them with the task they are about.

pub mod decide;
mod tools;

//! One integration binary with a module per area (see STYLE.md, Testing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod webhook;

//! The protocol client: agent addresses, token discovery, finding an agent by process
//! (`pid:PID`, `heaptui ps`), a blocking session for the one-shot commands, and the commands
//! that work on a live agent (`report ADDR`, `snapshot`, `run`).
//!
//! Owns everything between an address on the command line and protocol answers. It never
//! computes figures (the agent's analysis, or `heaptui_analysis` over a fetched graph, does)
//! and never draws (the TUI does).

mod address;
// The TUI's `heaptui attach` and `run` connect through it (issue 5).
pub mod cancel;
pub mod commands;
#[allow(dead_code)]
pub mod live;
pub mod locate;
pub mod ps;
mod session;
pub mod token;

pub use address::Address;
pub use session::Session;
pub use token::TokenSource;

/// A failure talking to an agent: one sentence that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError(String);

impl ClientError {
    pub fn new(message: impl Into<String>) -> Self {
        ClientError(message.into())
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClientError {}

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

/// A target's command line as the client prints it: every control character (a newline or an
/// escape sequence an argument carried) written as its Rust escape (`\n`, `\u{1b}`), so a
/// process stays on its one line and its arguments cannot drive the terminal.
pub fn printable_command(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    for c in command.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn command_lines_are_printed_without_control_characters() {
        assert_eq!(
            super::printable_command("sh -c 'echo\ta\nb' \u{1b}[2J\u{7f}\u{9b}"),
            "sh -c 'echo\\ta\\nb' \\u{1b}[2J\\u{7f}\\u{9b}"
        );
        assert_eq!(super::printable_command("psql — é ✓"), "psql — é ✓");
    }
}

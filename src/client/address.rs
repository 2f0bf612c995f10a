//! Agent addresses as users write them (docs/reference.md §2): `:PORT`, `HOST:PORT` or
//! `unix:PATH`; and `pid:PID`, which names a process whose agent is found through the token
//! directory (`locate`).

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

/// Where an agent listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl Address {
    /// Parses `:PORT`, `HOST:PORT` (`[::1]:PORT` for IPv6) or `unix:PATH`; the error is one
    /// line naming the input.
    pub fn parse(text: &str) -> Result<Address, String> {
        let bad = |why: &str| {
            format!(
                "invalid agent address {text:?}: {why} (expected :PORT, HOST:PORT, unix:PATH or pid:PID)"
            )
        };
        if text.starts_with("pid:") {
            return Err(bad("a process is not an address here"));
        }
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad("the socket path is empty"));
            }
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(bad("no port"));
        };
        let port: u16 = match port.parse() {
            Ok(p) if p != 0 => p,
            _ => {
                return Err(bad(&format!(
                    "{port:?} is not a port number from 1 to 65535"
                )));
            }
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.contains('/') || host.contains(char::is_whitespace) {
            return Err(bad(&format!("{host:?} is not a host name")));
        }
        let host = if host.is_empty() { "127.0.0.1" } else { host };
        Ok(Address::Tcp {
            host: host.to_string(),
            port,
        })
    }

    /// Whether `text` is written like an address rather than a file name.
    pub fn looks_like(text: &str) -> bool {
        if text.starts_with("unix:") || text.starts_with("pid:") {
            return true;
        }
        match text.rsplit_once(':') {
            Some((host, port)) => {
                !host.contains('/')
                    && !port.is_empty()
                    && port.bytes().all(|b| b.is_ascii_digit())
                    && port.parse::<u16>().is_ok()
            }
            None => false,
        }
    }

    /// Whether the agent is on this machine (its token file is then found by the address).
    pub fn is_local(&self) -> bool {
        match self {
            Address::Unix(_) => true,
            Address::Tcp { host, .. } => {
                host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Address::Tcp { host, port } => write!(f, "{host}:{port}"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse() {
        assert_eq!(
            Address::parse(":8000").unwrap(),
            Address::Tcp {
                host: "127.0.0.1".into(),
                port: 8000
            }
        );
        assert_eq!(Address::parse("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert_eq!(
            Address::parse("unix:/tmp/s").unwrap(),
            Address::Unix("/tmp/s".into())
        );
        assert!(Address::parse("localhost:1").unwrap().is_local());
        assert!(!Address::parse("example.com:1").unwrap().is_local());
    }

    #[test]
    fn bad_addresses_name_the_input() {
        for bad in ["8000", ":0", ":70000", "host:", "unix:", "a/b:80"] {
            let e = Address::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}

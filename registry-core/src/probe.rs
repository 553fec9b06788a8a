//! What a plain TCP connect says when a registry client library does not.
//!
//! Some client libraries report a failed connect only as "not connected" or "timeout"
//! and keep the I/O error ("Connection refused") to themselves. A backend that gets
//! such an answer tries one TCP connection to each server ([`probe_targets`]) and
//! wraps both in a [`ConnectFailure`], so the error names the cause.

use std::time::Duration;

/// How long one probe connect may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Tries one TCP connection to each `host:port` target and returns
/// `target<suffix>: outcome` for each, joined by `; ` (`suffix` names the port's role,
/// e.g. ` (gRPC)`, or is empty). `accepted` is the outcome text for a connect that
/// succeeded (e.g. "accepts TCP connections, but no session was established").
pub async fn probe_targets(
    targets: impl IntoIterator<Item = String>,
    suffix: &str,
    accepted: &str,
) -> String {
    let mut out = Vec::new();
    for target in targets {
        let outcome = match tokio::time::timeout(
            PROBE_TIMEOUT,
            tokio::net::TcpStream::connect(&target),
        )
        .await
        {
            Ok(Ok(_)) => accepted.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("TCP connect timed out after {PROBE_TIMEOUT:?}"),
        };
        out.push(format!("{target}{suffix}: {outcome}"));
    }
    out.join("; ")
}

/// A failed connect: what the client library (or our deadline) said, what the TCP
/// probe found, and the library's error as the source.
#[derive(Debug)]
pub struct ConnectFailure {
    /// What the client library (or the deadline) said.
    pub what: String,
    /// The probe's `target: outcome` list.
    pub probe: String,
    /// The library's error, when there is one.
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.what, self.probe)
    }
}

impl std::error::Error for ConnectFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_what_each_target_said() {
        let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let text = probe_targets(
            [open.local_addr().unwrap().to_string(), closed.to_string()],
            "",
            "accepts",
        )
        .await;
        assert!(
            text.starts_with(&format!("{}: accepts; ", open.local_addr().unwrap())),
            "{text}"
        );
        assert!(
            text.contains(&format!("{closed}: ")) && text.contains("refused"),
            "{text}"
        );
        let f = ConnectFailure {
            what: "timeout".into(),
            probe: text,
            source: None,
        };
        assert!(f.to_string().starts_with("timeout ("));
    }
}

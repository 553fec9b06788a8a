//! `registry.nacos.serverAddr` and `registry.nacos.contextPath` as Seata users write
//! them, turned into what nacos-sdk 0.8 can take.
//!
//! Seata passes both keys unchanged to the Nacos Java client
//! (`NacosRegistryServiceImpl.getNamingProperties`), which accepts `http://host:port`
//! and `https://host:port` entries and a `contextPath` (default `nacos`) for its HTTP
//! calls. nacos-sdk 0.8 differs:
//!
//! - its server list takes bare `host[:port]` entries only (`http://h:p` would be read
//!   as host `http`), so the scheme is stripped here;
//! - whether it uses TLS is a compile-time switch (its `tls` feature, our `nacos-tls`):
//!   `https://` needs that build, and `http://` is refused in it, where every connection
//!   is TLS;
//! - its only HTTP call is the username/password login, at the fixed path
//!   `/nacos/v1/auth/login`; gRPC (all naming traffic) has no context path. So a
//!   non-default `contextPath` is refused together with `username`/`password` and
//!   otherwise has no effect, as in the Java 2.x client, whose naming also goes over
//!   gRPC. We still use it for the HTTP check that tells a Nacos 1.x server apart
//!   (see [`crate::probe`]).

use meshline_registry_core::RegistryError;

/// The context path Nacos servers and clients use when none is set.
pub(crate) const DEFAULT_CONTEXT_PATH: &str = "nacos";

/// How the configuration asked to reach the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// Bare `host:port`: whatever this build speaks (TLS with `nacos-tls`).
    Unspecified,
    /// `http://`.
    Http,
    /// `https://`.
    Https,
}

/// `serverAddr` and `contextPath`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerAddrs {
    /// `host[:port]` entries joined by `,`: what nacos-sdk's `server_addr` takes.
    pub(crate) sdk_list: String,
    /// The scheme every entry had.
    pub(crate) scheme: Scheme,
    /// The context path without slashes (`nacos` by default).
    pub(crate) context_path: String,
}

impl ServerAddrs {
    /// Checks `server_addr` / `context_path` for a build with (`tls_built`) or without
    /// TLS, for a client that logs in over HTTP (`http_login`) or not.
    pub(crate) fn parse(
        server_addr: &str,
        context_path: Option<&str>,
        tls_built: bool,
        http_login: bool,
    ) -> Result<Self, RegistryError> {
        let bad = |why: String| {
            RegistryError::Config(format!("registry.nacos.serverAddr `{server_addr}`: {why}"))
        };
        let mut scheme = None;
        let mut hosts = Vec::new();
        for entry in server_addr
            .split([',', ';', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let (this, rest) = split_scheme(entry);
            if let Some(seen) = scheme
                && seen != this
            {
                return Err(bad(
                    "mixes entries with and without http:// or https://; one scheme applies to \
                     every server"
                        .into(),
                ));
            }
            scheme = Some(this);
            let (host, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            };
            if !path.trim_matches('/').is_empty() {
                return Err(bad(format!(
                    "`{entry}` has a path; give the server as host:port and the path as \
                     registry.nacos.contextPath"
                )));
            }
            if host.is_empty() {
                return Err(bad(format!("`{entry}` names no host")));
            }
            hosts.push(host.to_string());
        }
        let Some(scheme) = scheme else {
            return Err(bad("names no server".into()));
        };
        match scheme {
            Scheme::Https if !tls_built => {
                return Err(bad(
                    "https:// needs TLS, and this build has no TLS for nacos: enable the cargo \
                     feature `nacos-tls` of the `meshline` crate"
                        .into(),
                ));
            }
            Scheme::Http if tls_built => {
                return Err(bad(
                    "http:// cannot be honoured: this build has the `nacos-tls` feature, with \
                     which nacos-sdk speaks TLS to every Nacos server; write https:// or \
                     host:port"
                        .into(),
                ));
            }
            _ => {}
        }
        let context_path = context_path
            .map(|p| p.trim().trim_matches('/'))
            .filter(|p| !p.is_empty())
            .unwrap_or(DEFAULT_CONTEXT_PATH)
            .to_string();
        if context_path != DEFAULT_CONTEXT_PATH && http_login {
            return Err(RegistryError::Config(format!(
                "registry.nacos.contextPath `{context_path}`: nacos-sdk 0.8 logs in with \
                 username/password only at /{DEFAULT_CONTEXT_PATH}/v1/auth/login and has no \
                 setting for another context path; serve the login at /{DEFAULT_CONTEXT_PATH}, \
                 or use accessKey/secretKey (no HTTP login)"
            )));
        }
        Ok(ServerAddrs {
            sdk_list: hosts.join(","),
            scheme,
            context_path,
        })
    }

    /// `(host, http port)` of each server; the port is 8848 when an entry has none, as
    /// nacos-sdk assumes.
    pub(crate) fn hosts(&self) -> Vec<(String, u16)> {
        self.sdk_list
            .split(',')
            .map(|entry| match split_host_port(entry) {
                (host, Some(port)) => (host.to_string(), port),
                (host, None) => (host.to_string(), 8848),
            })
            .collect()
    }
}

/// `(scheme, rest)`: a leading `http://` or `https://` (any case) taken off.
fn split_scheme(entry: &str) -> (Scheme, &str) {
    for (prefix, scheme) in [("https://", Scheme::Https), ("http://", Scheme::Http)] {
        if entry.len() >= prefix.len() && entry[..prefix.len()].eq_ignore_ascii_case(prefix) {
            return (scheme, &entry[prefix.len()..]);
        }
    }
    (Scheme::Unspecified, entry)
}

/// `host[:port]` or `[v6][:port]`; a port that does not parse counts as none.
fn split_host_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(end) = entry.strip_prefix('[').and_then(|_| entry.find(']')) {
        let port = entry[end + 1..]
            .strip_prefix(':')
            .and_then(|p| p.parse().ok());
        return (&entry[..=end], port);
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, port.parse().ok()),
        _ => (entry, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(addr: &str, ctx: Option<&str>) -> ServerAddrs {
        ServerAddrs::parse(addr, ctx, false, false).unwrap()
    }

    fn err(addr: &str, ctx: Option<&str>, tls: bool, login: bool) -> String {
        ServerAddrs::parse(addr, ctx, tls, login)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn schemes_are_stripped_for_the_sdk() {
        let a = ok("http://127.0.0.1:8848", None);
        assert_eq!(a.sdk_list, "127.0.0.1:8848");
        assert_eq!(a.scheme, Scheme::Http);
        let a = ok(" HTTP://10.0.0.1:8848/ , http://10.0.0.2 ;", None);
        assert_eq!(a.sdk_list, "10.0.0.1:8848,10.0.0.2");
        assert_eq!(
            a.hosts(),
            vec![
                ("10.0.0.1".to_string(), 8848),
                ("10.0.0.2".to_string(), 8848)
            ]
        );
        let a = ok("127.0.0.1:9848,[::1]:7000", None);
        assert_eq!(a.scheme, Scheme::Unspecified);
        assert_eq!(a.sdk_list, "127.0.0.1:9848,[::1]:7000");
        assert_eq!(
            a.hosts(),
            vec![("127.0.0.1".to_string(), 9848), ("[::1]".to_string(), 7000)]
        );
        let a = ServerAddrs::parse("https://nacos.example:8848", None, true, true).unwrap();
        assert_eq!(a.sdk_list, "nacos.example:8848");
        assert_eq!(a.scheme, Scheme::Https);
    }

    #[test]
    fn tls_scheme_must_match_the_build() {
        let e = err("https://127.0.0.1:8848", None, false, false);
        assert!(e.contains("`nacos-tls`") && e.contains("https://"), "{e}");
        let e = err("http://127.0.0.1:8848", None, true, false);
        assert!(e.contains("`nacos-tls`") && e.contains("http://"), "{e}");
        let e = err("http://10.0.0.1:8848,10.0.0.2:8848", None, false, false);
        assert!(e.contains("mixes"), "{e}");
    }

    #[test]
    fn paths_and_empty_entries_are_refused() {
        let e = err("http://127.0.0.1:8848/nacos", None, false, false);
        assert!(e.contains("registry.nacos.contextPath"), "{e}");
        let e = err(" , ;", None, false, false);
        assert!(e.contains("names no server"), "{e}");
        let e = err("http://", None, false, false);
        assert!(e.contains("names no host"), "{e}");
    }

    #[test]
    fn context_path_default_and_login() {
        for ctx in [
            None,
            Some(""),
            Some("nacos"),
            Some("/nacos"),
            Some("/nacos/"),
        ] {
            let a = ServerAddrs::parse("127.0.0.1:8848", ctx, false, true).unwrap();
            assert_eq!(a.context_path, "nacos", "{ctx:?}");
        }
        // Without an HTTP login the context path is accepted (gRPC has none).
        assert_eq!(
            ok("127.0.0.1:8848", Some("/custom/")).context_path,
            "custom"
        );
        let e = err("127.0.0.1:8848", Some("/custom"), false, true);
        assert!(
            e.contains("registry.nacos.contextPath `custom`") && e.contains("/nacos/v1/auth/login"),
            "{e}"
        );
    }
}

//! Who the client is to the server: headers for each request.
//!
//! - `username`/`password`: Nacos' HTTP login (`POST /nacos/v1/auth/login` on the
//!   server's HTTP port) gives an `accessToken`, sent as the header of that name. It
//!   is fetched when a connection opens and again before its `tokenTtl` runs out. A
//!   failed login is logged (without the password) and the request goes without a
//!   token, so the server's own refusal (403) reaches the caller with its reason.
//! - `accessKey`/`secretKey` (Alibaba Cloud's RAM): each naming request carries `ak`,
//!   `data` (`<millis>@@<group>@@<service>`) and `signature`, the base64 HMAC-SHA1 of
//!   `data` under the secret key, as Nacos' `RamClientAuthServiceImpl` computes it.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;

use super::lock;
use super::server::Server;

/// How long the login call may take.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(3);

/// The credentials, and the token of the last login.
pub(crate) enum Auth {
    /// No credentials.
    None,
    /// `username`/`password`.
    Login(Login),
    /// `accessKey`/`secretKey`.
    Ram {
        access_key: String,
        secret_key: String,
    },
}

/// The HTTP login and its token.
pub(crate) struct Login {
    username: String,
    password: String,
    /// `http` or `https`.
    scheme: &'static str,
    http: reqwest::Client,
    /// The token and when to fetch a new one.
    token: std::sync::Mutex<Option<(String, Instant)>>,
    /// The last login failed (the next failure is logged at debug level only, so a
    /// server that is down does not fill the log).
    failing: std::sync::atomic::AtomicBool,
}

impl Auth {
    /// `username`/`password` when both are set, else `accessKey`/`secretKey` when
    /// both are set, else none.
    pub(crate) fn new(
        user: Option<(&str, &str)>,
        ram: Option<(&str, &str)>,
        tls: bool,
    ) -> Result<Auth, String> {
        if let Some((username, password)) = user {
            let http = login_client()?;
            return Ok(Auth::Login(Login {
                username: username.to_string(),
                password: password.to_string(),
                scheme: if tls { "https" } else { "http" },
                http,
                token: std::sync::Mutex::new(None),
                failing: std::sync::atomic::AtomicBool::new(false),
            }));
        }
        if let Some((ak, sk)) = ram {
            return Ok(Auth::Ram {
                access_key: ak.to_string(),
                secret_key: sk.to_string(),
            });
        }
        Ok(Auth::None)
    }

    /// Logs in at `server` unless the token is still fresh (a login client only).
    pub(crate) async fn refresh(&self, server: &Server) {
        let Auth::Login(login) = self else { return };
        let fresh = matches!(&*lock(&login.token), Some((_, until)) if Instant::now() < *until);
        if fresh {
            return;
        }
        match login.login(server).await {
            Ok((token, ttl)) => {
                // Fetched again after nine tenths of its life, as Nacos' Java client does.
                let until = Instant::now() + ttl.mul_f64(0.9);
                *lock(&login.token) = Some((token, until));
                login
                    .failing
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                if login
                    .failing
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::debug!(registry = "nacos", server = %server, error = %e, "nacos login failed again");
                } else {
                    tracing::warn!(registry = "nacos", server = %server, error = %e, "nacos login failed; requests go without a token");
                }
                *lock(&login.token) = None;
            }
        }
    }

    /// The headers of one request about `service` of `group` (both empty for a
    /// request about no service).
    pub(crate) fn headers(&self, group: &str, service: &str) -> HashMap<String, String> {
        let mut h = HashMap::new();
        match self {
            Auth::None => {}
            Auth::Login(login) => {
                if let Some((token, _)) = &*lock(&login.token) {
                    h.insert("accessToken".to_string(), token.clone());
                }
            }
            Auth::Ram {
                access_key,
                secret_key,
            } => {
                let millis = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0);
                let data = ram_data(millis, group, service);
                h.insert("signature".to_string(), ram_signature(&data, secret_key));
                h.insert("data".to_string(), data);
                h.insert("ak".to_string(), access_key.clone());
            }
        }
        h
    }
}

impl Login {
    /// One login: the token and its time to live.
    async fn login(&self, server: &Server) -> Result<(String, Duration), String> {
        let url = format!(
            "{}://{}/nacos/v1/auth/login",
            self.scheme,
            server.authority(server.http_port)
        );
        let answer = self
            .http
            .post(url)
            .form(&[
                ("username", self.username.as_str()),
                ("password", self.password.as_str()),
            ])
            .send()
            .await
            // reqwest's error names the URL, which has no secret (the form is the body).
            .map_err(|e| format!("login: {e}"))?;
        let status = answer.status();
        let body = answer
            .bytes()
            .await
            .map_err(|e| format!("login: reading the answer: {e}"))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            return Err(format!("login: HTTP {status}: {text}"));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("login: not JSON: {e}"))?;
        let token = v
            .get("accessToken")
            .and_then(|t| t.as_str())
            .ok_or("login: the answer has no accessToken")?;
        let ttl = v.get("tokenTtl").and_then(|t| t.as_u64()).unwrap_or(18_000);
        Ok((token.to_string(), Duration::from_secs(ttl.max(1))))
    }
}

/// The HTTP client of the login: with the TLS build, the CA file nacos-sdk reads
/// (`NACOS_CLIENT_TLS_CA_CERT`) is trusted too, so registry and centre trust alike.
fn login_client() -> Result<reqwest::Client, String> {
    #[allow(unused_mut)]
    let mut b = reqwest::Client::builder().timeout(LOGIN_TIMEOUT);
    #[cfg(feature = "tls")]
    if let Some(path) = std::env::var_os(crate::tls::CA_ENV) {
        let pem = std::fs::read(&path)
            .map_err(|e| format!("reading {}: {e}", std::path::Path::new(&path).display()))?;
        let ca = reqwest::Certificate::from_pem(&pem).map_err(|e| format!("CA file: {e}"))?;
        b = b.add_root_certificate(ca);
    }
    b.build().map_err(|e| e.to_string())
}

/// What a RAM signature signs: the time, and the grouped service when there is one.
fn ram_data(millis: u128, group: &str, service: &str) -> String {
    if service.is_empty() {
        millis.to_string()
    } else if group.is_empty() {
        format!("{millis}@@{service}")
    } else {
        format!("{millis}@@{group}@@{service}")
    }
}

/// base64(HMAC-SHA1(data, secret key)).
fn ram_signature(data: &str, secret_key: &str) -> String {
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        secret_key.as_bytes(),
    );
    let tag = ring::hmac::sign(&key, data.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2202's first HMAC-SHA1 vector, base64-encoded, checks the signature's
    /// algorithm and encoding.
    #[test]
    fn the_ram_signature_is_base64_hmac_sha1() {
        let key = String::from_utf8(vec![0x0b; 20]).unwrap();
        // hex b617318655057264e28bc0b6fb378c8ef146be00
        assert_eq!(
            ram_signature("Hi There", &key),
            "thcxhlUFcmTii8C2+zeMjvFGvgA="
        );
    }

    #[test]
    fn ram_data_names_the_grouped_service() {
        assert_eq!(ram_data(17, "G", "s"), "17@@G@@s");
        assert_eq!(ram_data(17, "", "s"), "17@@s");
        assert_eq!(ram_data(17, "G", ""), "17");
    }

    #[test]
    fn ram_headers_carry_the_key_not_the_secret() {
        let a = Auth::new(None, Some(("AK", "SECRET")), false).unwrap();
        let h = a.headers("G", "s");
        assert_eq!(h["ak"], "AK");
        assert!(h["data"].ends_with("@@G@@s"));
        assert!(h.values().all(|v| !v.contains("SECRET")));
    }
}

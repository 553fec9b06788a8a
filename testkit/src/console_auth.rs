//! The console login of Seata's HTTP servers, as the doubles serve it (a raft TC's
//! control port, a namingserver): `console/.../controller/AuthController.java`,
//! `console/.../filter/JwtAuthenticationTokenFilter.java` and
//! `console/.../security/JwtAuthenticationEntryPoint.java`.
//!
//! - `POST /api/v1/auth/login` `{"username","password"}`: HTTP 200 with
//!   `{"code":"200","data":"Bearer <token>"}` (the token also in the `Authorization`
//!   header), or HTTP 200 with `{"code":"401","message":"Login failed"}`.
//! - With credentials set, a protected endpoint wants `Authorization: Bearer <token>`
//!   of an unexpired token, and answers HTTP 401 otherwise (Spring Security's
//!   `sendError(401)`). Tokens are JWT-shaped random strings.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::http_double::lock;

/// The users' tokens of one double.
pub(crate) struct ConsoleAuth {
    /// User and password; `None`: no login wanted, every call allowed.
    credentials: Option<(String, String)>,
    validity: Duration,
    /// Token -> when it expires.
    tokens: Mutex<HashMap<String, Instant>>,
    logins: Mutex<usize>,
    /// Calls refused with HTTP 401 (no, expired or unknown token).
    refused: Mutex<usize>,
}

/// A JSON answer.
pub(crate) fn json_response(status: StatusCode, v: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Spring Security's answer to a missing or bad token (`sendError(401)`).
fn unauthorized() -> Response {
    json_response(
        StatusCode::UNAUTHORIZED,
        json!({"status": 401, "error": "Unauthorized", "message": "Unauthorized"}),
    )
}

/// The route layer of the endpoints a login protects (`axum::middleware::from_fn_with_state`
/// over the double's [`ConsoleAuth`]): Spring Security's filter, before any handler.
pub(crate) async fn guard(
    State(auth): State<Arc<ConsoleAuth>>,
    req: Request,
    next: Next,
) -> Response {
    if auth.authorized(req.headers()) {
        next.run(req).await
    } else {
        unauthorized()
    }
}

impl ConsoleAuth {
    pub(crate) fn new(credentials: Option<(String, String)>, validity: Duration) -> Self {
        ConsoleAuth {
            credentials,
            validity,
            tokens: Mutex::new(HashMap::new()),
            logins: Mutex::new(0),
            refused: Mutex::new(0),
        }
    }

    /// The answer to a login with `body`.
    pub(crate) fn login(&self, body: &[u8]) -> Response {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let user = v.get("username").and_then(Value::as_str);
        let pass = v.get("password").and_then(Value::as_str);
        let ok = match &self.credentials {
            Some((u, p)) => user == Some(u.as_str()) && pass == Some(p.as_str()),
            None => true,
        };
        if !ok {
            return json_response(
                StatusCode::OK,
                json!({"code": "401", "message": "Login failed", "data": null, "success": false}),
            );
        }
        let token = format!("Bearer {}", self.issue());
        let mut r = json_response(
            StatusCode::OK,
            json!({"code": "200", "message": "success", "data": token, "success": true}),
        );
        if let Ok(h) = token.parse() {
            r.headers_mut().insert(header::AUTHORIZATION, h);
        }
        r
    }

    fn issue(&self) -> String {
        let token = format!(
            "eyJhbGciOiJIUzI1NiJ9.{:016x}.{:016x}",
            fastrand::u64(..),
            fastrand::u64(..)
        );
        lock(&self.tokens).insert(token.clone(), Instant::now() + self.validity);
        *lock(&self.logins) += 1;
        token
    }

    /// True when no login is wanted, or `headers` carry `Authorization: Bearer <a
    /// token issued here that has not expired>`; a refusal is counted.
    pub(crate) fn authorized(&self, headers: &HeaderMap) -> bool {
        if self.credentials.is_none() {
            return true;
        }
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "));
        let ok = token.is_some_and(|t| {
            lock(&self.tokens)
                .get(t)
                .is_some_and(|until| Instant::now() < *until)
        });
        if !ok {
            *lock(&self.refused) += 1;
        }
        ok
    }

    /// Makes every issued token invalid (as a server restarted with a new secret).
    pub(crate) fn expire(&self) {
        lock(&self.tokens).clear();
    }

    /// Logins that succeeded so far.
    pub(crate) fn logins(&self) -> usize {
        *lock(&self.logins)
    }

    /// Calls refused with HTTP 401 so far.
    pub(crate) fn refused(&self) -> usize {
        *lock(&self.refused)
    }
}

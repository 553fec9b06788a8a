//! What a Nacos server lists over its HTTP API: its namespaces
//! (`GET /<contextPath>/v1/console/namespaces`) and, per namespace, every service with
//! its group (`GET /<contextPath>/v1/ns/catalog/services`, the console's service list,
//! which Nacos 2.x and rnacos serve). nacos-sdk's service list call reads one group at
//! a time, so without these `nearby` could only guess groups (`DEFAULT_GROUP`,
//! `SEATA_GROUP`) and a TC under a team's own group name was never found.
//!
//! With `username`/`password`, the calls carry the token of one login
//! (`POST /<contextPath>/v1/auth/login`), as Nacos's console does. Any failure here is
//! not an error of `nearby`: the guessed groups are still read, and the log says why
//! the listing is missing.

use std::time::Duration;

use crate::address::{Scheme, ServerAddrs};
use crate::settings::NacosSettings;

/// How long one listing call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// The page size of the service catalog (its first page only is read).
const PAGE: usize = 200;
/// The most of an answer read.
const MAX_BODY: usize = 1024 * 1024;

/// One service a namespace lists, with its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) group: String,
    pub(crate) service: String,
}

/// An HTTP client of the first configured server, logged in when credentials are set.
pub(crate) struct Catalog {
    client: reqwest::Client,
    /// `scheme://host:port/contextPath`.
    base: String,
    token: Option<String>,
}

impl Catalog {
    /// A client of the first server `settings` names; `Err` says why there is none.
    pub(crate) async fn open(settings: &NacosSettings) -> Result<Catalog, String> {
        let login = settings.username.is_some() && settings.password.is_some();
        let addrs = ServerAddrs::parse(
            &settings.server_addr,
            settings.context_path.as_deref(),
            cfg!(feature = "tls"),
            login,
        )
        .map_err(|e| e.to_string())?;
        let (host, port) = addrs
            .hosts()
            .into_iter()
            .next()
            .ok_or_else(|| "no server address".to_string())?;
        let scheme = match addrs.scheme {
            Scheme::Https => "https",
            Scheme::Http => "http",
            Scheme::Unspecified if cfg!(feature = "tls") => "https",
            Scheme::Unspecified => "http",
        };
        let client = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?;
        let mut catalog = Catalog {
            client,
            base: format!("{scheme}://{host}:{port}/{}", addrs.context_path),
            token: None,
        };
        if let (Some(user), Some(pass)) = (&settings.username, &settings.password) {
            let answer = catalog
                .client
                .post(format!("{}/v1/auth/login", catalog.base))
                .form(&[("username", user.as_str()), ("password", pass.expose())])
                .send()
                .await
                .map_err(|e| format!("login: {e}"))?;
            let body = read_json(answer, "login").await?;
            catalog.token = body
                .get("accessToken")
                .and_then(|t| t.as_str())
                .map(str::to_string);
            if catalog.token.is_none() {
                return Err("login: the answer has no accessToken".into());
            }
        }
        Ok(catalog)
    }

    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<serde_json::Value, String> {
        let mut q: Vec<(&str, &str)> = query.to_vec();
        if let Some(t) = &self.token {
            q.push(("accessToken", t));
        }
        let answer = self
            .client
            .get(format!("{}{path}", self.base))
            .query(&q)
            .send()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        read_json(answer, path).await
    }

    /// The namespace ids the server lists (`""` for public).
    pub(crate) async fn namespaces(&self) -> Result<Vec<String>, String> {
        let v = self.get("/v1/console/namespaces", &[]).await?;
        let list = list_in(&v, "data", "namespaces: no `data` list in the answer")?;
        Ok(list
            .iter()
            .filter_map(|n| n.get("namespace").and_then(|id| id.as_str()))
            .map(str::to_string)
            .collect())
    }

    /// The services of `namespace` (`""`: public) with their groups: the catalog's
    /// first page, in the server's order.
    pub(crate) async fn services(&self, namespace: &str) -> Result<Vec<Listed>, String> {
        let page = PAGE.to_string();
        let mut query = vec![("pageNo", "1"), ("pageSize", page.as_str())];
        if !namespace.is_empty() {
            query.push(("namespaceId", namespace));
        }
        let v = self.get("/v1/ns/catalog/services", &query).await?;
        let list = list_in(&v, "serviceList", "catalog: no `serviceList` in the answer")?;
        Ok(list
            .iter()
            .filter_map(|s| {
                let service = s.get("name")?.as_str()?.to_string();
                let group = s
                    .get("groupName")
                    .and_then(|g| g.as_str())
                    .unwrap_or("DEFAULT_GROUP")
                    .to_string();
                Some(Listed { group, service })
            })
            .collect())
    }
}

/// The list under `key` in the answer `v`; `missing` is the error when there is none.
fn list_in<'a>(
    v: &'a serde_json::Value,
    key: &str,
    missing: &str,
) -> Result<&'a [serde_json::Value], String> {
    v.get(key)
        .and_then(|d| d.as_array())
        .map(Vec::as_slice)
        .ok_or_else(|| missing.to_string())
}

/// The JSON body of a successful answer, or why not.
async fn read_json(answer: reqwest::Response, what: &str) -> Result<serde_json::Value, String> {
    let status = answer.status();
    let body = answer
        .bytes()
        .await
        .map_err(|e| format!("{what}: reading the answer: {e}"))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(format!("{what}: HTTP {status}: {text}"));
    }
    if body.len() > MAX_BODY {
        return Err(format!("{what}: answer over {MAX_BODY} bytes"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{what}: not JSON: {e}"))
}

//! Reading the `gateway` section of a config into [`GatewaySettings`]: the gateway's own
//! keys, the sections read by the modules that own them (`drain`, `limits`, `queue`,
//! `protect`), the modules' routes, then the checks across keys.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use meshline::Config;

use super::{
    GatewaySettings, ModuleKind, ModuleRoute, RouteKey, SessionStoreKind, SettingsError, duration,
    err,
};

/// The fields given for each module (`modules.<id>.<field>`), by module id.
type ModuleFields<'a> = BTreeMap<u16, BTreeMap<&'a str, &'a str>>;

fn bytes(key: &str, v: &str) -> Result<usize, SettingsError> {
    meshline::core::config::parse_bytes(v).map_err(|e| err(key, e))
}

/// An optional address: empty means none.
fn optional_addr(key: &str, v: &str) -> Result<Option<SocketAddr>, SettingsError> {
    if v.is_empty() {
        return Ok(None);
    }
    v.parse().map(Some).map_err(|e| {
        err(
            key,
            format!("{e} (an address like 127.0.0.1:7001, or empty)"),
        )
    })
}

/// A module's `kind`, any case; `None` for an unknown one.
fn kind_named(v: &str) -> Option<ModuleKind> {
    match v.to_ascii_lowercase().as_str() {
        "stateless" => Some(ModuleKind::Stateless),
        "static" => Some(ModuleKind::Static),
        "dynamic" => Some(ModuleKind::Dynamic),
        "keyed" => Some(ModuleKind::Keyed),
        _ => None,
    }
}

/// A module's `key`, any case (empty or `none`: no key); `None` for an unknown one.
fn route_key_named(v: &str) -> Option<RouteKey> {
    match v.to_ascii_lowercase().as_str() {
        "" | "none" => Some(RouteKey::None),
        "account" => Some(RouteKey::Account),
        "role" => Some(RouteKey::Role),
        "source" => Some(RouteKey::Source),
        "word" => Some(RouteKey::Word),
        p => match p.strip_prefix("prefix:").map(str::parse::<usize>) {
            Some(Ok(n)) if n > 0 => Some(RouteKey::Prefix(n)),
            _ => None,
        },
    }
}

impl GatewaySettings {
    /// Reads `config`'s `gateway` section over the defaults. Unknown keys are errors
    /// (a typo in a gateway setting should not pass silently).
    pub fn from_config(config: &Config) -> Result<GatewaySettings, SettingsError> {
        let mut s = GatewaySettings::default();
        let part = config.part("gateway");
        let mut modules = ModuleFields::new();
        for (k, v) in part.entries() {
            let known = s.set_connection_key(k, v)?
                || s.set_session_key(k, v)?
                || s.set_section_key(k, v, &mut modules)?;
            if !known {
                return Err(err(k, "unknown gateway setting"));
            }
        }
        for (id, fields) in modules {
            let route = s.module_route(id, fields)?;
            s.modules.insert(id, route);
        }
        s.check()?;
        Ok(s)
    }

    /// One of the gateway's own keys on its listeners, admission, frames, send queues
    /// and backends (`k` normalised); false when `k` is none of them.
    fn set_connection_key(&mut self, k: &str, v: &str) -> Result<bool, SettingsError> {
        match k {
            "id" => self.id = v.to_string(),
            "listen" => self.listen = v.parse().map_err(|e| err(k, format!("{e}")))?,
            "wslisten" => self.ws_listen = optional_addr(k, v)?,
            "adminlisten" => self.admin_listen = optional_addr(k, v)?,
            "secret" => self.secret = v.to_string(),
            "authdeadline" => self.auth_deadline = duration(k, v)?,
            "maxunauthenticated" => {
                self.max_unauthenticated = v.parse().map_err(|e| err(k, format!("{e}")))?
            }
            "maxframe" => self.max_frame = bytes(k, v)?,
            "authmaxframe" => self.auth_max_frame = bytes(k, v)?,
            "sendqueuesoft" => self.send_queue_soft = bytes(k, v)?,
            "sendqueuehard" => self.send_queue_hard = bytes(k, v)?,
            "backendtimeout" => self.backend_timeout = duration(k, v)?,
            "appversion" => self.app_version = (!v.is_empty()).then(|| v.to_string()),
            "registercluster" => self.register_cluster = (!v.is_empty()).then(|| v.to_string()),
            "clientkeepalive" => self.client_keepalive = duration(k, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// One of the gateway's own keys on sessions: their push buffer, a second login,
    /// resuming and the session store (`k` normalised); false when `k` is none of them.
    fn set_session_key(&mut self, k: &str, v: &str) -> Result<bool, SettingsError> {
        match k {
            "pushbufferbytes" => self.push_buffer.bytes = bytes(k, v)?,
            "pushbufferage" => self.push_buffer.age = duration(k, v)?,
            "duplicatelogin" => {
                use crate::gateway::session::DuplicateLogin as D;
                self.duplicate_login = match v.to_ascii_lowercase().replace('_', "-").as_str() {
                    "kick-old" | "kickold" => D::KickOld,
                    "refuse-new" | "refusenew" => D::RefuseNew,
                    "allow" => D::Allow,
                    _ => return Err(err(k, "kick-old, refuse-new or allow")),
                }
            }
            "resumewindow" => self.resume_window = duration(k, v)?,
            "sessionstore" => {
                self.session_store = match v.to_ascii_lowercase().as_str() {
                    "memory" => SessionStoreKind::Memory,
                    "redis" => SessionStoreKind::Redis,
                    _ => return Err(err(k, "memory or redis")),
                }
            }
            "redisurl" => self.redis_url = v.to_string(),
            "redistimeout" => self.redis_timeout = duration(k, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A key of a section: `drain.*`, `limits.*`, `queue.*` and `protect.*` set by the
    /// settings that own them, `modules.<id>.<field>` gathered in `modules` to be read
    /// once all are known; false when `k` is in none of them.
    fn set_section_key<'a>(
        &mut self,
        k: &'a str,
        v: &'a str,
        modules: &mut ModuleFields<'a>,
    ) -> Result<bool, SettingsError> {
        match k {
            d if d.starts_with("drain.") => self.drain.set(k, &d["drain.".len()..], v)?,
            _ if k.starts_with("limits.") => self
                .limits
                .set(&k["limits.".len()..], v)
                .map_err(|e| err(k, e))?,
            _ if k.starts_with("queue.") => self
                .queue
                .set(&k["queue.".len()..], v)
                .map_err(|e| err(k, e))?,
            other if other.starts_with("protect.") => {
                let field = other.split_once('.').map_or("", |(_, f)| f);
                self.protect.set(field, v).map_err(|e| err(k, e))?
            }
            other => match other
                .strip_prefix("modules.")
                .and_then(|r| r.split_once('.'))
            {
                Some((id, field)) => {
                    let id: u16 = id
                        .parse()
                        .map_err(|_| err(k, "module ids are numbers 1..=65535"))?;
                    if id == 0 {
                        return Err(err(k, "module 0 is the gateway itself"));
                    }
                    modules.entry(id).or_default().insert(field, v);
                }
                None => return Ok(false),
            },
        }
        Ok(true)
    }

    /// Module `id`'s route from its `fields` (its protection keys go to `protect`):
    /// every module needs a cluster and a known balancer, and a keyed module's key comes
    /// from the payload (`word` unless set).
    fn module_route(
        &mut self,
        id: u16,
        fields: BTreeMap<&str, &str>,
    ) -> Result<ModuleRoute, SettingsError> {
        let key = |f: &str| format!("modules.{id}.{f}");
        let mut route = ModuleRoute {
            id,
            name: format!("module-{id}"),
            cluster: String::new(),
            kind: ModuleKind::Stateless,
            choice: "RoundRobinLoadBalance".into(),
            key: RouteKey::None,
        };
        for (f, v) in fields {
            match f {
                "name" => route.name = v.to_string(),
                "cluster" => route.cluster = v.to_string(),
                "choice" => route.choice = v.to_string(),
                "kind" => {
                    route.kind = kind_named(v)
                        .ok_or_else(|| err(&key(f), "stateless, static, dynamic or keyed"))?
                }
                "key" => {
                    route.key = route_key_named(v)
                        .ok_or_else(|| err(&key(f), "account, role, source, word or prefix:N"))?
                }
                _ => {
                    if !self
                        .protect
                        .set_module(id, f, v)
                        .map_err(|e| err(&key(f), e))?
                    {
                        return Err(err(&key(f), "unknown module setting"));
                    }
                }
            }
        }
        if route.cluster.is_empty() {
            return Err(err(&key("cluster"), "every module needs a cluster"));
        }
        if route.kind == ModuleKind::Keyed {
            match route.key {
                RouteKey::None => route.key = RouteKey::Word,
                RouteKey::Word | RouteKey::Prefix(_) => {}
                _ => {
                    return Err(err(
                        &key("key"),
                        "a keyed module's key comes from the payload: word or prefix:N",
                    ));
                }
            }
        }
        meshline::loadbalance::by_name(&route.choice)
            .map_err(|e| err(&key("choice"), e.to_string()))?;
        Ok(route)
    }

    /// The checks once every key is read: a token secret, a resume window, room for
    /// the header in the first frame, and a Redis URL of the right form when used.
    fn check(&self) -> Result<(), SettingsError> {
        if self.secret.is_empty() {
            return Err(err("secret", "a token secret is required"));
        }
        if self.resume_window.is_zero() {
            return Err(err("resume-window", "must be more than zero"));
        }
        if self.auth_max_frame < crate::gateway::protocol::HEADER_AFTER_LEN {
            return Err(err("auth-max-frame", "at least the 9-byte header"));
        }
        if self.session_store == SessionStoreKind::Redis {
            // Checks the URL's form only (nothing is connected here); the error never
            // repeats the URL, which may hold a password.
            redis::Client::open(self.redis_url.as_str()).map_err(|e| {
                err(
                    "redis-url",
                    format!("not a redis:// URL ({})", e.category()),
                )
            })?;
        }
        Ok(())
    }
}

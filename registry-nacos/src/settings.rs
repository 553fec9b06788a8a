//! `registry.nacos.*`: what this backend reads from its section of the
//! configuration, with Seata's defaults.

use meshline_registry_core::config::Secret;
use meshline_registry_core::config::Section;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// Which protocol the registry's naming client speaks (`registry.nacos.protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// `auto` (the default): the server's version decides. `GET
    /// /<contextPath>/v1/console/server/state` answering a 1.x version means HTTP;
    /// anything else (a 2.x or later version, no version, no answer) means gRPC, the
    /// protocol of every server since 2.0.
    #[default]
    Auto,
    /// `grpc`: Nacos 2's gRPC protocol, on the HTTP port + 1000 (or `grpcPort`).
    Grpc,
    /// `http`: Nacos 1.x's open API (v1) on the HTTP port, with heartbeats and polling;
    /// 2.x servers serve it too.
    Http,
}

impl Protocol {
    fn parse(s: &str) -> Result<Protocol, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Protocol::Auto),
            "grpc" => Ok(Protocol::Grpc),
            "http" | "v1" => Ok(Protocol::Http),
            other => Err(format!(
                "`{other}` is not a protocol: auto, grpc or http (Nacos 1.x's v1 API)"
            )),
        }
    }
}

/// The Nacos registry's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct NacosSettings {
    /// `serverAddr`: `host:port[,host:port…]`, each entry optionally with `http://` (or,
    /// in a `nacos-tls` build, `https://`) as Seata's Java client takes it. Default
    /// `127.0.0.1:8848`. Checked at connect (the crate's `address` rules).
    pub server_addr: String,
    /// `namespace`. Default empty (Nacos' `public`).
    pub namespace: String,
    /// `group`. Default `DEFAULT_GROUP` (Seata's own server config template uses
    /// `SEATA_GROUP`: client and server must agree).
    pub group: String,
    /// `application`: the Nacos service name. Default `seata-server`.
    pub application: String,
    /// `cluster`: the Nacos cluster name the server registers in. Default `default`.
    pub cluster: String,
    /// `username`.
    pub username: Option<String>,
    /// `password`.
    pub password: Option<Secret>,
    /// `accessKey`.
    pub access_key: Option<String>,
    /// `secretKey`.
    pub secret_key: Option<Secret>,
    /// `contextPath` (Nacos' default `nacos`): no effect on gRPC; nacos-sdk 0.8 logs in
    /// only at `/nacos/v1/auth/login`, so another value with `username`/`password` is
    /// refused at connect. Also where the Nacos 1.x check after a failed connect asks.
    pub context_path: Option<String>,
    /// `grpcPort` (meshline): the server's gRPC port when it is not HTTP port + 1000.
    pub grpc_port: Option<u16>,
    /// `protocol` (meshline): what the registry's naming client speaks. See
    /// [`Protocol`].
    pub protocol: Protocol,
    /// `tls.*` (see the crate's TLS section: only `tls.enabled` and `tls.caFile` apply).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

impl NacosSettings {
    /// Reads `registry.nacos.*` from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        Self::from_section(&config.registry.section(&["nacos"]), &[])
    }

    /// Reads the connection keys of a section: `registry.nacos.*`, or the config
    /// centre's `config.nacos.*` (whose `accept` lists its own keys, e.g. `dataId`), so
    /// that both reach Nacos the same way.
    pub fn from_section(section: &Section, accept: &[&str]) -> Result<Self, RegistryError> {
        let r = section.reader();
        r.accept(accept);
        // Seata keys for its Java client that have no meaning here
        // (`NacosRegistryServiceImpl`, `RegistryNacosProperties`).
        r.accept(&[
            "slbPattern",
            "ramRoleName",
            "clusterName",
            "clientApplication",
        ]);
        Ok(NacosSettings {
            server_addr: r.text("serverAddr", "127.0.0.1:8848")?,
            namespace: r.text_or_empty("namespace", ""),
            group: r.text("group", "DEFAULT_GROUP")?,
            application: r.text("application", "seata-server")?,
            cluster: r.text("cluster", "default")?,
            username: r.optional("username"),
            password: r.secret("password"),
            access_key: r.optional("accessKey"),
            secret_key: r.secret("secretKey"),
            context_path: r.optional("contextPath"),
            grpc_port: r.optional_number("grpcPort")?,
            protocol: r.parse("protocol", Protocol::parse)?.unwrap_or_default(),
            tls: TlsSettings::read(&r, "nacos")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::{ConfigLoader, Format};

    #[test]
    fn seata_shipped_files() {
        for (name, s) in meshline_testkit::seata_shipped_settings(NacosSettings::from_config) {
            assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
            assert_eq!(s.server_addr, "127.0.0.1:8848", "{name}");
            assert_eq!(s.group, "SEATA_GROUP", "{name}");
            assert_eq!(s.application, "seata-server", "{name}");
            assert_eq!(s.namespace, "", "{name}");
            assert_eq!(s.password, None, "{name}: empty is unset");
        }
    }

    #[test]
    fn the_protocol_is_auto_unless_named() {
        let s = NacosSettings::from_config(&Config::default()).unwrap();
        assert_eq!(s.protocol, Protocol::Auto);
        let with = |v: &str| {
            let c = ConfigLoader::new()
                .text(format!("registry.nacos.protocol={v}\n"), Format::Properties)
                .load()
                .unwrap();
            NacosSettings::from_config(&c).map(|s| s.protocol)
        };
        assert_eq!(with("HTTP").unwrap(), Protocol::Http);
        assert_eq!(with("grpc").unwrap(), Protocol::Grpc);
        let e = with("udp").unwrap_err().to_string();
        assert!(
            e.contains("registry.nacos.protocol") && e.contains("auto, grpc or http"),
            "{e}"
        );
    }

    #[test]
    fn seata_defaults_and_secrets_hidden() {
        let s = NacosSettings::from_config(&Config::default()).unwrap();
        assert_eq!(s.server_addr, "127.0.0.1:8848");
        assert_eq!(s.group, "DEFAULT_GROUP");
        assert_eq!(s.application, "seata-server");
        assert_eq!(s.namespace, "");
        let c = ConfigLoader::new()
            .text(
                "registry.nacos.password=s3cret\nregistry.nacos.username=u\nregistry.nacos.slbPattern=x\nregistry.nacos.pasword=typo-s3cret\n",
                Format::Properties,
            )
            .load()
            .unwrap();
        let s = NacosSettings::from_config(&c).unwrap();
        assert_eq!(s.password.as_ref().map(Secret::expose), Some("s3cret"));
        assert!(!format!("{s:?}").contains("s3cret"));
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("registry.nacos.pasword"));
        assert!(!s.warnings[0].contains("typo-s3cret"), "{:?}", s.warnings);
    }
}

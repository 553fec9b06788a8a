//! The JSON bodies Nacos 2 exchanges over gRPC, as far as a naming client needs them.
//!
//! Field names are Nacos' own (`camelCase`, as Java Nacos and nacos-sdk write them).
//! Requests are built where they are sent ([`super::client`]); what is read back is
//! typed here, and anything the server adds is ignored.

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize};

/// One instance of a service, as registered and as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceInstance {
    /// The server's id of the instance (set by the server; sent as `null`).
    pub instance_id: Option<String>,
    /// Address.
    pub ip: String,
    /// Port (an `int` in Java).
    pub port: i32,
    /// Nacos' weight (a float).
    pub weight: f64,
    /// Healthy.
    pub healthy: bool,
    /// Enabled.
    pub enabled: bool,
    /// Ephemeral: removed with the connection that registered it.
    pub ephemeral: bool,
    /// The Nacos cluster.
    pub cluster_name: Option<String>,
    /// The service (`group@@service` when listed).
    pub service_name: Option<String>,
    /// Metadata (`zone`, and whatever the registering client put there).
    #[serde(deserialize_with = "null_as_default")]
    pub metadata: HashMap<String, String>,
}

impl Default for ServiceInstance {
    /// Nacos' defaults: weight 1, healthy, enabled, ephemeral.
    fn default() -> Self {
        ServiceInstance {
            instance_id: None,
            ip: String::new(),
            port: 0,
            weight: 1.0,
            healthy: true,
            enabled: true,
            ephemeral: true,
            cluster_name: None,
            service_name: None,
            metadata: HashMap::new(),
        }
    }
}

/// What a query answers and a push carries: a service's instances.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ServiceInfo {
    /// The service name (without the group).
    pub(crate) name: String,
    /// Its group.
    pub(crate) group_name: String,
    /// `null` (Java Nacos sends it for a service with no instance) reads as empty.
    #[serde(deserialize_with = "null_as_default")]
    pub(crate) hosts: Vec<ServiceInstance>,
}

/// The fields every answer has.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Outcome {
    /// 200 on success (Nacos' `ResponseCode.SUCCESS`), 500 on failure.
    pub(crate) result_code: i32,
    /// The reason of a failure (e.g. 403 refused by auth, 301 connection unknown).
    pub(crate) error_code: i32,
    pub(crate) message: Option<String>,
}

/// `ServerCheckResponse`: the id the server gave this connection.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ServerCheck {
    pub(crate) connection_id: Option<String>,
}

/// `QueryServiceResponse`, and the push (`NotifySubscriberRequest`) and
/// `SubscribeServiceResponse`, all of which carry a `serviceInfo`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct WithServiceInfo {
    pub(crate) service_info: ServiceInfo,
}

/// `ServiceListResponse`: one page of service names.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ServiceList {
    pub(crate) count: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub(crate) service_names: Vec<String>,
}

/// What a request from the server is answered with: its id.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ServerRequest {
    pub(crate) request_id: Option<String>,
}

/// `null` read as the type's default (Java servers write empty lists as `null`).
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_instance_reads_with_nulls_and_extra_fields() {
        let json = br#"{"serviceInfo":{"name":"seata-server","groupName":"DEFAULT_GROUP",
            "clusters":"","cacheMillis":10000,"hosts":[
              {"instanceId":"10.0.0.1#8091#default#DEFAULT_GROUP@@seata-server","ip":"10.0.0.1",
               "port":8091,"weight":2.0,"healthy":true,"enabled":true,"ephemeral":true,
               "clusterName":"default","serviceName":"DEFAULT_GROUP@@seata-server",
               "metadata":null,"instanceHeartBeatInterval":5000}
            ],"allIPs":false}}"#;
        let w: WithServiceInfo = serde_json::from_slice(json).unwrap();
        let h = &w.service_info.hosts[0];
        assert_eq!((h.ip.as_str(), h.port, h.weight), ("10.0.0.1", 8091, 2.0));
        assert_eq!(h.cluster_name.as_deref(), Some("default"));
        assert!(h.metadata.is_empty());
        let empty: WithServiceInfo =
            serde_json::from_slice(br#"{"serviceInfo":{"name":"s","hosts":null}}"#).unwrap();
        assert!(empty.service_info.hosts.is_empty());
    }

    #[test]
    fn a_registered_instance_is_written_as_nacos_reads_it() {
        let si = ServiceInstance {
            ip: "10.0.0.1".into(),
            port: 8091,
            cluster_name: Some("default".into()),
            ..Default::default()
        };
        let v = serde_json::to_value(&si).unwrap();
        assert_eq!(v["ip"], "10.0.0.1");
        assert_eq!(v["clusterName"], "default");
        assert_eq!(v["ephemeral"], true);
        assert_eq!(v["weight"], 1.0);
        assert!(v["metadata"].is_object());
    }
}

//! The rpc-client's keys, read from its parts of the configuration: `transport.*`,
//! `client.tm.*` and `client.rm.*` (`rm`).
//!
//! These keys are this crate's: registry-core keeps them raw
//! ([`Config::part`](meshline_registry_core::Config::part)), so adding a transport key
//! touches this file (and the option it sets) only. Seata's keys keep Seata's unit for
//! a bare number (milliseconds); keys only meshline has need a unit (`10s`, `500ms`).
//! Invalid values are errors naming the key, its origin and what was expected; keys
//! this crate does not know are reported (logged, by name only) when read, and Seata's
//! transport keys for its other parts (`transport.threadFactory.*`, the server's pools...)
//! are accepted without a warning.

use std::time::Duration;

use meshline_registry_core::config::SectionReader;
use meshline_registry_core::{Config, RegistryError};

use crate::Compressor;

mod hedge;
mod limits;
mod outlier;
mod rm;
mod slow_start;
mod tm;
pub use hedge::HedgeConfig;
pub use limits::LimitsConfig;
pub use outlier::OutlierConfig;
pub use rm::RmConfig;
pub use slow_start::SlowStartConfig;
pub use tm::TmConfig;

/// Seata's `transport.*` keys for its other parts (server pools, thread factory, its
/// own batching switches...): accepted without a warning, with no effect here.
const SEATA_TRANSPORT_OTHERS: &[&str] = &[
    "type",
    "server",
    "threadFactory",
    "shutdown",
    "enableTcServerBatchSendResponse",
    "rpcTimeout",
    "rpcTmClientBatchSendRequest",
    "minServerPoolSize",
    "maxServerPoolSize",
    "minBranchResultPoolSize",
    "maxBranchResultPoolSize",
    "maxTaskQueueSize",
    "keepAliveTime",
];

/// `transport.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportConfig {
    /// `transport.heartbeat`. Default `true`.
    pub heartbeat: bool,
    /// `transport.serialization`. Default `seata`.
    pub serialization: String,
    /// `transport.compressor`. Default `none`.
    pub compressor: String,
    /// `transport.protocol`: `seata` (RPC v1, the default) or `grpc` (Seata 2.3+'s
    /// gRPC transport, see [`crate::grpc`]), as written.
    pub protocol: String,
    /// `transport.rpcTmRequestTimeout`. Default 30000 ms.
    pub rpc_tm_request_timeout: Duration,
    /// `transport.rpcRmRequestTimeout`. Default 15000 ms.
    pub rpc_rm_request_timeout: Duration,
    /// `transport.rpcTcRequestTimeout`. Default 15000 ms.
    pub rpc_tc_request_timeout: Duration,
    /// `transport.enableTmClientBatchSendRequest`. Default `false`.
    pub enable_tm_client_batch_send_request: bool,
    /// `transport.enableRmClientBatchSendRequest`; when unset, Seata falls back to
    /// `transport.enableClientBatchSendRequest`, then `true`
    /// ([`rm_batch`](TransportConfig::rm_batch)).
    pub enable_rm_client_batch_send_request: Option<bool>,
    /// `transport.enableClientBatchSendRequest`: Seata's older key, the RM's fallback.
    pub enable_client_batch_send_request: Option<bool>,
    /// `transport.maxMergeSendMills` (ms when bare): how long a batching client holds
    /// requests back to merge more. Default 0: merge what is queued when the connection
    /// writes, without waiting (Seata's Java client waits a fixed 1 ms; meshline measured
    /// that wait halving transaction throughput, examples/tc/BENCHMARKS.md).
    pub max_merge_send_mills: Duration,
    /// `transport.maxFrameLength` (meshline): largest RPC frame, in bytes (`8MiB`,
    /// `65536`). `None`: the default (8 MiB, as Seata).
    pub max_frame_length: Option<usize>,
    /// `transport.requestQueueBytes` (meshline): bytes of requests queued per connection.
    pub request_queue_bytes: Option<usize>,
    /// `transport.responseQueueBytes` (meshline): bytes of answers queued per connection
    /// before a peer that does not read them is disconnected.
    pub response_queue_bytes: Option<usize>,
    /// `transport.writeTimeout` (meshline, a unit is required: `10s`): close a connection
    /// whose socket accepts nothing for this long; `0s` disables.
    pub write_timeout: Option<Duration>,
    /// `transport.maxInboundRequests` (meshline): requests from the peer handled at once
    /// per connection; at the cap the connection stops reading.
    pub max_inbound_requests: Option<usize>,
    /// `transport.heartbeatInterval` (meshline, a unit is required): PING after this long
    /// without writing. `None`: the default (1 s).
    pub heartbeat_interval: Option<Duration>,
    /// `transport.heartbeatTimeout` (meshline, unit required): close a connection that
    /// received nothing for this long. `None`: the default (3 s).
    pub heartbeat_timeout: Option<Duration>,
    /// `transport.probeAfter` (meshline, unit required): with answers due and no byte from
    /// the peer for this long, PING it; `0s` turns the probe off. `None`: default (250 ms).
    pub probe_after: Option<Duration>,
    /// `transport.probeTimeout` (meshline, unit required): close the connection when the
    /// probe PING gets no answer within this long. `None`: default (500 ms).
    pub probe_timeout: Option<Duration>,
    /// `transport.ejectAfterFailures` (meshline): eject an endpoint from picks after this
    /// many failures in a row (`0`: never). `None`: default (5).
    pub eject_after_failures: Option<u32>,
    /// `transport.ejectionTime` (meshline, unit required): the first ejection's length.
    /// `None`: default (1 s).
    pub ejection_time: Option<Duration>,
    /// The outlier-detection keys (meshline): `transport.outlierInterval`,
    /// `successRateStdevFactor`, `failurePercentageThreshold`, `maxEjectionPercent`...
    pub outlier: OutlierConfig,
    /// The call-limit keys (meshline): `transport.maxInFlight`,
    /// `transport.maxInFlightPerEndpoint`, `transport.breaker` and `transport.breaker*`.
    pub limits: LimitsConfig,
    /// The slow-start keys (meshline): `transport.slowStartWindow`,
    /// `transport.slowStartAggression`, `transport.slowStartMinWeightPercent`.
    pub slow_start: SlowStartConfig,
    /// The hedging keys (meshline): `transport.hedge`, `transport.hedgePercentile`.
    pub hedge: HedgeConfig,
    /// `transport.retryBudgetPercent` (meshline): retries allowed per call made, in
    /// percent, 0 to 1000. `None`: default (20).
    pub retry_budget_percent: Option<f32>,
    /// `transport.retryBudgetMinPerSecond` (meshline): retries allowed per second
    /// whatever the calls. `None`: default (10).
    pub retry_budget_min_per_second: Option<u32>,
    /// `transport.retryBudgetTtl` (meshline, unit required, 1 s to 60 s): how long a call
    /// counts toward the budget. `None`: default (10 s).
    pub retry_budget_ttl: Option<Duration>,
    /// `transport.maxConnectedMembers` (meshline): connect to at most this many members
    /// of a cluster (a stable random subset); `0` connects to every member. `None`: the
    /// default cap (64).
    pub max_connected_members: Option<usize>,
    /// `transport.apertureCoordinate` (meshline): `<index>/<count>`, this client's place
    /// among the clients of the cluster, for the deterministic aperture subset.
    pub aperture_coordinate: Option<crate::ApertureCoordinate>,
    /// The `transport.*` keys this crate does not know, one message each (by name and
    /// origin, never the value; also logged).
    pub warnings: Vec<String>,
    /// Seata `transport.*` keys present that meshline accepts without acting on them
    /// (its server's pools, Netty's threads...), one message each naming the key;
    /// logged once when a client is configured.
    pub inert: Vec<String>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            heartbeat: true,
            serialization: "seata".into(),
            compressor: "none".into(),
            protocol: "seata".into(),
            rpc_tm_request_timeout: Duration::from_millis(30000),
            rpc_rm_request_timeout: Duration::from_millis(15000),
            rpc_tc_request_timeout: Duration::from_millis(15000),
            enable_tm_client_batch_send_request: false,
            enable_rm_client_batch_send_request: None,
            enable_client_batch_send_request: None,
            max_merge_send_mills: Duration::ZERO,
            max_frame_length: None,
            request_queue_bytes: None,
            response_queue_bytes: None,
            write_timeout: None,
            max_inbound_requests: None,
            heartbeat_interval: None,
            heartbeat_timeout: None,
            probe_after: None,
            probe_timeout: None,
            eject_after_failures: None,
            ejection_time: None,
            outlier: OutlierConfig::default(),
            limits: LimitsConfig::default(),
            slow_start: SlowStartConfig::default(),
            hedge: HedgeConfig::default(),
            retry_budget_percent: None,
            retry_budget_min_per_second: None,
            retry_budget_ttl: None,
            max_connected_members: None,
            aperture_coordinate: None,
            inert: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

const MS: Duration = Duration::from_millis(1);

/// A duration that must not be zero.
pub(super) fn positive(
    r: &SectionReader<'_>,
    key: &str,
) -> Result<Option<Duration>, RegistryError> {
    let d = r.parse(key, |v| {
        let d = meshline_registry_core::config::parse_duration_with_unit(v)?;
        if d.is_zero() {
            Err("must be more than zero".into())
        } else {
            Ok(d)
        }
    })?;
    Ok(d)
}

/// `transport.serialization`: Seata's codec name, or (Seata 2.1+) a comma list whose
/// first entry is the codec requests are sent with: `seata` or `protobuf` (meshline
/// reads answers in either).
fn serialization(v: &str) -> Result<String, String> {
    let v = v.trim();
    if v.is_empty() {
        return Err("must not be empty".into());
    }
    let first = v.split(',').next().unwrap_or("").trim();
    if first.eq_ignore_ascii_case("seata") || first.eq_ignore_ascii_case("protobuf") {
        Ok(v.to_string())
    } else {
        Err(format!(
            "meshline's client sends the seata or the protobuf codec, not `{first}` (kryo, \
             hessian and fastjson2 bodies are refused by name); use `seata` or `protobuf`"
        ))
    }
}

/// The codec byte of `transport.serialization`'s first entry (as checked by
/// [`serialization`]).
pub(crate) fn serialization_codec(v: &str) -> u8 {
    let first = v.split(',').next().unwrap_or("").trim();
    if first.eq_ignore_ascii_case("protobuf") {
        crate::codec::CODEC_PROTOBUF
    } else {
        crate::codec::CODEC_SEATA
    }
}

/// `transport.protocol`: Seata's two client protocols (`Protocol.SEATA`, `Protocol.GRPC`).
fn protocol(v: &str) -> Result<String, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "seata" | "grpc" => Ok(v.trim().to_string()),
        other => Err(format!("expected seata or grpc, not `{other}`")),
    }
}

/// True when `transport.protocol` (as checked by [`protocol`]) names gRPC.
pub(crate) fn is_grpc(v: &str) -> bool {
    v.eq_ignore_ascii_case("grpc")
}

/// `transport.compressor`: one of Seata's compressor names (`CompressorType`); 7z is
/// refused (Seata removed it in 1.8.0 and no TC since reads it).
fn compressor(v: &str) -> Result<String, String> {
    let v = v.trim();
    match v.to_ascii_lowercase().as_str() {
        "" => Err("must not be empty".into()),
        "7z" | "sevenz" => {
            Err("7z is not supported: Seata removed it in 1.8.0; use zstd, gzip or lz4".into())
        }
        _ if Compressor::from_name(v).is_ok() => Ok(v.to_string()),
        _ => Err("expected none, gzip, zip, bzip2, lz4, deflater or zstd".into()),
    }
}

impl TransportConfig {
    /// The `transport.*` keys of `config`, validated (an invalid value is an error
    /// naming the key); keys this crate does not know are reported as unknown.
    pub fn from_config(config: &Config) -> Result<TransportConfig, RegistryError> {
        let d = TransportConfig::default();
        let part = config.part("transport");
        let r = part.reader();
        let t = TransportConfig {
            heartbeat: r.boolean("heartbeat", d.heartbeat)?,
            serialization: r
                .parse("serialization", serialization)?
                .unwrap_or(d.serialization),
            compressor: r.parse("compressor", compressor)?.unwrap_or(d.compressor),
            protocol: r.parse("protocol", protocol)?.unwrap_or(d.protocol),
            rpc_tm_request_timeout: r.seata_duration(
                "rpcTmRequestTimeout",
                MS,
                d.rpc_tm_request_timeout,
            )?,
            rpc_rm_request_timeout: r.seata_duration(
                "rpcRmRequestTimeout",
                MS,
                d.rpc_rm_request_timeout,
            )?,
            rpc_tc_request_timeout: r.seata_duration(
                "rpcTcRequestTimeout",
                MS,
                d.rpc_tc_request_timeout,
            )?,
            enable_tm_client_batch_send_request: r.boolean(
                "enableTmClientBatchSendRequest",
                d.enable_tm_client_batch_send_request,
            )?,
            enable_rm_client_batch_send_request: r
                .parse("enableRmClientBatchSendRequest", parse_bool)?,
            enable_client_batch_send_request: r
                .parse("enableClientBatchSendRequest", parse_bool)?,
            max_merge_send_mills: r.seata_duration(
                "maxMergeSendMills",
                MS,
                d.max_merge_send_mills,
            )?,
            max_frame_length: r.bytes("maxFrameLength")?,
            request_queue_bytes: r.bytes("requestQueueBytes")?,
            response_queue_bytes: r.bytes("responseQueueBytes")?,
            write_timeout: r.parse(
                "writeTimeout",
                meshline_registry_core::config::parse_duration_with_unit,
            )?,
            max_inbound_requests: r.parse("maxInboundRequests", |v| {
                match v.trim().parse::<usize>() {
                    Ok(0) => Err("must be at least 1".into()),
                    Ok(n) => Ok(n),
                    Err(_) => Err("expected a whole number in range for usize".into()),
                }
            })?,
            heartbeat_interval: positive(&r, "heartbeatInterval")?,
            heartbeat_timeout: positive(&r, "heartbeatTimeout")?,
            probe_after: r.parse(
                "probeAfter",
                meshline_registry_core::config::parse_duration_with_unit,
            )?,
            probe_timeout: positive(&r, "probeTimeout")?,
            eject_after_failures: r.optional_number("ejectAfterFailures")?,
            ejection_time: positive(&r, "ejectionTime")?,
            outlier: OutlierConfig::read(&r)?,
            limits: LimitsConfig::read(&r)?,
            slow_start: SlowStartConfig::read(&r)?,
            hedge: HedgeConfig::read(&r)?,
            retry_budget_percent: r.parse("retryBudgetPercent", |v| match v.trim().parse::<f32>() {
                Ok(p) if (0.0..=1000.0).contains(&p) => Ok(p),
                _ => Err("expected a percentage from 0 to 1000".into()),
            })?,
            retry_budget_min_per_second: r.optional_number("retryBudgetMinPerSecond")?,
            retry_budget_ttl: r.parse("retryBudgetTtl", |v| {
                let d = meshline_registry_core::config::parse_duration_with_unit(v)?;
                if (Duration::from_secs(1)..=Duration::from_secs(60)).contains(&d) {
                    Ok(d)
                } else {
                    Err("must be from 1s to 60s".into())
                }
            })?,
            max_connected_members: r.optional_number("maxConnectedMembers")?,
            aperture_coordinate: r.parse("apertureCoordinate", |v| v.parse())?,
            warnings: Vec::new(),
            inert: part
                .keys()
                .filter(|k| {
                    let seg = k.split('.').nth(1).unwrap_or("");
                    SEATA_TRANSPORT_OTHERS.iter().any(|o| o.eq_ignore_ascii_case(seg))
                })
                .map(|k| {
                    format!("{k}: accepted, no effect in meshline (a setting of Seata's server or of Netty)")
                })
                .collect(),
        };
        // Seata's other `enable*` switches are its own.
        let others: Vec<String> = part
            .keys()
            .filter_map(|k| k.split('.').nth(1))
            .filter(|k| k.to_ascii_lowercase().starts_with("enable"))
            .map(str::to_string)
            .collect();
        r.accept_prefixes(SEATA_TRANSPORT_OTHERS);
        r.accept_prefixes(&others.iter().map(String::as_str).collect::<Vec<_>>());
        Ok(TransportConfig {
            warnings: r.finish(),
            ..t
        })
    }

    /// Whether an RM batches its requests: `transport.enableRmClientBatchSendRequest`,
    /// else `transport.enableClientBatchSendRequest`, else `true` (Seata's RM).
    pub fn rm_batch(&self) -> bool {
        self.enable_rm_client_batch_send_request
            .or(self.enable_client_batch_send_request)
            .unwrap_or(true)
    }
}

/// Sets `target` to the value of a key that is present (`Some`) and leaves it as it is
/// otherwise: how every `apply` here lets an absent key keep the option's value.
pub(crate) fn set_present<T>(target: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *target = v;
    }
}

/// `true`/`yes`/`on`/`1` or `false`/`no`/`off`/`0`, any case.
pub(super) fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

/// A whole percentage, 0 to 100.
pub(super) fn percent(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(p) if p <= 100 => Ok(p),
        _ => Err("expected a whole percentage from 0 to 100".into()),
    }
}

#[cfg(test)]
mod tests;

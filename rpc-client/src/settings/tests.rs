//! The transport and TM keys: values checked, Seata's keys without effect named, and
//! unknown keys reported by name only.

use meshline_registry_core::config::{ConfigLoader, Format};

use super::*;

fn cfg(text: &str) -> Config {
    Config::from_text(text, Format::Properties).unwrap()
}

/// The transport keys in `text`, which must all be valid and known.
fn accepted(text: &str) -> TransportConfig {
    let t = TransportConfig::from_config(&cfg(text)).unwrap();
    assert!(t.warnings.is_empty(), "{text}: {:?}", t.warnings);
    t
}

/// `start` as `apply` leaves it with the transport keys in `text` (accepted).
fn applied<T>(text: &str, mut start: T, apply: impl FnOnce(&TransportConfig, &mut T)) -> T {
    apply(&accepted(text), &mut start);
    start
}

/// Each `(text, want)`: the transport keys in `text` are refused, with an error that
/// says `want`.
fn assert_refused(cases: &[(&str, &str)]) {
    for (text, want) in cases {
        let e = TransportConfig::from_config(&cfg(text))
            .expect_err(text)
            .to_string();
        assert!(e.contains(want), "{text}: `{e}` lacks `{want}`");
    }
}

/// `transport.compressor` and `transport.serialization` take Seata's values; anything
/// meshline cannot speak is an error naming the key, instead of a TC refusing
/// frames later.
#[test]
fn codec_and_compressor_values_are_checked() {
    let t = TransportConfig::from_config(&cfg(
        "transport.compressor=ZSTD\ntransport.serialization=seata,protobuf\n\
         transport.protocol=GRPC\n",
    ))
    .unwrap();
    assert_eq!(t.compressor, "ZSTD");
    assert_eq!(t.protocol, "GRPC");
    assert_eq!(
        crate::TransportOptions::from_config(&cfg("transport.protocol=GRPC"))
            .unwrap()
            .protocol,
        crate::Protocol::Grpc
    );
    assert!(
        t.inert.iter().all(|m| !m.contains("protocol")),
        "{:?}",
        t.inert
    );
    assert_eq!(t.serialization, "seata,protobuf");
    for (text, want) in [
        (
            "transport.compressor=7z",
            "key `transport.compressor` has invalid value `7z`: 7z is not supported: Seata removed it in 1.8.0",
        ),
        (
            "transport.compressor=snappy",
            "key `transport.compressor` has invalid value `snappy`: expected none, gzip, zip, bzip2, lz4, deflater or zstd",
        ),
        (
            "transport.serialization=kryo",
            "key `transport.serialization` has invalid value `kryo`: meshline's client sends the seata or the protobuf codec, not `kryo`",
        ),
        (
            "transport.serialization=hessian,seata",
            "meshline's client sends the seata or the protobuf codec, not `hessian`",
        ),
        (
            "transport.protocol=http2",
            "key `transport.protocol` has invalid value `http2`: expected seata or grpc, not `http2`",
        ),
        (
            "transport.heartbeat=maybe",
            "key `transport.heartbeat` has invalid value `maybe`",
        ),
    ] {
        let err = TransportConfig::from_config(&cfg(text))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// The TM's retry keys and the batching keys, with Seata's defaults and fallbacks.
#[test]
fn tm_retry_and_batching_keys() {
    let d = Config::default();
    let (tm, t) = (
        TmConfig::from_config(&d).unwrap(),
        TransportConfig::from_config(&d).unwrap(),
    );
    assert_eq!(tm, TmConfig::default());
    assert_eq!(tm.commit_retry_count, 5);
    assert_eq!(
        tm.default_global_transaction_timeout,
        Duration::from_secs(60)
    );
    assert_eq!(t, TransportConfig::default());
    assert!(t.rm_batch());
    assert!(!t.enable_tm_client_batch_send_request);
    assert!(t.max_merge_send_mills.is_zero());
    let c = cfg(
        "client.tm.commitRetryCount=2\nclient.tm.rollbackRetryCount=0\n\
                 client.tm.defaultGlobalTransactionTimeout=3000\nclient.tm.degradeCheck=true\n\
                 transport.enableClientBatchSendRequest=false\ntransport.maxMergeSendMills=2\n",
    );
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let (tm, t) = (
        TmConfig::from_config(&c).unwrap(),
        TransportConfig::from_config(&c).unwrap(),
    );
    assert!(tm.warnings.is_empty() && t.warnings.is_empty());
    assert_eq!(tm.commit_retry_count, 2);
    assert_eq!(tm.rollback_retry_count, 5, "0 or less means 5, as in Java");
    assert_eq!(
        tm.default_global_transaction_timeout,
        Duration::from_secs(3)
    );
    assert!(!t.rm_batch(), "the RM falls back to the older key");
    assert_eq!(
        t.max_merge_send_mills,
        Duration::from_millis(2),
        "a bare number is milliseconds"
    );
    let c = cfg("transport.enableClientBatchSendRequest=false\n\
                 transport.enableRmClientBatchSendRequest=true\n");
    assert!(
        TransportConfig::from_config(&c).unwrap().rm_batch(),
        "the RM's own key wins"
    );
    let e = TmConfig::from_config(&cfg("client.tm.commitRetryCount=many\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key `client.tm.commitRetryCount` has invalid value `many`"),
        "{e}"
    );
}

#[test]
fn transport_limits_from_keys() {
    let t = TransportConfig::from_config(&cfg(
        "transport.maxFrameLength=1MiB\ntransport.requestQueueBytes=65536\n\
         transport.responseQueueBytes=2m\ntransport.writeTimeout=3s\n\
         transport.maxInboundRequests=64\ntransport.maxConnectedMembers=8\n\
         transport.rpcTmRequestTimeout=5000\n",
    ))
    .unwrap();
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert_eq!(t.max_frame_length, Some(1 << 20));
    assert_eq!(t.request_queue_bytes, Some(65536));
    assert_eq!(t.response_queue_bytes, Some(2 << 20));
    assert_eq!(t.write_timeout, Some(Duration::from_secs(3)));
    assert_eq!(t.max_inbound_requests, Some(64));
    assert_eq!(t.max_connected_members, Some(8));
    // A Seata key counts Seata's unit (milliseconds).
    assert_eq!(t.rpc_tm_request_timeout, Duration::from_millis(5000));
    let y = Config::from_text(
        "transport:\n  max-frame-length: 64KiB\n  write-timeout: 0s\n  max-connected-members: 0\n",
        Format::Yaml,
    )
    .unwrap();
    let t = TransportConfig::from_config(&y).unwrap();
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert_eq!(t.max_frame_length, Some(64 << 10));
    assert_eq!(t.write_timeout, Some(Duration::ZERO));
    assert_eq!(t.max_connected_members, Some(0));
    // The environment wins over the file, as for every key.
    let e = ConfigLoader::new()
        .text("transport.maxFrameLength=1MiB\n", Format::Properties)
        .env_vars([("MESHLINE_TRANSPORT__MAX_FRAME_LENGTH", "2MiB")])
        .load()
        .unwrap();
    assert_eq!(
        TransportConfig::from_config(&e).unwrap().max_frame_length,
        Some(2 << 20)
    );
}

#[test]
fn transport_limits_refuse_bad_values() {
    for (text, want) in [
        ("transport.writeTimeout=10", "has no unit"),
        ("transport.maxFrameLength=8 parsecs", "unknown size unit"),
        ("transport.maxFrameLength=0", "larger than 0"),
        (
            "transport.requestQueueBytes=99999999999999999999G",
            "size like",
        ),
        ("transport.responseQueueBytes=17179869184G", "too large"),
        ("transport.maxInboundRequests=0", "at least 1"),
        ("transport.maxConnectedMembers=many", "whole number"),
        ("transport.heartbeatInterval=0s", "must be more than zero"),
    ] {
        let e = TransportConfig::from_config(&cfg(text))
            .expect_err(text)
            .to_string();
        assert!(e.contains(want), "{text}: `{e}` lacks `{want}`");
        assert!(e.contains("config text: key `transport."), "{e}");
    }
}

/// The call-limit keys: caps (`0`: none), the breaker turned on by `transport.breaker`
/// with its settings, and bad values refused naming the key.
#[test]
fn call_limit_keys() {
    use crate::limits::{BreakerSettings, CallLimits};
    let apply = |text: &str| applied(text, CallLimits::default(), |t, l| t.limits.apply(l));
    assert_eq!(apply(""), CallLimits::default());
    let l = apply("transport.maxInFlight=100\ntransport.maxInFlightPerEndpoint=8\n");
    assert_eq!(
        (l.max_in_flight, l.max_in_flight_per_endpoint),
        (Some(100), Some(8))
    );
    assert_eq!(l.breaker, None, "the breaker is off unless asked for");
    let l = apply("transport.maxInFlight=0\ntransport.breakerProbes=9\n");
    assert_eq!((l.max_in_flight, l.breaker), (None, None));
    let l = apply(
        "transport.breaker=true\ntransport.breakerWindow=30s\ntransport.breakerMinRequests=50\n\
         transport.breakerFailureRatio=0.25\ntransport.breakerCoolDown=2s\ntransport.breakerProbes=1\n",
    );
    assert_eq!(
        l.breaker,
        Some(BreakerSettings {
            window: Duration::from_secs(30),
            min_requests: 50,
            failure_ratio: 0.25,
            cool_down: Duration::from_secs(2),
            probes: 1,
        })
    );
    assert_eq!(
        apply("transport.breaker=on\n").breaker,
        Some(BreakerSettings::default())
    );
    assert_refused(&[
        ("transport.maxInFlight=-1", "transport.maxInFlight"),
        ("transport.breaker=maybe", "true or false"),
        (
            "transport.breakerFailureRatio=0",
            "more than 0 and at most 1",
        ),
        (
            "transport.breakerFailureRatio=1.5",
            "more than 0 and at most 1",
        ),
        ("transport.breakerProbes=0", "at least 1"),
        ("transport.breakerCoolDown=5", "has no unit"),
        ("transport.breakerWindow=0s", "must be more than zero"),
    ]);
}

/// The slow-start keys: a window turns it on with Envoy's defaults, `0s` turns it off,
/// the ramp's shape without a window changes nothing, bad values name the key.
#[test]
fn slow_start_keys() {
    use crate::SlowStart;
    let apply = |text: &str| applied(text, None, |t, s| t.slow_start.apply(s));
    assert_eq!(apply(""), None);
    assert_eq!(apply("transport.slowStartAggression=2\n"), None);
    assert_eq!(
        apply("transport.slowStartWindow=30s\n"),
        Some(SlowStart::over(Duration::from_secs(30)))
    );
    assert_eq!(
        apply(
            "transport.slowStartWindow=10s\ntransport.slowStartAggression=1.5\n\
             transport.slowStartMinWeightPercent=25\n"
        ),
        Some(SlowStart {
            window: Duration::from_secs(10),
            aggression: 1.5,
            min_weight_percent: 25,
        })
    );
    assert_eq!(apply("transport.slowStartWindow=0s\n"), None);
    assert_refused(&[
        ("transport.slowStartWindow=30", "has no unit"),
        ("transport.slowStartAggression=0", "more than 0"),
        ("transport.slowStartMinWeightPercent=101", "from 0 to 100"),
    ]);
}

/// The hedging keys: off unless `transport.hedge=true`; the percentile shapes hedging
/// that is on; bad values name the key.
#[test]
fn hedge_keys() {
    use crate::Hedging;
    let apply = |text: &str| applied(text, None, |t, h| t.hedge.apply(h));
    assert_eq!(apply(""), None);
    assert_eq!(apply("transport.hedgePercentile=99\n"), None);
    assert_eq!(apply("transport.hedge=true\n"), Some(Hedging::default()));
    let h = apply("transport.hedge=true\ntransport.hedgePercentile=99.5\n").unwrap();
    assert_eq!(h.percentile, 99.5);
    assert_refused(&[
        ("transport.hedge=sometimes", "true or false"),
        ("transport.hedgePercentile=100", "less than 100"),
        ("transport.hedgePercentile=0", "more than 0"),
    ]);
}

/// Seata's transport keys for its other parts are quiet; a key nobody knows is
/// reported by name, never by value, with the nearest key this crate reads.
/// Seata's server and Netty keys in a client's file are accepted without effect,
/// and named so (a stock client file.conf carries several).
#[test]
fn seata_transport_keys_without_effect_are_named() {
    let t = TransportConfig::from_config(&cfg(
        "transport.type=TCP\ntransport.threadFactory.bossThreadPrefix=NettyBoss\n\
         transport.heartbeat=true\n",
    ))
    .unwrap();
    assert_eq!(t.inert.len(), 2, "{:?}", t.inert);
    assert!(
        t.inert
            .iter()
            .any(|m| m
                .starts_with("transport.threadFactory.bossThreadPrefix: accepted, no effect")),
        "{:?}",
        t.inert
    );
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn unknown_transport_keys_are_reported_by_name_only() {
    let t = TransportConfig::from_config(&cfg(
        "transport.type=TCP\ntransport.threadFactory.bossThreadPrefix=NettyBoss\n\
         transport.enableTmClientChannelCheckFailFast=true\ntransport.minServerPoolSize=10\n\
         transport.shutdown.wait=3\n",
    ))
    .unwrap();
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    let t = TransportConfig::from_config(&cfg(
        "transport.pasword=Zq9-very-secret\ntransport.heartbeatIntervl=1s\n",
    ))
    .unwrap();
    assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
    assert!(
        t.warnings.iter().all(|w| !w.contains("Zq9")),
        "{:?}",
        t.warnings
    );
    assert!(
        t.warnings
            .iter()
            .any(|w| w.contains("`transport.heartbeatIntervl`")
                && w.contains("did you mean `heartbeatInterval`")),
        "{:?}",
        t.warnings
    );
}

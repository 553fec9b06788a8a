//! The heartbeat that keeps a Nacos 1.x registration alive.
//!
//! Nacos 1.x holds an ephemeral instance for as long as beats come: a server marks it
//! unhealthy after 15 s without one and removes it after 30 s. As the 1.x Java client
//! does (`BeatReactor`): the first beat carries the whole instance (`beat=<JSON>` in
//! the form), the server's answer sets the next interval (`clientBeatInterval`) and
//! whether later beats may be light (`lightBeatEnabled`, no body); an answer of
//! `code 20404` (the server does not know the instance: it restarted, or expired it
//! while this process was stalled) registers the instance again at once.
//!
//! A beat that fails (the server is down) is retried at the next interval; the
//! registration comes back with the first beat the server answers. The task ends when
//! the instance is deregistered or the client dropped.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::call::{Caller, Request};
use super::{grouped, instance_params, register_request};
use crate::grpc::ServiceInstance;

/// Nacos' default beat interval (`Constants.DEFAULT_HEART_BEAT_INTERVAL`).
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The metadata key that sets an instance's beat interval in milliseconds.
const INTERVAL_KEY: &str = "preserved.heart.beat.interval";
/// `NamingResponseCode.RESOURCE_NOT_FOUND`: the server does not know the instance.
const NOT_FOUND: i64 = 20404;
/// Bounds on an interval a server or the metadata asks for: a beat at least every 15 s
/// (a 1.x server marks an instance unhealthy after 15 s without one) and at most every
/// 500 ms.
const INTERVAL_BOUNDS: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(15));

/// What a beat is answered with.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct BeatAnswer {
    client_beat_interval: i64,
    code: i64,
    light_beat_enabled: bool,
}

/// The interval `si`'s metadata asks for, else Nacos' default.
pub(crate) fn interval_of(si: &ServiceInstance) -> Duration {
    si.metadata
        .get(INTERVAL_KEY)
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_INTERVAL)
        .clamp(INTERVAL_BOUNDS.0, INTERVAL_BOUNDS.1)
}

/// Beats for `si` of `service` in `group` until `stop`.
pub(crate) async fn run(
    caller: Arc<Caller>,
    group: String,
    service: String,
    si: ServiceInstance,
    stop: CancellationToken,
) {
    let mut interval = interval_of(&si);
    let mut light = false;
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let req = beat_request(&group, &service, &si, interval, light);
        let answer = tokio::select! {
            _ = stop.cancelled() => return,
            a = caller.send(&req) => a,
        };
        let answer = match answer {
            Ok(body) => body,
            Err(e) => {
                if !failing {
                    tracing::warn!(registry = "nacos", ip = %si.ip, port = si.port, error = %e, "nacos beat failed; retrying at the next interval");
                }
                failing = true;
                // The server may have lost the instance meanwhile: the next beat is
                // whole, so that a server that re-creates from a beat can.
                light = false;
                continue;
            }
        };
        if failing {
            tracing::info!(registry = "nacos", ip = %si.ip, port = si.port, "nacos beat answered again");
            failing = false;
        }
        let a: BeatAnswer = match serde_json::from_slice(&answer) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(registry = "nacos", error = %e, "nacos beat answer unreadable; beating on");
                continue;
            }
        };
        if a.client_beat_interval > 0 {
            interval = Duration::from_millis(a.client_beat_interval as u64)
                .clamp(INTERVAL_BOUNDS.0, INTERVAL_BOUNDS.1);
        }
        light = a.light_beat_enabled;
        if a.code == NOT_FOUND {
            tracing::warn!(registry = "nacos", ip = %si.ip, port = si.port, "the nacos server does not know this instance (restarted, or expired it): registering it again");
            let again = register_request(&group, &service, &si);
            tokio::select! {
                _ = stop.cancelled() => return,
                r = caller.send(&again) => if let Err(e) = r {
                    tracing::warn!(registry = "nacos", error = %e, "registering again failed; the next beat tries again");
                    light = false;
                },
            }
        }
    }
}

/// `PUT instance/beat`: the instance in the query, and its whole description in the
/// form unless the server allowed light beats.
fn beat_request<'a>(
    group: &'a str,
    service: &'a str,
    si: &ServiceInstance,
    interval: Duration,
    light: bool,
) -> Request<'a> {
    let grouped = grouped(group, service);
    let cluster = si.cluster_name.clone().unwrap_or_default();
    let form = (!light).then(|| {
        let beat = json!({
            "port": si.port, "ip": si.ip, "weight": si.weight, "serviceName": grouped,
            "cluster": cluster, "metadata": si.metadata, "scheduled": false,
            "period": interval.as_millis() as u64, "stopped": false,
        });
        vec![("beat", beat.to_string())]
    });
    Request {
        method: Method::PUT,
        path: "ns/instance/beat",
        query: instance_params(group, service, si),
        form,
        group,
        service,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_comes_from_the_metadata_within_bounds() {
        let mut si = ServiceInstance::default();
        assert_eq!(interval_of(&si), DEFAULT_INTERVAL);
        si.metadata.insert(INTERVAL_KEY.into(), "2000".into());
        assert_eq!(interval_of(&si), Duration::from_secs(2));
        si.metadata.insert(INTERVAL_KEY.into(), "1".into());
        assert_eq!(interval_of(&si), INTERVAL_BOUNDS.0);
        si.metadata
            .insert(INTERVAL_KEY.into(), "not a number".into());
        assert_eq!(interval_of(&si), DEFAULT_INTERVAL);
    }

    #[test]
    fn a_whole_beat_carries_the_instance_and_a_light_one_nothing() {
        let si = ServiceInstance {
            ip: "10.0.0.1".into(),
            port: 8091,
            cluster_name: Some("default".into()),
            ..Default::default()
        };
        let whole = beat_request("G", "s", &si, DEFAULT_INTERVAL, false);
        assert_eq!(whole.path, "ns/instance/beat");
        assert!(whole.query.contains(&("serviceName", "G@@s".to_string())));
        assert!(
            whole
                .query
                .contains(&("clusterName", "default".to_string()))
        );
        let form = whole.form.unwrap();
        let beat: serde_json::Value = serde_json::from_str(&form[0].1).unwrap();
        assert_eq!(form[0].0, "beat");
        assert_eq!(beat["ip"], "10.0.0.1");
        assert_eq!(beat["port"], 8091);
        assert_eq!(beat["cluster"], "default");
        assert_eq!(beat["serviceName"], "G@@s");
        assert_eq!(beat["period"], 5000);
        assert!(
            beat_request("G", "s", &si, DEFAULT_INTERVAL, true)
                .form
                .is_none()
        );
    }

    #[test]
    fn answers_read_with_missing_fields() {
        let a: BeatAnswer = serde_json::from_slice(
            br#"{"clientBeatInterval":5000,"code":10200,"lightBeatEnabled":true}"#,
        )
        .unwrap();
        assert_eq!(
            (a.client_beat_interval, a.code, a.light_beat_enabled),
            (5000, 10200, true)
        );
        let b: BeatAnswer = serde_json::from_slice(br#"{"code":20404}"#).unwrap();
        assert_eq!((b.client_beat_interval, b.code), (0, NOT_FOUND));
    }
}

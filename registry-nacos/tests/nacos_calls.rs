//! Which Nacos call registers our instances, against rnacos: one instance goes
//! with the single-instance call (Nacos servers before 2.1.1 have no batch call),
//! several with the batch call, and each step is visible to another client.
//!
//! Our naming client opens a tracing span named after each naming call
//! (`#[instrument]` on its `register`, `deregister` and `batch_register`, named
//! `register_instance`, `deregister_instance`, `batch_register_instance`, in
//! `src/grpc/client.rs`); a process-wide layer records their names. A test binary of its own, so that no other test's calls are recorded.
//! The two-instance step shows the capture does see batch calls, so the single-call
//! assertions cannot pass for want of a capture.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Instance, RegistryService};
use meshline_registry_nacos::NacosRegistry;
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{addrs, wait_for};
use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

const WITHIN: Duration = Duration::from_secs(10);

/// The names of the client's registration spans, in the order they were opened.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<&'static str>>>);

impl Calls {
    /// The calls since the last `take`.
    fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl<S: Subscriber> Layer<S> for Calls {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let m = attrs.metadata();
        if m.target().starts_with("meshline_registry_nacos")
            && matches!(
                m.name(),
                "register_instance" | "deregister_instance" | "batch_register_instance"
            )
        {
            self.0.lock().unwrap().push(m.name());
        }
    }
}

fn config(server: &Rnacos) -> Config {
    ConfigLoader::new()
        .set("registry.type", "nacos")
        .set("registry.nacos.serverAddr", server.http_addr())
        .set("registry.nacos.grpcPort", server.grpc_port().to_string())
        // The reader must see an unregister of the last instance as an empty list.
        .set("registry.empty-protection", "false")
        .load()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_uses_the_single_call_several_the_batch() {
    let calls = Calls::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(calls.clone()))
        .expect("the only subscriber of this test binary");

    let server = Rnacos::start().expect("start rnacos");
    let writer = NacosRegistry::connect(&config(&server)).await.unwrap();
    let reader = NacosRegistry::connect(&config(&server)).await.unwrap();
    let mut w = reader.watch("default").await.unwrap();
    assert!(w.next().await.unwrap().is_empty());
    calls.take();

    let a = Instance::parse("10.4.0.1:8091").unwrap().with_weight(2);
    let b = Instance::parse("10.4.0.2:8091").unwrap();

    // One instance: the single call, seen by another client, with its weight.
    writer.register("default", &a).await.unwrap();
    assert_eq!(calls.take(), ["register_instance"]);
    let s = wait_for(&mut w, WITHIN, "the single registration", |s| {
        addrs(s) == ["10.4.0.1:8091"]
    })
    .await;
    assert_eq!(s.instances()[0].weight(), 2);

    // Its unregister: the single call, and it is gone for the other client.
    writer.unregister("default", &a).await.unwrap();
    assert_eq!(calls.take(), ["deregister_instance"]);
    wait_for(&mut w, WITHIN, "the unregister", |s| s.is_empty()).await;

    // 1 -> 2: the single registration is dropped (its replay after a reconnect would
    // overwrite the batch on a Java server), then both go as one batch.
    writer.register("default", &a).await.unwrap();
    assert_eq!(calls.take(), ["register_instance"]);
    writer.register("default", &b).await.unwrap();
    assert_eq!(
        calls.take(),
        ["deregister_instance", "batch_register_instance"]
    );
    wait_for(&mut w, WITHIN, "both instances", |s| {
        addrs(s) == ["10.4.0.1:8091", "10.4.0.2:8091"]
    })
    .await;

    // 2 -> 1: once batched, the rest goes as a batch (nacos-sdk replays the last batch
    // after a reconnect and cannot forget it, so it must stay exact).
    writer.unregister("default", &b).await.unwrap();
    assert_eq!(
        calls.take(),
        ["deregister_instance", "batch_register_instance"]
    );
    wait_for(&mut w, WITHIN, "one instance left", |s| {
        addrs(s) == ["10.4.0.1:8091"]
    })
    .await;

    writer.close().await.unwrap();
    assert_eq!(calls.take(), ["deregister_instance"]);
    wait_for(&mut w, WITHIN, "closed", |s| s.is_empty()).await;
    reader.close().await.unwrap();
}

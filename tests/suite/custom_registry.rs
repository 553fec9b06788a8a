//! `registry.type=custom` + `registry.custom.name`: a backend defined here, in a few
//! lines on registry-core's `Lifecycle`, added to the table at run time (Seata's SPI).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use meshline::core::Lifecycle;
use meshline::registry::{from_config, register_custom};
use meshline::{Config, ConfigLoader, Instance, RegistryError, RegistryService, Watch};

/// Members kept in memory; what a real backend would write to its server.
struct MemoryRegistry {
    life: Lifecycle,
    members: Arc<Mutex<BTreeMap<String, Vec<Instance>>>>,
    /// From its own section: `registry.custom.prefix` (shows the section reaches it).
    prefix: String,
}

impl MemoryRegistry {
    fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let section = config.registry.section(&["custom"]);
        let r = section.reader();
        r.accept(&["name"]);
        let prefix = r.text("prefix", "")?;
        r.finish();
        Ok(MemoryRegistry {
            life: Lifecycle::new(
                "memory",
                meshline::core::EmptyProtection::of(&config.registry),
            ),
            members: Arc::default(),
            prefix,
        })
    }

    fn list(&self, cluster: &str) -> Vec<Instance> {
        let key = format!("{}{cluster}", self.prefix);
        self.members
            .lock()
            .unwrap()
            .get(&key)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait]
impl RegistryService for MemoryRegistry {
    fn kind(&self) -> &'static str {
        "memory"
    }
    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.life.check_open()?;
        let key = format!("{}{cluster}", self.prefix);
        let list = {
            let mut m = self.members.lock().unwrap();
            let list = m.entry(key).or_default();
            list.push(instance.clone());
            list.clone()
        };
        self.life.hub().publish(cluster, list);
        Ok(())
    }
    async fn unregister(&self, _cluster: &str, _instance: &Instance) -> Result<(), RegistryError> {
        self.life.check_open()
    }
    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.life.check_open()?;
        Ok(self.list(cluster))
    }
    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let first = self.list(cluster);
        self.life
            .watch(
                cluster,
                || async move { Ok((first, ())) },
                |(), scope| async move { scope.stopped().await },
            )
            .await
    }
    async fn close(&self) -> Result<(), RegistryError> {
        self.life.close(async { Ok(()) }).await
    }
}

#[tokio::test]
async fn a_custom_registry_is_built_by_name() {
    register_custom("memory", |config| {
        Box::pin(async move {
            Ok(Arc::new(MemoryRegistry::from_config(config)?) as Arc<dyn RegistryService>)
        })
    })
    .unwrap();
    // Seata's spelling.
    let config = ConfigLoader::new()
        .set("registry.type", "custom")
        .set("registry.custom.name", "Memory")
        .set("registry.custom.prefix", "p-")
        .load()
        .unwrap();
    let registry = from_config(&config).await.unwrap();
    assert_eq!(registry.kind(), "memory");
    let mut watch = registry.watch("default").await.unwrap();
    assert!(watch.next().await.unwrap().is_empty());
    let i = Instance::parse("10.0.0.1:8091").unwrap();
    registry.register("default", &i).await.unwrap();
    assert_eq!(
        watch.next().await.unwrap().instances()[..],
        *std::slice::from_ref(&i)
    );
    assert_eq!(registry.lookup("default").await.unwrap(), vec![i]);
    registry.close().await.unwrap();
    assert!(matches!(
        watch.next().await,
        Err(RegistryError::Closed { .. })
    ));
    // The name as the type works too.
    let config = ConfigLoader::new()
        .set("registry.type", "memory")
        .load()
        .unwrap();
    assert_eq!(from_config(&config).await.unwrap().kind(), "memory");
}

#[tokio::test]
async fn custom_without_a_name_or_with_an_unknown_one_says_what_to_do() {
    let config = ConfigLoader::new()
        .set("registry.type", "custom")
        .load()
        .unwrap();
    let e = from_config(&config).await.err().unwrap().to_string();
    assert!(e.contains("registry.custom.name"), "{e}");
    let config = ConfigLoader::new()
        .set("registry.type", "custom")
        .set("registry.custom.name", "nowhere")
        .load()
        .unwrap();
    let e = from_config(&config).await.err().unwrap().to_string();
    assert!(
        e.contains("`nowhere`") && e.contains("no custom registry"),
        "{e}"
    );
    // A built-in name cannot be taken over.
    let taken = register_custom("etcd", |_| {
        Box::pin(async { Err(RegistryError::Closed { kind: "x" }) })
    });
    assert!(taken.is_err());
}

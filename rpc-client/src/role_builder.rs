//! What the TM and RM builders share: the TCs' source, the registration's fields, the
//! balancer and client options. Written once as [`Common`] and a macro that gives both
//! builders the same methods.

use std::time::Duration;

use meshline_registry_core::Config;

use crate::client::{RpcClient, RpcClientBuilder};

/// The version meshline registers with: the Seata release whose wire format (codes,
/// batching answers) it speaks. A TC answers merged requests with BatchResultMessages
/// only for clients of 1.5.0 or later that ask; meshline reads both kinds.
pub const SEATA_VERSION: &str = "2.3.0";

/// The builder state both roles have.
#[derive(Debug)]
pub(crate) struct Common {
    pub rpc: RpcClientBuilder,
    pub version: String,
    pub application_id: String,
    pub group: String,
    pub extra_data: Option<String>,
    pub registration_timeout: Option<Duration>,
    /// An invalid key of the role's own (`client.tm.*`), reported by `build`.
    pub config_error: Option<String>,
}

impl Common {
    pub fn new() -> Self {
        let config = Config::default();
        Common {
            rpc: RpcClient::builder(),
            version: SEATA_VERSION.into(),
            application_id: config.application_id,
            group: config.tx_service_group,
            extra_data: None,
            registration_timeout: None,
            config_error: None,
        }
    }

    /// The keys every role reads: the balancer, `transport.*`, `applicationId`,
    /// `txServiceGroup`.
    pub fn config(&mut self, config: &Config) {
        let rpc = std::mem::replace(&mut self.rpc, RpcClient::builder());
        self.rpc = rpc.config(config);
        self.application_id = config.application_id.clone();
        self.group = config.tx_service_group.clone();
    }
}

/// The methods [`TmBuilder`](crate::tm::TmBuilder) and
/// [`RmBuilder`](crate::rm::RmBuilder) share; each has a `common: Common` field.
macro_rules! common_builder_methods {
    () => {
        /// Finds the TCs of `tx_service_group` through `discovery` (and registers with
        /// that group).
        pub fn discovery(
            mut self,
            discovery: meshline_registry_core::Discovery,
            tx_service_group: impl Into<String>,
        ) -> Self {
            let group = tx_service_group.into();
            self.common.group = group.clone();
            self.common.rpc = self.common.rpc.discovery(discovery, group);
            self
        }

        /// Follows `watch` directly; `name` labels logs and errors (set the registered
        /// group with [`transaction_service_group`](Self::transaction_service_group)).
        pub fn watch(
            mut self,
            watch: meshline_registry_core::Watch,
            name: impl Into<String>,
        ) -> Self {
            self.common.rpc = self.common.rpc.watch(watch, name);
            self
        }

        /// The `applicationId` registered (default: the configuration's).
        pub fn application_id(mut self, id: impl Into<String>) -> Self {
            self.common.application_id = id.into();
            self
        }

        /// The `transactionServiceGroup` registered (default: the configuration's, or the
        /// group given to [`discovery`](Self::discovery)).
        pub fn transaction_service_group(mut self, group: impl Into<String>) -> Self {
            self.common.group = group.into();
            self
        }

        /// The version registered (default
        /// [`SEATA_VERSION`](crate::role_builder::SEATA_VERSION)).
        pub fn version(mut self, version: impl Into<String>) -> Self {
            self.common.version = version.into();
            self
        }

        /// The registration's `extraData` (Java: `ak=..\ndigest=..\n...`).
        pub fn extra_data(mut self, extra: impl Into<String>) -> Self {
            self.common.extra_data = Some(extra.into());
            self
        }

        /// How long each connection's registration waits for the TC (Java: 30 s for a
        /// TM, 15 s for an RM).
        pub fn registration_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.common.registration_timeout = Some(timeout);
            self
        }

        /// The balancer by name (`XID`, `RoundRobinLoadBalance`...).
        pub fn load_balance_name(mut self, name: &str) -> Self {
            self.common.rpc = self.common.rpc.load_balance_name(name);
            self
        }

        /// The balancer.
        pub fn load_balance(
            mut self,
            lb: std::sync::Arc<dyn meshline_loadbalance::LoadBalance>,
        ) -> Self {
            self.common.rpc = self.common.rpc.load_balance(lb);
            self
        }

        /// Changes the client's options (timeouts, transport, batching) in place.
        pub fn configure(mut self, f: impl FnOnce(&mut crate::client::ClientOptions)) -> Self {
            self.common.rpc = self.common.rpc.configure(f);
            self
        }
    };
}

pub(crate) use common_builder_methods;

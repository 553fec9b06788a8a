//! [`RpcClientBuilder`]: where the endpoints come from, how to pick among them, what
//! to run on each new connection, and the options.

use std::sync::{Arc, Mutex};

use meshline_loadbalance::{Balancer, LoadBalance};
use meshline_registry_core::{Config, Discovery, Watch};
use tracing::Instrument;

use super::membership::{Membership, follow};
use super::options::ClientOptions;
use super::{Handle, RpcClient};
use crate::connection::InboundHandler;
use crate::error::RpcError;
use crate::handshake::Handshake;

/// How a call source is given to the builder.
enum Source {
    Discovery(Discovery, String),
    Watch(Watch, String),
}

/// Builds an [`RpcClient`].
pub struct RpcClientBuilder {
    source: Option<Source>,
    load_balance: Option<Arc<dyn LoadBalance>>,
    lb_error: Option<String>,
    /// An invalid key met by [`config`](Self::config), reported by `build`.
    config_error: Option<String>,
    handshake: Option<Arc<dyn Handshake>>,
    inbound: Option<Arc<dyn InboundHandler>>,
    options: ClientOptions,
}

impl std::fmt::Debug for RpcClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClientBuilder")
            .field("options", &self.options)
            .field(
                "load_balance",
                &self.load_balance.as_ref().map(|l| l.name().to_string()),
            )
            .finish()
    }
}

impl RpcClientBuilder {
    pub(super) fn new() -> Self {
        RpcClientBuilder {
            source: None,
            load_balance: None,
            lb_error: None,
            config_error: None,
            handshake: None,
            inbound: None,
            options: ClientOptions::default(),
        }
    }

    /// Follow the cluster that `tx_service_group` maps to in `discovery`.
    pub fn discovery(mut self, discovery: Discovery, tx_service_group: impl Into<String>) -> Self {
        self.source = Some(Source::Discovery(discovery, tx_service_group.into()));
        self
    }

    /// Follow `watch` directly; `name` labels logs, errors and metrics.
    pub fn watch(mut self, watch: Watch, name: impl Into<String>) -> Self {
        self.source = Some(Source::Watch(watch, name.into()));
        self
    }

    /// The load-balancing algorithm (required, or set through [`config`](Self::config)
    /// or [`load_balance_name`](Self::load_balance_name)).
    pub fn load_balance(mut self, lb: Arc<dyn LoadBalance>) -> Self {
        self.load_balance = Some(lb);
        self.lb_error = None;
        self
    }

    /// The load-balancing algorithm by its Seata / meshline name (`XID`,
    /// `RandomLoadBalance`, ...). An unknown name makes [`build`](Self::build) fail.
    pub fn load_balance_name(mut self, name: &str) -> Self {
        match meshline_loadbalance::by_name(name) {
            Ok(lb) => {
                self.load_balance = Some(lb);
                self.lb_error = None;
            }
            Err(e) => self.lb_error = Some(e.to_string()),
        }
        self
    }

    /// Applies `config`: `client.loadBalance.type` / `virtualNodes`,
    /// `transport.heartbeat`, `transport.rpcTmRequestTimeout` and the `transport.*`
    /// limits it sets. Options set earlier on the builder that the config does not
    /// carry are kept; for the keys it carries, the later call wins. An invalid value
    /// is reported by [`build`](Self::build), naming the key.
    pub fn config(mut self, config: &Config) -> Self {
        self.config_error = match crate::TransportConfig::from_config(config) {
            Ok(t) => {
                self.options.apply_transport(&t);
                // Once, as the client is configured: the Seata keys it does not act on.
                for inert in &t.inert {
                    tracing::info!("{inert}");
                }
                None
            }
            Err(e) => Some(e.to_string()),
        };
        let lb = meshline_registry_core::config::balancer::LoadBalanceConfig::from_config(config)
            .map_err(|e| e.to_string())
            .and_then(|c| {
                meshline_loadbalance::from_seata_keys(&c.kind, c.virtual_nodes)
                    .map_err(|e| e.to_string())
            });
        match lb {
            Ok(lb) => {
                self.load_balance = Some(lb);
                self.lb_error = None;
            }
            Err(e) => self.lb_error = Some(e),
        }
        self
    }

    /// Runs `handshake` on every new connection; the endpoint is used only if it
    /// succeeds (e.g. [`crate::SeataRegistration`]).
    pub fn handshake(mut self, handshake: impl Handshake) -> Self {
        self.handshake = Some(Arc::new(handshake));
        self
    }

    /// Handles requests servers send us (a TC's branch commit, a backend's push).
    pub fn inbound(mut self, handler: impl InboundHandler) -> Self {
        self.inbound = Some(Arc::new(handler));
        self
    }

    /// Replaces all options.
    pub fn options(mut self, options: ClientOptions) -> Self {
        self.options = options;
        self
    }

    /// Changes options in place.
    pub fn configure(mut self, f: impl FnOnce(&mut ClientOptions)) -> Self {
        f(&mut self.options);
        self
    }

    /// The options as set so far.
    pub fn current_options(&self) -> &ClientOptions {
        &self.options
    }

    /// Starts the client: opens the watch and begins connecting. Returns at once;
    /// use [`RpcClient::wait_alive`] to wait for connections.
    pub async fn build(self) -> Result<RpcClient, RpcError> {
        if let Some(e) = self.config_error.or(self.lb_error) {
            return Err(RpcError::Config(e));
        }
        let lb = self.load_balance.ok_or_else(|| {
            RpcError::Config(
                "no load balancer set: call .load_balance(..), .load_balance_name(..) or .config(..)"
                    .into(),
            )
        })?;
        let (watch, target, discovery) = match self.source {
            Some(Source::Discovery(d, group)) => {
                let w = d.watch(&group).await?;
                (w, group, Some(d))
            }
            Some(Source::Watch(w, name)) => (w, name, None),
            None => {
                return Err(RpcError::Config(
                    "no endpoint source: call .discovery(..) or .watch(..)".into(),
                ));
            }
        };
        let mut options = self.options;
        if options.classifier.is_none() {
            options.classifier = self.handshake.as_ref().and_then(|h| h.classifier());
        }
        let members = Arc::new(Membership::new(
            target.clone(),
            options,
            Balancer::with_payload(lb),
            self.handshake,
            self.inbound,
            watch.refresher(),
        ));
        let span = tracing::info_span!("membership", target = %target);
        let mut background = vec![tokio::spawn(
            follow(members.clone(), watch).instrument(span.clone()),
        )];
        if members.options.outlier.judges_rates() {
            background.push(tokio::spawn(members.clone().judge_rates().instrument(span)));
        }
        let retries = super::budget::Retries::new(&members.options.retry_budget);
        let limits = super::limits::ClientLimits::new(&members.options.limits);
        let hedger = members
            .options
            .hedging
            .as_ref()
            .map(super::hedge::Hedger::new);
        Ok(RpcClient {
            handle: Arc::new(Handle {
                members,
                gate: Default::default(),
                retries,
                limits,
                hedger,
                _discovery: discovery,
                background: Mutex::new(background),
            }),
        })
    }
}

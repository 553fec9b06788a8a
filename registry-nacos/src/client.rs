//! Building nacos-sdk's naming client for the configured servers and credentials: the
//! registry's own client, and the short-lived one `nearby` opens for another namespace
//! (a nacos-sdk client serves one namespace).

use nacos_sdk::api::naming::NamingServiceBuilder;
use nacos_sdk::api::props::ClientProps;

use crate::NacosSettings;
use crate::address::ServerAddrs;

/// The builder of a naming client for `n`'s servers (`addrs`, checked) and credentials,
/// in `namespace`, announcing itself as `app_name`.
pub(crate) fn naming_builder(
    n: &NacosSettings,
    addrs: &ServerAddrs,
    app_name: &str,
    namespace: &str,
) -> NamingServiceBuilder {
    let mut props = ClientProps::new()
        .server_addr(addrs.sdk_list.clone())
        .namespace(namespace.to_string())
        .app_name(app_name.to_string())
        // Our hub applies the empty-list policy; the client must pass every push on.
        .naming_push_empty_protection(false)
        .env_first(false);
    if let Some(p) = n.grpc_port {
        props = props.remote_grpc_port(p);
    }
    if let (Some(u), Some(p)) = (&n.username, &n.password) {
        props = props.auth_username(u.clone()).auth_password(p.clone());
        NamingServiceBuilder::new(props).enable_auth_plugin_http()
    } else if let (Some(ak), Some(sk)) = (&n.access_key, &n.secret_key) {
        props = props
            .auth_access_key(ak.clone())
            .auth_access_secret(sk.clone());
        NamingServiceBuilder::new(props).enable_auth_plugin_aliyun()
    } else {
        NamingServiceBuilder::new(props)
    }
}

//! The check of what the server lists: every [`VERIFY_PERIOD`] the client asks for
//! each service it registered in, and registers again, on its live connection, any
//! of its instances the server no longer lists.
//!
//! Why: a Nacos cluster can lose a live registration. Measured with rnacos (three
//! nodes, one cut and restored, `tests/nacos_node_cut.rs`): the restored node had
//! dropped the client's old connection during the cut, and on its return that
//! removal reached the other nodes and took out the registration the client had
//! made again on another node, by address, although its connection there was live.
//! Every node then listed the client as gone while it ran; nothing would have
//! registered it again short of a reconnect. A client that checks heals it within a
//! period.
//!
//! Cost: one query per registered service per period (a Seata TC: one query every
//! 5 s). A registration the caller changes meanwhile is never undone: the check
//! holds the client's write lock while it decides and sends.

use std::time::Duration;

use super::conn::Conn;
use super::shared::{Registered, Shared, parse_info, same};
use super::wire::ServiceInstance;
use super::{Error, lock};

/// How often the client checks that the server lists what it registered.
pub const VERIFY_PERIOD: Duration = Duration::from_secs(5);

impl Shared {
    /// Registers again, on `conn`, whatever of ours the server no longer lists;
    /// returns how many registrations were sent again.
    pub(super) async fn verify(&self, conn: &Conn) -> Result<usize, Error> {
        let services: Vec<(String, String)> = lock(&self.redo).keys().cloned().collect();
        let mut sent = 0;
        for (group, service) in services {
            let body = self.query_body(&self.namespace, &group, &service, "");
            let answer = self
                .call_on(conn, "ServiceQueryRequest", &group, &service, &body)
                .await?;
            let listed = parse_info(&answer)?.hosts;
            let _writes = self.writes.lock().await;
            let key = (group.clone(), service.clone());
            let Some(Registered { single, batch }) = lock(&self.redo).get(&key).cloned() else {
                continue;
            };
            let missing = |si: &ServiceInstance| !listed.iter().any(|l| same(l, si));
            if let Some(si) = single.filter(|si| missing(si)) {
                tracing::warn!(registry = "nacos", server = %conn.server, group, service, instance = %format!("{}:{}", si.ip, si.port), "the server no longer lists this registration; registering it again");
                let body = self.instance_body(&group, &service, "registerInstance", &si);
                self.call_on(conn, "InstanceRequest", &group, &service, &body)
                    .await?;
                sent += 1;
            }
            if batch.iter().any(missing) {
                tracing::warn!(registry = "nacos", server = %conn.server, group, service, "the server no longer lists all of this client's batch; sending it again");
                let body = self.batch_body(&group, &service, &batch);
                self.call_on(conn, "BatchInstanceRequest", &group, &service, &body)
                    .await?;
                sent += 1;
            }
        }
        Ok(sent)
    }
}

//! Ending a client: [`RpcClient::shutdown`].

use std::time::Duration;

use tokio::task::JoinHandle;

use super::RpcClient;

impl RpcClient {
    /// Stops taking calls, waits up to `deadline` for calls in flight, then closes
    /// every connection (endpoints still draining after a registry removal included)
    /// and stops following the registry. When it returns, no task of this client runs.
    pub async fn shutdown(&self, deadline: Duration) {
        let inner = self.inner();
        let gate = &self.handle.gate;
        gate.close();
        if !gate.wait_idle(crate::deadline_after(deadline)).await {
            tracing::warn!(
                in_flight = gate.in_flight(),
                "shutdown deadline passed with calls in flight; closing anyway"
            );
        }
        inner.shutdown.cancel();
        let background = std::mem::take(
            &mut *self
                .handle
                .background
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for task in background {
            let _ = task.await;
        }
        let tasks: Vec<JoinHandle<()>> = {
            let mut st = inner.state();
            let mut v: Vec<JoinHandle<()>> = st
                .endpoints
                .values_mut()
                .filter_map(|s| s.task.take())
                .collect();
            v.append(&mut st.draining);
            v
        };
        for t in tasks {
            let _ = t.await;
        }
    }
}

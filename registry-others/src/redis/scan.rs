//! The key walk both reads use: `SCAN ... MATCH <pattern> COUNT 1000` to the end of the
//! keyspace (a cluster's read), or to a bound (`nearby`: a huge shared Redis must cost
//! a bounded number of round trips). Keys come back sorted and de-duplicated (`SCAN`
//! may return a key twice).

use meshline_registry_core::RegistryError;

use super::Inner;

/// Where a walk stops early: after this many `SCAN` steps or matching keys.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScanBound {
    pub(super) steps: usize,
    pub(super) keys: usize,
}

impl Inner {
    /// The keys matching `pattern`, every one or (with `bound`) those seen before the
    /// bound; the flag says whether the walk stopped at the bound.
    pub(super) async fn scan_keys(
        &self,
        pattern: &str,
        bound: Option<ScanBound>,
    ) -> Result<(Vec<Vec<u8>>, bool), RegistryError> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut cursor: u64 = 0;
        let mut cut = false;
        for step in 1usize.. {
            let (next, batch): (u64, Vec<Vec<u8>>) = self
                .servers
                .run("scan", |mut c| {
                    let pattern = pattern.to_string();
                    async move {
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(pattern)
                            .arg("COUNT")
                            .arg(1000)
                            .query_async(&mut c)
                            .await
                    }
                })
                .await?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
            if let Some(b) = bound
                && (step >= b.steps || keys.len() >= b.keys)
            {
                cut = true;
                break;
            }
        }
        keys.sort();
        keys.dedup();
        Ok((keys, cut))
    }
}

//! MergedWarpMessages: several transaction requests in one frame, and the two ways a
//! Seata TC answers them (`docs/seata-messages.md` §7.4, Seata's
//! `ServerOnRequestProcessor.onRequestMessage`).
//!
//! - **As each result is ready**, in BatchResultMessages (type 121), when batch
//!   responses are on ([`TcOptions::batch_send_response`], Seata's
//!   `transport.enableTcServerBatchSendResponse`) and the connection registered with a
//!   version of at least 1.5.0. Each BatchResultMessage carries the results that were
//!   ready together and, beside each, the id the client gave that request in the
//!   MergedWarpMessage's `msgIds`; it goes out as the response to the merged frame's
//!   own id, so one merged frame gets as many answers as it took rounds of results. A
//!   merged GlobalBegin is answered at once, however long the GlobalCommit beside it
//!   waits for phase two. (Seata queues each result per channel and a thread flushes
//!   every 1 ms, one BatchResultMessage per merged frame present; here the merged
//!   frame's own task sends whatever finished together the moment the first of them
//!   did, without the 1 ms wait. Results of two merged frames are never mixed in one
//!   answer, as in Seata.)
//! - **All at once**, one MergeResultMessage (type 60) whose results match the requests
//!   by position, sent when the last one finished: to clients older than 1.5.0 or that
//!   registered no version (they know no BatchResultMessage), and to every client when
//!   batch responses are off. A commit waiting for phase two holds back every answer
//!   of its frame.
//!
//! Either way the requests of one frame are served concurrently (Seata's
//! `server.enableParallelRequestHandle`, default true). A merged frame whose `msgIds`
//! do not match its requests one for one (a client before 1.5.0 writes none) cannot be
//! answered by id, so it is answered by position; Seata's TC fails on it instead
//! (`IndexOutOfBoundsException`, no answer).
//!
//! [`TcOptions::batch_send_response`]: super::TcOptions::batch_send_response

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::{FutureExt, future};
use meshline::rpc::BodyFormat;
use meshline::rpc::message::{
    BatchResultMessage, MergeResultMessage, MergedWarpMessage, SeataMessage,
};

use super::Inner;
use super::channels::Client;
use super::dispatch::Reply;

/// The first client version that understands BatchResultMessages (Seata's
/// `Version.VERSION_1_5_0`).
const BATCH_RESULT_SINCE: u64 = 1_05_00_00;

impl Inner {
    /// Serves a MergedWarpMessage of `client`. `None`: it was answered here, result by
    /// result, in BatchResultMessages. `Some`: the MergeResultMessage to answer it
    /// with.
    pub(super) async fn merged(
        self: &Arc<Self>,
        reply: &Reply,
        format: BodyFormat,
        client: &Client,
        m: MergedWarpMessage,
    ) -> Option<SeataMessage> {
        if self.options.batch_send_response && understands_batch_results(&client.version) {
            if m.msg_ids.len() == m.msgs.len() {
                self.answer_as_ready(reply, format, client, m).await;
                return None;
            }
            tracing::debug!(
                peer = %reply.conn.peer(),
                requests = m.msgs.len(),
                ids = m.msg_ids.len(),
                "merged requests without one id each: answered by position"
            );
        }
        let results = future::join_all(
            m.msgs
                .into_iter()
                .map(|sub| self.transaction(&reply.conn, client, sub)),
        )
        .await;
        self.stats.merge_results.fetch_add(1, Ordering::Relaxed);
        Some(SeataMessage::MergeResult(MergeResultMessage {
            msgs: results,
        }))
    }

    /// Serves every request of `m` at once and sends each result as soon as it is
    /// ready: one BatchResultMessage per round of results that finished together.
    async fn answer_as_ready(
        self: &Arc<Self>,
        reply: &Reply,
        format: BodyFormat,
        client: &Client,
        m: MergedWarpMessage,
    ) {
        let mut pending: FuturesUnordered<_> = m
            .msgs
            .into_iter()
            .zip(m.msg_ids)
            .map(|(sub, id)| async move { (id, self.transaction(&reply.conn, client, sub).await) })
            .collect();
        while let Some((id, result)) = pending.next().await {
            let mut batch = BatchResultMessage {
                results: vec![result],
                msg_ids: vec![id],
            };
            // The others that are ready now go in the same answer (one frame, one
            // write); the rest follow in later ones.
            while let Some(Some((id, result))) = pending.next().now_or_never() {
                batch.msg_ids.push(id);
                batch.results.push(result);
            }
            let Some(p) = self.encode(format, &SeataMessage::BatchResult(batch)) else {
                // Crashed, or not encodable (logged): nothing more is answered.
                return;
            };
            self.stats.batch_results.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = reply.conn.respond(reply.request_id, p).await {
                tracing::debug!(error = %e, "could not send a BatchResultMessage");
            }
        }
    }
}

/// Whether a client that registered with `version` understands BatchResultMessages:
/// Seata's `StringUtils.isNotBlank(version) && Version.isAboveOrEqualVersion150(version)`.
pub(super) fn understands_batch_results(version: &str) -> bool {
    seata_version_number(version).is_some_and(|v| v >= BATCH_RESULT_SINCE)
}

/// A version as Seata's `Version.convertVersion` numbers it: up to four dot-separated
/// parts, two decimal digits each (`1.5.0` is 1_05_00_00); a part that is not a number
/// counts by its leading number before a `-` (`0-SNAPSHOT` is 0), or as 0 without
/// one; empty parts are skipped. `None` where Seata fails (blank, more than four parts,
/// a number too large), which Seata's check treats as "below 1.5.0".
pub(super) fn seata_version_number(version: &str) -> Option<u64> {
    if version.trim().is_empty() {
        return None;
    }
    let parts: Vec<&str> = version.split('.').filter(|p| !p.is_empty()).collect();
    if parts.len() > 4 {
        return None;
    }
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut value: u64 = 0;
    for (i, part) in parts.iter().enumerate() {
        let digits = if numeric(part) {
            *part
        } else {
            // Seata takes the first `-`-separated token, and fails when there is none.
            let first = part.split('-').find(|s| !s.is_empty())?;
            if !numeric(first) {
                continue;
            }
            first
        };
        let n: u64 = digits.parse().ok()?;
        let scale = 100u64.pow(3 - i as u32);
        value = value.checked_add(n.checked_mul(scale)?)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_number_as_seata_numbers_them() {
        assert_eq!(seata_version_number("1.5.0"), Some(1_05_00_00));
        assert_eq!(seata_version_number("2.3.0"), Some(2_03_00_00));
        assert_eq!(seata_version_number("1.5"), Some(1_05_00_00));
        assert_eq!(seata_version_number("1.4.2"), Some(1_04_02_00));
        assert_eq!(seata_version_number("1.5.0-SNAPSHOT"), Some(1_05_00_00));
        assert_eq!(seata_version_number("1.5.x"), Some(1_05_00_00));
        assert_eq!(seata_version_number("1..5"), Some(1_05_00_00));
        assert_eq!(seata_version_number("1.2.3.4"), Some(1_02_03_04));
        assert_eq!(seata_version_number("1.2.3.4.5"), None);
        assert_eq!(seata_version_number(""), None);
        assert_eq!(seata_version_number("  "), None);
        assert_eq!(seata_version_number("1.--"), None);
        assert_eq!(seata_version_number("99999999999999999999"), None);
    }

    #[test]
    fn batch_results_go_to_clients_of_1_5_0_and_later() {
        // Seata's own VersionTest cases.
        assert!(understands_batch_results("2.0.2"));
        assert!(understands_batch_results("1.5"));
        assert!(!understands_batch_results("1.4.9"));
        assert!(!understands_batch_results(""));
        // meshline registers as 2.3.0.
        assert!(understands_batch_results(meshline::rpc::SEATA_VERSION));
        assert!(understands_batch_results("1.5.0"));
        assert!(!understands_batch_results("1.4.2"));
        assert!(!understands_batch_results("not-a-version"));
    }
}

#[cfg(test)]
mod config_tests {
    use meshline::{Config, Format};

    use super::super::batch_send_response;

    fn read(text: &str) -> Result<bool, meshline::RegistryError> {
        batch_send_response(&Config::from_text(text, Format::Properties).unwrap())
    }

    #[test]
    fn the_batch_response_key_is_seatas_and_defaults_on_here() {
        assert!(read("").unwrap());
        assert!(!read("transport.enableTcServerBatchSendResponse=false\n").unwrap());
        assert!(read("transport.enableTcServerBatchSendResponse=true\n").unwrap());
        let err = read("transport.enableTcServerBatchSendResponse=maybe\n").unwrap_err();
        assert!(
            err.to_string().contains("enableTcServerBatchSendResponse"),
            "{err}"
        );
    }
}

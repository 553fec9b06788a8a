//! The TC's front door: every request a TM or RM sends, decoded, answered, and bad
//! input refused without an echo.
//!
//! - Bodies in the seata and the protobuf codec are read (Seata's
//!   `transport.serialization`), and answered in the request's.
//! - A body of another serializer, a compressor Seata does not define, or a type code
//!   a TC does not take (a response, a phase-two request, an unknown code) closes that
//!   connection with the reason: nothing sensible can be answered, and the stream may
//!   no longer be trusted. Other connections are not affected.
//! - A known request whose body cannot be decoded (truncated, a bad enum byte, bytes
//!   after its last field) is answered with its own response type, `Failed`, and the
//!   decoder's message naming the field; a registration that cannot be decoded is
//!   answered `identified = 0`.
//! - A transaction request on a connection that has not registered closes it, as
//!   Seata's TC does ("close a unhandled connection").
//!
//! Answers use the request's codec and compressor (Seata echoes them) and carry the head entry
//! `tc = <tag>` when the coordinator has a tag. A one-way request that has an answer
//! (a MergedWarpMessage, a later RegisterRM) is answered with the request's id, as
//! Seata's TC does.
//!
//! The transaction requests themselves are served in [`transaction`].

mod transaction;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use meshline::rpc::compress::Compressor;
use meshline::rpc::message::{
    BranchRegisterResponse, BranchReportResponse, GlobalBeginResponse, GlobalEndResponse,
    GlobalLockQueryResponse, GlobalStatus, MessageError, RegisterResponse, SeataMessage,
    TransactionExceptionCode as Exc, TransactionResult, type_code, type_name,
};
use meshline::rpc::{BodyFormat, Connection, InboundRequest, Payload};

use super::Inner;
use super::channels::{Client, Role};

/// Where an answer goes: the request's connection, id, and whether it was one-way.
pub(super) struct Reply {
    pub(super) conn: Connection,
    pub(super) oneway: bool,
    pub(super) request_id: u32,
}

impl Inner {
    /// Handles one request; `Some` is the answer to send with the request's id.
    pub(super) async fn on_request(self: Arc<Self>, req: InboundRequest) -> Option<Payload> {
        if self.crashed() {
            return None;
        }
        // The payload is a slice of the connection's read buffer: decode it and let it
        // go before anything waits (a commit waits for phase two), or every request in
        // flight would keep a whole read buffer alive.
        let InboundRequest {
            oneway,
            request_id,
            payload: p,
            connection: conn,
            ..
        } = req;
        let reply = Reply {
            conn: conn.clone(),
            oneway,
            request_id,
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let protobuf = p.codec == meshline::rpc::codec::CODEC_PROTOBUF;
        if p.codec != meshline::rpc::codec::CODEC_SEATA && !protobuf {
            return self.refuse(
                &conn,
                format!(
                    "body uses the {} serializer (codec {:#04x}); this TC speaks seata and protobuf",
                    meshline::rpc::codec::codec_name(p.codec),
                    p.codec
                ),
            );
        }
        let compressor = match p.compressor() {
            Ok(c) => c,
            Err(e) => return self.refuse(&conn, e.to_string()),
        };
        // Answers go in the request's codec and compressor, as Seata's TC answers.
        let format = BodyFormat {
            codec: p.codec,
            compressor,
        };
        let body = if compressor == Compressor::None {
            p.body
        } else {
            match compressor.decompress(&p.body, self.options.max_frame_len) {
                Ok(b) => b,
                Err(e) => return self.refuse(&conn, e.to_string()),
            }
        };
        if protobuf {
            self.stats.protobuf_requests.fetch_add(1, Ordering::Relaxed);
        }
        let (decoded, code) = if protobuf {
            // A protobuf body names its message: one that does not parse is refused
            // with the connection (no type code to answer it by).
            let d = meshline::rpc::message::protobuf::decode(&body).map_err(MessageError::from);
            (d, None)
        } else {
            let code = (body.len() >= 2).then(|| i16::from_be_bytes([body[0], body[1]]));
            (SeataMessage::decode(&body), code)
        };
        drop(body);
        let msg = match decoded {
            Ok(m) => m,
            Err(e) => {
                self.stats.bad_requests.fetch_add(1, Ordering::Relaxed);
                match code.and_then(|c| refusal(c, &e.to_string())) {
                    Some(answer) => {
                        tracing::warn!(peer = %conn.peer(), error = %e, "undecodable request answered as failed");
                        return self.answer(&reply, format, &answer).await;
                    }
                    None => return self.refuse(&conn, format!("undecodable request: {e}")),
                }
            }
        };
        let answer = match msg {
            SeataMessage::RegisterTm(r) => self.register(
                &conn,
                Role::Tm,
                r.application_id,
                r.transaction_service_group,
                r.version,
                None,
            ),
            SeataMessage::RegisterRm(r) => {
                let resources: Vec<String> = r.resources().map(str::to_string).collect();
                self.register(
                    &conn,
                    Role::Rm,
                    r.application_id,
                    r.transaction_service_group,
                    r.version,
                    Some(resources),
                )
            }
            // As Seata's `UnregRmProcessor`: the connection stays open, and is answered
            // (though the RM sends it one-way).
            SeataMessage::UnregisterRm(r) => {
                let removed = self.channels.remove_rm(&conn, r.resources());
                self.stats.unregistered.fetch_add(1, Ordering::Relaxed);
                tracing::info!(peer = %conn.peer(), resources = ?r.resource_ids, removed, "RM unregistered");
                SeataMessage::UnregisterRmResponse(meshline::rpc::RegisterResponse {
                    identified: r.resources().next().is_some(),
                    version: Some(self.options.version.clone()),
                })
            }
            SeataMessage::Merged(m) => {
                let Some(client) = conn.state::<Client>() else {
                    return self.refuse(&conn, "a merged request before registration".into());
                };
                self.stats.merged_frames.fetch_add(1, Ordering::Relaxed);
                match self.merged(&reply, format, &client, m).await {
                    Some(positional) => positional,
                    // Answered as each result was ready.
                    None => return None,
                }
            }
            other if meshline::rpc::message::is_mergeable_request(other.type_code()) => {
                let Some(client) = conn.state::<Client>() else {
                    return self.refuse(&conn, format!("{} before registration", other.name()));
                };
                self.transaction(&conn, &client, other).await
            }
            other => {
                return self.refuse(
                    &conn,
                    format!("a client sent {}, which a TC does not take", other.name()),
                );
            }
        };
        self.answer(&reply, format, &answer).await
    }

    /// Closes the connection with `reason` (nothing can be answered), counting it.
    fn refuse(&self, conn: &Connection, reason: String) -> Option<Payload> {
        self.stats.bad_requests.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(peer = %conn.peer(), %reason, "closing the connection");
        conn.close_with(reason);
        None
    }

    /// The answer as a payload; a one-way request's answer is sent here.
    async fn answer(
        &self,
        req: &Reply,
        format: BodyFormat,
        answer: &SeataMessage,
    ) -> Option<Payload> {
        let p = self.encode(format, answer)?;
        if req.oneway {
            if let Err(e) = req.conn.respond(req.request_id, p).await {
                tracing::debug!(error = %e, "could not answer a one-way request");
            }
            return None;
        }
        Some(p)
    }

    /// `answer` as a payload in `format`, with the `tc` head entry when tagged;
    /// `None` once crashed (a dead process answers nothing, not even what it had
    /// computed) or when it cannot be encoded.
    pub(super) fn encode(&self, format: BodyFormat, answer: &SeataMessage) -> Option<Payload> {
        if self.crashed() {
            return None;
        }
        let mut p = match Payload::seata_as(answer, format) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode an answer");
                return None;
            }
        };
        if let Some(tag) = &self.options.tag {
            p = p.with_head("tc", tag.clone());
        }
        Some(p)
    }

    fn register(
        &self,
        conn: &Connection,
        role: Role,
        application_id: String,
        group: String,
        version: String,
        resources: Option<Vec<String>>,
    ) -> SeataMessage {
        self.stats.registrations.fetch_add(1, Ordering::Relaxed);
        let accept = !self.options.refuse_registration;
        if accept {
            if let Some(res) = &resources {
                self.channels
                    .add_rm(conn, &application_id, res.iter().map(String::as_str));
            }
            tracing::debug!(peer = %conn.peer(), ?role, %application_id, "client registered");
            conn.set_state(Client {
                role,
                application_id,
                group,
                version,
            });
        } else {
            tracing::info!(peer = %conn.peer(), "refusing registration");
        }
        let r = RegisterResponse {
            identified: accept,
            version: Some(self.options.version.clone()),
        };
        match role {
            Role::Tm => SeataMessage::RegisterTmResponse(r),
            Role::Rm => SeataMessage::RegisterRmResponse(r),
        }
    }
}

/// The failed answer to a request of type `code` that could not be served, or `None`
/// for a type that is not a request a TC answers.
fn refusal(code: i16, why: &str) -> Option<SeataMessage> {
    failed_answer(code, None, format!("bad {}: {why}", type_name(code)))
}

/// The failed answer to a request of type `code`, with `exception` (or the type's own
/// refusal code) and `message`; `None` for a type that is not a request a TC answers.
fn failed_answer(code: i16, exception: Option<Exc>, message: String) -> Option<SeataMessage> {
    use type_code::*;
    let result = |exc| TransactionResult::failed(exception.unwrap_or(exc), message.clone());
    let end = |exc| GlobalEndResponse {
        result: result(exc),
        global_status: GlobalStatus::Unknown,
    };
    Some(match code {
        GLOBAL_BEGIN => SeataMessage::GlobalBeginResponse(GlobalBeginResponse {
            result: result(Exc::BeginFailed),
            xid: None,
            extra_data: None,
        }),
        GLOBAL_COMMIT => SeataMessage::GlobalCommitResponse(end(Exc::Unknown)),
        GLOBAL_ROLLBACK => SeataMessage::GlobalRollbackResponse(end(Exc::Unknown)),
        GLOBAL_STATUS => SeataMessage::GlobalStatusResponse(end(Exc::Unknown)),
        GLOBAL_REPORT => SeataMessage::GlobalReportResponse(end(Exc::Unknown)),
        BRANCH_REGISTER => SeataMessage::BranchRegisterResponse(BranchRegisterResponse {
            result: result(Exc::BranchRegisterFailed),
            branch_id: 0,
        }),
        BRANCH_STATUS_REPORT => SeataMessage::BranchReportResponse(BranchReportResponse {
            result: result(Exc::BranchReportFailed),
        }),
        GLOBAL_LOCK_QUERY => SeataMessage::GlobalLockQueryResponse(GlobalLockQueryResponse {
            result: result(Exc::LockableCheckFailed),
            lockable: false,
        }),
        REG_CLT => SeataMessage::RegisterTmResponse(RegisterResponse {
            identified: false,
            version: None,
        }),
        REG_RM => SeataMessage::RegisterRmResponse(RegisterResponse {
            identified: false,
            version: None,
        }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_answer_in_the_requests_own_type() {
        for code in [1i16, 7, 9, 11, 13, 15, 17, 21, 101, 103] {
            let r = refusal(code, "truncated at field `xid`").unwrap();
            assert_eq!(r.type_code(), code + 1, "{code}");
            if let Some(t) = r.transaction_result() {
                assert!(!t.is_success());
                assert!(
                    t.message
                        .as_deref()
                        .unwrap()
                        .contains("truncated at field `xid`")
                );
            }
        }
        assert!(
            refusal(3, "x").is_none(),
            "phase two is not a TC's to answer"
        );
        assert!(refusal(999, "x").is_none());
    }
}

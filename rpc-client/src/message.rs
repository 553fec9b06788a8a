//! Seata message bodies needed at a TC's front door, and an opaque form for the rest.
//!
//! A Seata-codec body is `[i16 type code][fields]` ([docs/seata-compat.md
//! §4.1](https://github.com/meshline/meshline/blob/main/docs/seata-compat.md#41-frame),
//! [§4.2](https://github.com/meshline/meshline/blob/main/docs/seata-compat.md#42-registration-on-connect)).
//! meshline decodes only what a client needs to be let in — the registration requests
//! and responses — and treats every other body as [`SeataMessage::Other`]: a
//! type code plus undecoded bytes, so users bring their own codec for global-begin,
//! branch-commit and the rest (or for their game messages) without meshline getting
//! in the way. Heartbeats have no body: PING/PONG are implied by the frame's message
//! type ([`HeartbeatMessage`]).
//!
//! Strings are `[i16 length][UTF-8]`, resource ids `[i32 length][UTF-8]`. As in Java,
//! a null string is written as length 0, and a length of 0 or less reads as empty /
//! `None`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{Frame, MessageType};

/// Seata message type codes (`MessageType.java`).
pub mod type_code {
    /// GlobalBeginRequest.
    pub const GLOBAL_BEGIN: i16 = 1;
    /// GlobalBeginResponse.
    pub const GLOBAL_BEGIN_RESULT: i16 = 2;
    /// BranchCommitRequest (TC -> RM).
    pub const BRANCH_COMMIT: i16 = 3;
    /// BranchCommitResponse.
    pub const BRANCH_COMMIT_RESULT: i16 = 4;
    /// BranchRollbackRequest (TC -> RM).
    pub const BRANCH_ROLLBACK: i16 = 5;
    /// BranchRollbackResponse.
    pub const BRANCH_ROLLBACK_RESULT: i16 = 6;
    /// GlobalCommitRequest.
    pub const GLOBAL_COMMIT: i16 = 7;
    /// GlobalCommitResponse.
    pub const GLOBAL_COMMIT_RESULT: i16 = 8;
    /// GlobalRollbackRequest.
    pub const GLOBAL_ROLLBACK: i16 = 9;
    /// GlobalRollbackResponse.
    pub const GLOBAL_ROLLBACK_RESULT: i16 = 10;
    /// BranchRegisterRequest.
    pub const BRANCH_REGISTER: i16 = 11;
    /// BranchRegisterResponse.
    pub const BRANCH_REGISTER_RESULT: i16 = 12;
    /// BranchReportRequest.
    pub const BRANCH_STATUS_REPORT: i16 = 13;
    /// BranchReportResponse.
    pub const BRANCH_STATUS_REPORT_RESULT: i16 = 14;
    /// GlobalStatusRequest.
    pub const GLOBAL_STATUS: i16 = 15;
    /// GlobalStatusResponse.
    pub const GLOBAL_STATUS_RESULT: i16 = 16;
    /// GlobalReportRequest.
    pub const GLOBAL_REPORT: i16 = 17;
    /// GlobalReportResponse.
    pub const GLOBAL_REPORT_RESULT: i16 = 18;
    /// GlobalLockQueryRequest.
    pub const GLOBAL_LOCK_QUERY: i16 = 21;
    /// GlobalLockQueryResponse.
    pub const GLOBAL_LOCK_QUERY_RESULT: i16 = 22;
    /// MergedWarpMessage (batched requests).
    pub const SEATA_MERGE: i16 = 59;
    /// MergeResultMessage.
    pub const SEATA_MERGE_RESULT: i16 = 60;
    /// RegisterTMRequest.
    pub const REG_CLT: i16 = 101;
    /// RegisterTMResponse.
    pub const REG_CLT_RESULT: i16 = 102;
    /// RegisterRMRequest.
    pub const REG_RM: i16 = 103;
    /// RegisterRMResponse.
    pub const REG_RM_RESULT: i16 = 104;
    /// UndoLogDeleteRequest.
    pub const RM_DELETE_UNDOLOG: i16 = 111;
    /// HeartbeatMessage (implied by frame types 3/4; never in a body).
    pub const HEARTBEAT: i16 = 120;
    /// BatchResultMessage.
    pub const BATCH_RESULT: i16 = 121;
}

/// Seata's `HeartbeatMessage`: PING from the client, PONG from the server. On the wire
/// it is only the frame's message type (3 or 4); the body is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatMessage {
    /// Client -> server, frame type 3.
    Ping,
    /// Server -> client, frame type 4, echoing the PING's id.
    Pong,
}

impl HeartbeatMessage {
    /// The heartbeat a frame carries, if it is one.
    pub fn from_frame(frame: &Frame) -> Option<HeartbeatMessage> {
        match frame.msg_type {
            MessageType::HeartbeatRequest => Some(HeartbeatMessage::Ping),
            MessageType::HeartbeatResponse => Some(HeartbeatMessage::Pong),
            _ => None,
        }
    }
}

/// Seata's `RegisterTMRequest` (type 101): a TM introducing itself to a TC.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterTmRequest {
    /// Client version (Java sends its build version, e.g. `2.3.0`).
    pub version: String,
    /// `applicationId`.
    pub application_id: String,
    /// `transactionServiceGroup` (the tx-service-group).
    pub transaction_service_group: String,
    /// `extraData` (Java TM: `ak=..\ndigest=..\ntimestamp=..\nauthVersion=..\n`).
    pub extra_data: Option<String>,
}

/// Seata's `RegisterRMRequest` (type 103): an RM introducing itself and its resources.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterRmRequest {
    /// Client version.
    pub version: String,
    /// `applicationId`.
    pub application_id: String,
    /// `transactionServiceGroup`.
    pub transaction_service_group: String,
    /// `extraData`.
    pub extra_data: Option<String>,
    /// Resource ids joined with `,` (e.g. JDBC URLs).
    pub resource_ids: Option<String>,
}

/// Seata's `RegisterTMResponse` / `RegisterRMResponse` (types 102 / 104):
/// `[u8 identified][i16 len][version]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterResponse {
    /// Whether the TC accepted the registration; clients require `true`.
    pub identified: bool,
    /// The server's version.
    pub version: Option<String>,
}

/// A Seata-codec body: the registration messages decoded, anything else opaque.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeataMessage {
    /// Type 101.
    RegisterTm(RegisterTmRequest),
    /// Type 102.
    RegisterTmResponse(RegisterResponse),
    /// Type 103.
    RegisterRm(RegisterRmRequest),
    /// Type 104.
    RegisterRmResponse(RegisterResponse),
    /// Any other type code, with the bytes after the code left undecoded.
    Other {
        /// The Seata type code.
        type_code: i16,
        /// The fields, undecoded.
        fields: Bytes,
    },
}

/// Why a Seata-codec body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The body ends before a field it declares.
    #[error("seata message type {type_code}: truncated at field `{field}`")]
    Truncated {
        /// The type code (0 if not even that was there).
        type_code: i16,
        /// The field being read.
        field: &'static str,
    },
    /// A string field is not UTF-8.
    #[error("seata message type {type_code}: field `{field}` is not UTF-8")]
    NotUtf8 {
        /// The type code.
        type_code: i16,
        /// The field.
        field: &'static str,
    },
    /// Bytes left after the last field.
    #[error("seata message type {type_code}: {extra} unexpected trailing bytes")]
    Trailing {
        /// The type code.
        type_code: i16,
        /// How many bytes were left.
        extra: usize,
    },
    /// A string too long for its length prefix.
    #[error("field `{field}` of {len} bytes does not fit its length prefix")]
    FieldTooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// The body is compressed and meshline does not decompress Seata bodies.
    #[error("body compressed with compressor {0}: meshline decodes only uncompressed Seata bodies")]
    Compressed(u8),
    /// The body uses another serializer than Seata's.
    #[error("body uses serializer {0}, not Seata (1)")]
    NotSeataCodec(u8),
}

impl SeataMessage {
    /// The message's type code.
    pub fn type_code(&self) -> i16 {
        match self {
            SeataMessage::RegisterTm(_) => type_code::REG_CLT,
            SeataMessage::RegisterTmResponse(_) => type_code::REG_CLT_RESULT,
            SeataMessage::RegisterRm(_) => type_code::REG_RM,
            SeataMessage::RegisterRmResponse(_) => type_code::REG_RM_RESULT,
            SeataMessage::Other { type_code, .. } => *type_code,
        }
    }

    /// Encodes the body: type code, then fields.
    pub fn encode(&self) -> Result<Bytes, MessageError> {
        let mut b = BytesMut::with_capacity(64);
        b.put_i16(self.type_code());
        match self {
            SeataMessage::RegisterTm(r) => {
                put_str16(&mut b, "version", &r.version)?;
                put_str16(&mut b, "applicationId", &r.application_id)?;
                put_str16(
                    &mut b,
                    "transactionServiceGroup",
                    &r.transaction_service_group,
                )?;
                put_str16(&mut b, "extraData", r.extra_data.as_deref().unwrap_or(""))?;
            }
            SeataMessage::RegisterRm(r) => {
                put_str16(&mut b, "version", &r.version)?;
                put_str16(&mut b, "applicationId", &r.application_id)?;
                put_str16(
                    &mut b,
                    "transactionServiceGroup",
                    &r.transaction_service_group,
                )?;
                put_str16(&mut b, "extraData", r.extra_data.as_deref().unwrap_or(""))?;
                let ids = r.resource_ids.as_deref().unwrap_or("");
                if ids.len() > i32::MAX as usize {
                    return Err(MessageError::FieldTooLong {
                        field: "resourceIds",
                        len: ids.len(),
                    });
                }
                b.put_i32(ids.len() as i32);
                b.put_slice(ids.as_bytes());
            }
            SeataMessage::RegisterTmResponse(r) | SeataMessage::RegisterRmResponse(r) => {
                b.put_u8(u8::from(r.identified));
                put_str16(&mut b, "version", r.version.as_deref().unwrap_or(""))?;
            }
            SeataMessage::Other { fields, .. } => b.put_slice(fields),
        }
        Ok(b.freeze())
    }

    /// Decodes a Seata-codec body. Unknown type codes become [`SeataMessage::Other`];
    /// malformed known ones are errors naming the field.
    pub fn decode(body: &Bytes) -> Result<SeataMessage, MessageError> {
        let mut r = Reader {
            buf: &body[..],
            type_code: 0,
        };
        let code = r.i16("typeCode")?;
        r.type_code = code;
        let msg = match code {
            type_code::REG_CLT => SeataMessage::RegisterTm(RegisterTmRequest {
                version: r.str16("version")?,
                application_id: r.str16("applicationId")?,
                transaction_service_group: r.str16("transactionServiceGroup")?,
                extra_data: non_empty(r.str16("extraData")?),
            }),
            type_code::REG_RM => SeataMessage::RegisterRm(RegisterRmRequest {
                version: r.str16("version")?,
                application_id: r.str16("applicationId")?,
                transaction_service_group: r.str16("transactionServiceGroup")?,
                extra_data: non_empty(r.str16("extraData")?),
                resource_ids: non_empty(r.str32("resourceIds")?),
            }),
            type_code::REG_CLT_RESULT | type_code::REG_RM_RESULT => {
                let resp = RegisterResponse {
                    identified: r.u8("identified")? == 1,
                    version: non_empty(r.str16("version")?),
                };
                if code == type_code::REG_CLT_RESULT {
                    SeataMessage::RegisterTmResponse(resp)
                } else {
                    SeataMessage::RegisterRmResponse(resp)
                }
            }
            _ => {
                return Ok(SeataMessage::Other {
                    type_code: code,
                    fields: body.slice(2..),
                });
            }
        };
        if !r.buf.is_empty() {
            return Err(MessageError::Trailing {
                type_code: code,
                extra: r.buf.len(),
            });
        }
        Ok(msg)
    }
}

/// The TC side of registration: when `msg` is a RegisterTM or RegisterRM request, the
/// matching response with `identified = accept` and the server's `version`; `None` for
/// any other message. Used by the examples' `tc-server` and `quickstart`, the tests and the bench server.
pub fn register_reply(msg: &SeataMessage, accept: bool, version: &str) -> Option<SeataMessage> {
    let resp = RegisterResponse {
        identified: accept,
        version: Some(version.to_string()),
    };
    match msg {
        SeataMessage::RegisterTm(_) => Some(SeataMessage::RegisterTmResponse(resp)),
        SeataMessage::RegisterRm(_) => Some(SeataMessage::RegisterRmResponse(resp)),
        _ => None,
    }
}

fn non_empty(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

fn put_str16(b: &mut BytesMut, field: &'static str, s: &str) -> Result<(), MessageError> {
    if s.len() > i16::MAX as usize {
        return Err(MessageError::FieldTooLong {
            field,
            len: s.len(),
        });
    }
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
    Ok(())
}

struct Reader<'a> {
    buf: &'a [u8],
    type_code: i16,
}

impl Reader<'_> {
    fn truncated(&self, field: &'static str) -> MessageError {
        MessageError::Truncated {
            type_code: self.type_code,
            field,
        }
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, MessageError> {
        if self.buf.is_empty() {
            return Err(self.truncated(field));
        }
        Ok(self.buf.get_u8())
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, MessageError> {
        if self.buf.len() < 2 {
            return Err(self.truncated(field));
        }
        Ok(self.buf.get_i16())
    }

    fn bytes_str(&mut self, field: &'static str, len: usize) -> Result<String, MessageError> {
        if self.buf.len() < len {
            return Err(self.truncated(field));
        }
        let (s, rest) = self.buf.split_at(len);
        self.buf = rest;
        String::from_utf8(s.to_vec()).map_err(|_| MessageError::NotUtf8 {
            type_code: self.type_code,
            field,
        })
    }

    fn str16(&mut self, field: &'static str) -> Result<String, MessageError> {
        let len = self.i16(field)?;
        // Java reads only when the length is positive.
        self.bytes_str(field, len.max(0) as usize)
    }

    fn str32(&mut self, field: &'static str) -> Result<String, MessageError> {
        if self.buf.len() < 4 {
            return Err(self.truncated(field));
        }
        let len = self.buf.get_i32();
        self.bytes_str(field, len.max(0) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{CODEC_SEATA, COMPRESSOR_NONE, FrameCodec, HeadMap};
    use tokio_util::codec::{Decoder, Encoder};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn frame(t: MessageType, id: u32, msg: &SeataMessage) -> Vec<u8> {
        let f = Frame {
            msg_type: t,
            codec: CODEC_SEATA,
            compressor: COMPRESSOR_NONE,
            request_id: id,
            head: HeadMap::new(),
            body: msg.encode().unwrap(),
        };
        let mut b = BytesMut::new();
        FrameCodec::default().encode(f, &mut b).unwrap();
        b.to_vec()
    }

    fn tm() -> RegisterTmRequest {
        RegisterTmRequest {
            version: "2.3.0".into(),
            application_id: "app".into(),
            transaction_service_group: "default_tx_group".into(),
            extra_data: None,
        }
    }

    fn round_trip(wire: &[u8]) -> SeataMessage {
        let mut b = BytesMut::from(wire);
        let f = FrameCodec::default().decode(&mut b).unwrap().unwrap();
        SeataMessage::decode(&f.body).unwrap()
    }

    #[test]
    fn register_tm_vector() {
        let want = hex(
            "dada010000003200100001000000000100650005322e332e300003617070001064656661756c745f74785f67726f75700000",
        );
        let msg = SeataMessage::RegisterTm(tm());
        assert_eq!(frame(MessageType::Request, 1, &msg), want);
        assert_eq!(round_trip(&want), msg);
    }

    #[test]
    fn register_rm_vector() {
        let want = hex(
            "dada010000005400100001000000000200670005322e332e300003617070001064656661756c745f74785f67726f757000000000001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f6462",
        );
        let t = tm();
        let msg = SeataMessage::RegisterRm(RegisterRmRequest {
            version: t.version,
            application_id: t.application_id,
            transaction_service_group: t.transaction_service_group,
            extra_data: None,
            resource_ids: Some("jdbc:mysql://127.0.0.1:3306/db".into()),
        });
        assert_eq!(frame(MessageType::Request, 2, &msg), want);
        assert_eq!(round_trip(&want), msg);
    }

    #[test]
    fn register_tm_response_vector() {
        let want = hex("dada010000001a0010010100000000010066010005322e332e30");
        let msg = SeataMessage::RegisterTmResponse(RegisterResponse {
            identified: true,
            version: Some("2.3.0".into()),
        });
        assert_eq!(frame(MessageType::Response, 1, &msg), want);
        assert_eq!(round_trip(&want), msg);
    }

    #[test]
    fn other_bodies_stay_opaque() {
        let body = Bytes::from_static(&[0x00, 0x01, 0xde, 0xad]);
        let m = SeataMessage::decode(&body).unwrap();
        assert_eq!(
            m,
            SeataMessage::Other {
                type_code: 1,
                fields: Bytes::from_static(&[0xde, 0xad])
            }
        );
        assert_eq!(m.encode().unwrap(), body);
    }

    #[test]
    fn malformed_bodies_name_the_field() {
        let cases: &[(&str, &str)] = &[
            ("", "truncated at field `typeCode`"),
            ("0065", "truncated at field `version`"),
            ("00650005322e33", "truncated at field `version`"),
            ("0065000100", "truncated at field `applicationId`"),
            ("006500018000000000000000", "`version` is not UTF-8"),
            ("00650000000000000000ff", "1 unexpected trailing bytes"),
            ("0067000000000000000000", "truncated at field `resourceIds`"),
            (
                "0067000000000000000000000005",
                "truncated at field `resourceIds`",
            ),
            ("0066", "truncated at field `identified`"),
        ];
        for (input, want) in cases {
            let err = SeataMessage::decode(&Bytes::from(hex(input)))
                .expect_err(input)
                .to_string();
            assert!(err.contains(want), "{input}: `{err}` lacks `{want}`");
        }
        // Java treats a negative length as "absent".
        let m = SeataMessage::decode(&Bytes::from(hex("0066 01ffff".replace(' ', "").as_str())))
            .unwrap();
        assert_eq!(
            m,
            SeataMessage::RegisterTmResponse(RegisterResponse {
                identified: true,
                version: None
            })
        );
    }

    #[test]
    fn identified_must_be_exactly_one() {
        let m = SeataMessage::decode(&Bytes::from(hex("0068020000"))).unwrap();
        assert_eq!(
            m,
            SeataMessage::RegisterRmResponse(RegisterResponse {
                identified: false,
                version: None
            })
        );
    }

    /// Any of the four registration messages, with random field contents.
    fn arb_message() -> impl proptest::strategy::Strategy<Value = SeataMessage> {
        use proptest::prelude::*;
        let s = || "\\PC{0,12}";
        prop_oneof![
            (s(), s(), s(), proptest::option::of(s())).prop_map(|(v, a, g, e)| {
                SeataMessage::RegisterTm(RegisterTmRequest {
                    version: v,
                    application_id: a,
                    transaction_service_group: g,
                    extra_data: e.filter(|e| !e.is_empty()),
                })
            }),
            (s(), s(), s(), proptest::option::of(s())).prop_map(|(v, a, g, r)| {
                SeataMessage::RegisterRm(RegisterRmRequest {
                    version: v,
                    application_id: a,
                    transaction_service_group: g,
                    extra_data: None,
                    resource_ids: r.filter(|r| !r.is_empty()),
                })
            }),
            (any::<bool>(), proptest::option::of(s())).prop_map(|(i, v)| {
                SeataMessage::RegisterTmResponse(RegisterResponse {
                    identified: i,
                    version: v.filter(|v| !v.is_empty()),
                })
            }),
            (any::<bool>(), proptest::option::of(s())).prop_map(|(i, v)| {
                SeataMessage::RegisterRmResponse(RegisterResponse {
                    identified: i,
                    version: v.filter(|v| !v.is_empty()),
                })
            }),
        ]
    }

    proptest::proptest! {
        #[test]
        fn random_bodies_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = SeataMessage::decode(&Bytes::from(b));
        }

        /// Random bytes almost never start with a known type code, so the test above
        /// mostly exercises the "unknown type" branch. This one starts from a valid
        /// registration body and damages it (truncation, flipped bytes, appended bytes),
        /// so every field decoder meets short, long and garbled input. Undamaged bodies
        /// must round-trip.
        #[test]
        fn damaged_registration_bodies_never_panic(
            msg in arb_message(),
            cut in proptest::option::of(0usize..80),
            flips in proptest::collection::vec((0usize..80, proptest::prelude::any::<u8>()), 0..4),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
        ) {
            let good = msg.encode().unwrap();
            if cut.is_none() && flips.is_empty() && tail.is_empty() {
                proptest::prop_assert_eq!(SeataMessage::decode(&good).unwrap(), msg);
            }
            let mut b = good.to_vec();
            if let Some(c) = cut {
                b.truncate(c.max(2).min(b.len()));
            }
            for (at, v) in flips {
                // Keep the type code so the known decoder runs.
                if at >= 2 && at < b.len() {
                    b[at] = v;
                }
            }
            b.extend_from_slice(&tail);
            let _ = SeataMessage::decode(&Bytes::from(b));
        }
    }
}

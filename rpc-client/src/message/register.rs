//! Registration on connect: RegisterTM (101) / RegisterRM (103) and their responses
//! (102 / 104), `docs/seata-messages.md` §6.13, §6.14.
//!
//! A Java client sends one as a sync request on every new connection and uses the
//! connection only when the TC answers `identified == 1`. In protocol v1 the responses
//! carry no result code and no message: only `identified` and the server's version.

use super::MessageError;
use super::wire::{Reader, Writer};

/// Seata's `RegisterTMRequest` (type 101): a TM introducing itself to a TC.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterTmRequest {
    /// Client version (Java sends its build version, e.g. `2.3.0`). A TC answers a
    /// batch of requests with one BatchResultMessage per outcome only for clients of
    /// 1.5.0 or later; meshline's client reads both kinds of answer.
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

impl RegisterRmRequest {
    /// The resource ids, split at `,` (empty parts skipped).
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.resource_ids
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
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

impl RegisterTmRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.str16("version", Some(&self.version))?;
        w.str16("applicationId", Some(&self.application_id))?;
        w.str16(
            "transactionServiceGroup",
            Some(&self.transaction_service_group),
        )?;
        w.str16("extraData", self.extra_data.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(RegisterTmRequest {
            version: r.str16_or_empty("version")?,
            application_id: r.str16_or_empty("applicationId")?,
            transaction_service_group: r.str16_or_empty("transactionServiceGroup")?,
            extra_data: r.str16("extraData")?,
        })
    }
}

impl RegisterRmRequest {
    /// The fields both registrations take from Seata's `AbstractIdentifyRequest`, which
    /// are all of the TM's request: the RM's is the TM's followed by `resourceIds`, on
    /// the wire as in protobuf.
    pub(crate) fn identify(&self) -> RegisterTmRequest {
        RegisterTmRequest {
            version: self.version.clone(),
            application_id: self.application_id.clone(),
            transaction_service_group: self.transaction_service_group.clone(),
            extra_data: self.extra_data.clone(),
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        self.identify().encode(w)?;
        w.str32("resourceIds", self.resource_ids.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        let RegisterTmRequest {
            version,
            application_id,
            transaction_service_group,
            extra_data,
        } = RegisterTmRequest::decode(r)?;
        Ok(RegisterRmRequest {
            version,
            application_id,
            transaction_service_group,
            extra_data,
            resource_ids: r.str32("resourceIds")?,
        })
    }
}

impl RegisterResponse {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.u8(u8::from(self.identified));
        w.str16("version", self.version.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(RegisterResponse {
            identified: r.u8("identified")? == 1,
            version: r.str16("version")?,
        })
    }
}

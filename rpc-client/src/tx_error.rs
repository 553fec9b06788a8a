//! [`TransactionError`]: what a TM or RM call reports when a transaction request did
//! not do what was asked, carrying the TC's own codes when the TC answered.

use crate::error::RpcError;
use crate::message::{
    GlobalStatus, MessageError, ResultCode, TransactionExceptionCode, TransactionResult,
};

/// Why a TM or RM request failed.
///
/// Three different things can go wrong, and a caller treats them differently:
/// - the TC **answered and refused** ([`TransactionError::Refused`]): its result code,
///   exception code (`LockKeyConflict`, `GlobalTransactionNotExist`...) and message
///   are here, exactly as it sent them;
/// - the TC answered, but the transaction **ended otherwise** than asked
///   ([`TransactionError::Outcome`]): a commit that found the transaction gone
///   (`Finished`, which may mean rolled back) or timed out and rolled back, with the
///   exception code Seata's TM gives that case;
/// - **no answer** came ([`TransactionError::Rpc`]): the [`RpcError`] says whether the
///   request may have been delivered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// The TC (or the RM, for phase two) answered with `ResultCode::Failed`.
    #[error("{operation}{}: {endpoint} refused it: {exception}{}{}",
        xid.as_ref().map(|x| format!(" of {x}")).unwrap_or_default(),
        message.as_ref().map(|m| format!(": {m}")).unwrap_or_default(),
        status.map(|s| format!(" (global status {s})")).unwrap_or_default())]
    Refused {
        /// What was asked (`global commit`, `branch register`...).
        operation: &'static str,
        /// The transaction, when the request named one.
        xid: Option<String>,
        /// Who answered.
        endpoint: String,
        /// The TC's exception code.
        exception: TransactionExceptionCode,
        /// The TC's message.
        message: Option<String>,
        /// The global status the answer carried, for commit, rollback, status and report.
        status: Option<GlobalStatus>,
    },
    /// The TC answered, and the transaction is not in the state that was asked for.
    #[error("{operation} of {xid}: {endpoint} answered global status {status}: {reason}")]
    Outcome {
        /// What was asked.
        operation: &'static str,
        /// The transaction.
        xid: String,
        /// Who answered.
        endpoint: String,
        /// The status the TC answered.
        status: GlobalStatus,
        /// Seata's code for the case (`CommitHeuristic`, `TransactionTimeout`...).
        exception: TransactionExceptionCode,
        /// What it means.
        reason: String,
    },
    /// No answer: not sent, maybe delivered, timed out, nothing alive...
    #[error("{operation}{}: {source}", xid.as_ref().map(|x| format!(" of {x}")).unwrap_or_default())]
    Rpc {
        /// What was asked.
        operation: &'static str,
        /// The transaction, when the request named one.
        xid: Option<String>,
        /// The transport's error (delivery status included; boxed: it is large).
        #[source]
        source: Box<RpcError>,
    },
    /// The answer was not the message expected, or could not be decoded.
    #[error("{operation}: bad answer from {endpoint}: {source}")]
    BadAnswer {
        /// What was asked.
        operation: &'static str,
        /// Who answered.
        endpoint: String,
        /// What is wrong with it.
        #[source]
        source: MessageError,
    },
    /// The request could not be encoded (a field too long for its length prefix).
    #[error("{operation}: cannot encode the request: {source}")]
    Encode {
        /// What was asked.
        operation: &'static str,
        /// Why.
        #[source]
        source: MessageError,
    },
}

impl TransactionError {
    /// Seata's exception code: the TC's when it refused, Seata's TM's for an unexpected
    /// outcome, `IO` when no answer came (what Seata's client reports for a timeout).
    pub fn exception_code(&self) -> TransactionExceptionCode {
        match self {
            TransactionError::Refused { exception, .. }
            | TransactionError::Outcome { exception, .. } => *exception,
            TransactionError::Rpc { .. } => TransactionExceptionCode::Io,
            TransactionError::BadAnswer { .. } | TransactionError::Encode { .. } => {
                TransactionExceptionCode::Unknown
            }
        }
    }

    /// The result code the TC answered with (`Failed` for a refusal, `Success` for an
    /// unexpected outcome); `None` when no usable answer came.
    pub fn result_code(&self) -> Option<ResultCode> {
        match self {
            TransactionError::Refused { .. } => Some(ResultCode::Failed),
            TransactionError::Outcome { .. } => Some(ResultCode::Success),
            _ => None,
        }
    }

    /// The TC's message, when it refused with one.
    pub fn tc_message(&self) -> Option<&str> {
        match self {
            TransactionError::Refused { message, .. } => message.as_deref(),
            _ => None,
        }
    }

    /// The global status the TC answered with, when it did.
    pub fn global_status(&self) -> Option<GlobalStatus> {
        match self {
            TransactionError::Refused { status, .. } => *status,
            TransactionError::Outcome { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the request certainly never reached a TC (safe to send again).
    pub fn is_not_delivered(&self) -> bool {
        matches!(self, TransactionError::Rpc { source, .. } if source.is_not_delivered())
            || matches!(self, TransactionError::Encode { .. })
    }

    pub(crate) fn refused(
        operation: &'static str,
        xid: Option<&str>,
        endpoint: &dyn std::fmt::Display,
        result: &TransactionResult,
        status: Option<GlobalStatus>,
    ) -> Self {
        TransactionError::Refused {
            operation,
            xid: xid.map(str::to_string),
            endpoint: endpoint.to_string(),
            exception: result.exception,
            message: result.message.clone(),
            status,
        }
    }
}

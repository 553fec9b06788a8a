//! The head every transaction response starts with (`AbstractTransactionResponse`):
//! result code, the message only when the result is `Failed`, then the exception code,
//! always (`docs/seata-messages.md` §5.1, §5.2).

use super::MessageError;
use super::codes::{ResultCode, TransactionExceptionCode};
use super::wire::{Reader, Writer, truncate_utf8};

/// Longest `msg` written: Java truncates to 32767 characters; meshline to 32767 bytes on
/// a character boundary, which is the same for ASCII text and always fits the `i16`.
const MAX_MSG: usize = i16::MAX as usize;

/// Whether a transaction request succeeded, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionResult {
    /// Success or Failed.
    pub code: ResultCode,
    /// Why it failed (`TransactionExceptionCode`); `Unknown` on success.
    pub exception: TransactionExceptionCode,
    /// The TC's message. Only on the wire when `code` is `Failed` (a message on a
    /// successful result is not sent).
    pub message: Option<String>,
}

impl Default for TransactionResult {
    fn default() -> Self {
        TransactionResult::success()
    }
}

impl TransactionResult {
    /// Success, exception code `Unknown`, no message.
    pub fn success() -> Self {
        TransactionResult {
            code: ResultCode::Success,
            exception: TransactionExceptionCode::Unknown,
            message: None,
        }
    }

    /// Failed with `exception` and `message`.
    pub fn failed(exception: TransactionExceptionCode, message: impl Into<String>) -> Self {
        TransactionResult {
            code: ResultCode::Failed,
            exception,
            message: Some(message.into()),
        }
    }

    /// True when the result code is `Success`.
    pub fn is_success(&self) -> bool {
        self.code == ResultCode::Success
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.enumeration(self.code);
        if self.code == ResultCode::Failed {
            w.str16(
                "msg",
                self.message.as_deref().map(|m| truncate_utf8(m, MAX_MSG)),
            )?;
        }
        w.enumeration(self.exception);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        let code: ResultCode = r.enumeration("resultCode")?;
        let message = if code == ResultCode::Failed {
            r.str16("msg")?
        } else {
            None
        };
        Ok(TransactionResult {
            code,
            message,
            exception: r.enumeration("transactionExceptionCode")?,
        })
    }
}

impl std::fmt::Display for TransactionResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, &self.message) {
            (ResultCode::Success, _) => f.write_str("Success"),
            (ResultCode::Failed, Some(m)) => write!(f, "Failed ({}): {m}", self.exception),
            (ResultCode::Failed, None) => write!(f, "Failed ({})", self.exception),
        }
    }
}

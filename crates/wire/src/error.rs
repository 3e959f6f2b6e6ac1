//! Error types.
//!
//! The hot path (query parsing, response building) uses field-less errors
//! so that failing is as cheap as succeeding: nothing is allocated and
//! nothing is formatted until somebody asks for the message.

/// A message (or part of one) is not valid DNS wire format.
///
/// Deliberately carries no detail: the reaction to every kind of malformed
/// input is the same (FORMERR or drop), and a unit struct costs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("malformed DNS message")]
pub struct ParseError;

/// The message would grow past its size limit; nothing was written.
///
/// Returned by [`MessageBuilder`](crate::MessageBuilder) when a record does
/// not fit. The builder is left exactly as it was before the failed call,
/// so the caller can set TC and finish the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("message size limit reached")]
pub struct TruncationError;

/// A domain name in presentation (text) form could not be converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NameError {
    /// Two dots in a row, a leading dot, or an empty string.
    #[error("empty label in domain name")]
    EmptyLabel,
    /// A label is longer than 63 bytes.
    #[error("domain name label longer than 63 bytes")]
    LabelTooLong,
    /// The name is longer than 255 bytes in wire form.
    #[error("domain name longer than 255 bytes")]
    NameTooLong,
    /// A backslash escape is incomplete or `\DDD` is above 255.
    #[error("bad escape sequence in domain name")]
    BadEscape,
}

/// Why a received packet cannot be handled as a query.
///
/// The variants tell the server what to do: drop the packet silently, or
/// answer FORMERR (the header could be read, so an answer can be addressed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum QueryError {
    /// Shorter than a DNS header: drop silently.
    #[error("packet shorter than a DNS header")]
    TooShort,
    /// The QR bit is set, this is a response: drop silently.
    #[error("packet is a response, not a query")]
    NotAQuery,
    /// QDCOUNT is zero. The header is readable.
    #[error("query has no question")]
    NoQuestion,
    /// The header is readable but the question is not (or there is more
    /// than one): answer FORMERR with the header only.
    #[error("malformed query")]
    Malformed,
    /// The question is readable (it ends at `question_end`) but a record
    /// after it is not, or the OPT record is bad or repeated: answer
    /// FORMERR with the question, as miekg/dns's `SetRcodeFormatError`
    /// does with the part of a message it could read.
    #[error("malformed record after the question")]
    MalformedRecords {
        /// Where the question ends in the packet.
        question_end: u16,
    },
}

impl From<ParseError> for QueryError {
    fn from(_: ParseError) -> Self {
        QueryError::Malformed
    }
}

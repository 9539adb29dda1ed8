//! The numeric codes of the row enums, shared by segments and the wire.

use crate::row::{LogLevel, SpanStatus};

impl SpanStatus {
    /// The stored and wire code (0 unset, 1 ok, 2 error).
    pub const fn code(self) -> i32 {
        match self {
            SpanStatus::Unset => 0,
            SpanStatus::Ok => 1,
            SpanStatus::Error => 2,
        }
    }

    /// An unknown code reads as unset.
    pub const fn from_code(code: i32) -> Self {
        match code {
            1 => SpanStatus::Ok,
            2 => SpanStatus::Error,
            _ => SpanStatus::Unset,
        }
    }
}

impl LogLevel {
    /// The stored and wire code (0 unspecified, then 1 trace to 6 fatal).
    pub const fn code(self) -> i32 {
        match self {
            LogLevel::Unspecified => 0,
            LogLevel::Trace => 1,
            LogLevel::Debug => 2,
            LogLevel::Info => 3,
            LogLevel::Warn => 4,
            LogLevel::Error => 5,
            LogLevel::Fatal => 6,
        }
    }

    /// An unknown code reads as unspecified.
    pub const fn from_code(code: i32) -> Self {
        match code {
            1 => LogLevel::Trace,
            2 => LogLevel::Debug,
            3 => LogLevel::Info,
            4 => LogLevel::Warn,
            5 => LogLevel::Error,
            6 => LogLevel::Fatal,
            _ => LogLevel::Unspecified,
        }
    }
}

//! The fixed vocabularies of a TCP flow's line (`proto`, `role`, `state`, `close_reason`,
//! `close_state`): one byte each in memory, written and read as the names docs/json.md lists.
//! A report of 200,000 flows (a burst of connections) holds them all at once, so a flow's
//! size is what ebtop's memory peaks at.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `proto` of a TCP flow line: always `tcp`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TcpProto {
    #[default]
    #[serde(rename = "tcp")]
    Tcp,
}

/// Which side opened the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sent the SYN.
    Client,
    Server,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }
}

/// A TCP state as the kernel names it (include/net/tcp_states.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TcpState {
    Established,
    SynSent,
    SynRecv,
    FinWait1,
    FinWait2,
    TimeWait,
    Close,
    CloseWait,
    LastAck,
    Listen,
    Closing,
    NewSynRecv,
    Unknown,
}

impl TcpState {
    /// From the kernel's number (`sk_state`).
    pub fn from_kernel(s: u8) -> TcpState {
        use TcpState::*;
        match s {
            1 => Established,
            2 => SynSent,
            3 => SynRecv,
            4 => FinWait1,
            5 => FinWait2,
            6 => TimeWait,
            7 => Close,
            8 => CloseWait,
            9 => LastAck,
            10 => Listen,
            11 => Closing,
            12 => NewSynRecv,
            _ => Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        use TcpState::*;
        match self {
            Established => "ESTABLISHED",
            SynSent => "SYN_SENT",
            SynRecv => "SYN_RECV",
            FinWait1 => "FIN_WAIT1",
            FinWait2 => "FIN_WAIT2",
            TimeWait => "TIME_WAIT",
            Close => "CLOSE",
            CloseWait => "CLOSE_WAIT",
            LastAck => "LAST_ACK",
            Listen => "LISTEN",
            Closing => "CLOSING",
            NewSynRecv => "NEW_SYN_RECV",
            Unknown => "UNKNOWN",
        }
    }
}

impl fmt::Display for TcpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a flow closed (`close_reason`; how it is judged: `crate::source::flow_table::close_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// FINs exchanged.
    Fin,
    RstReceived,
    /// This side reset or aborted (close() with unread data, SO_LINGER 0).
    RstSent,
    /// Retransmission or keepalive timeout.
    Timeout,
    /// Another socket error.
    Error,
    Other,
    /// The close was missed twice over: counters as last read.
    Unseen,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        use CloseReason::*;
        match self {
            Fin => "fin",
            RstReceived => "rst_received",
            RstSent => "rst_sent",
            Timeout => "timeout",
            Error => "error",
            Other => "other",
            Unseen => "unseen",
        }
    }

    /// A reset ended it, either way.
    pub fn is_reset(self) -> bool {
        matches!(self, CloseReason::RstReceived | CloseReason::RstSent)
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name is written as docs/json.md lists it and read back to the same value.
    #[test]
    fn names_round_trip_as_written() {
        for s in 0..=13u8 {
            let st = TcpState::from_kernel(s);
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", st.as_str()));
            assert_eq!(serde_json::from_str::<TcpState>(&json).unwrap(), st);
        }
        use CloseReason::*;
        for r in [Fin, RstReceived, RstSent, Timeout, Error, Other, Unseen] {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{r}\""));
            assert_eq!(serde_json::from_str::<CloseReason>(&json).unwrap(), r);
        }
        for r in [Role::Client, Role::Server] {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
        }
        assert_eq!(serde_json::to_string(&TcpProto::Tcp).unwrap(), "\"tcp\"");
        assert!(serde_json::from_str::<TcpState>("\"SOMETHING\"").is_err());
    }
}

//! A call's error class: plain data that the plugin ABI (src/plugins/abi.rs) reads too, in a
//! module of its own so that the ABI does not import the protocols' registry.

/// Error class of a call, as the protocol defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// The client's fault (HTTP 4xx).
    ClientError,
    /// The server's fault (HTTP 5xx) or a protocol-level error reply.
    ServerError,
    /// Not known: what decides it was not seen or could not be decoded (an HTTP/2 status in
    /// an HPACK table entry from before ebtop started). Counted, never taken for `Ok`.
    Unknown,
}

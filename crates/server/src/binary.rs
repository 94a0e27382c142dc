//! Execution of the binary protocol.
//!
//! Placeholder: a connection that opens with the binary magic byte is closed
//! until the binary protocol is served.

use crate::exec::Exec;

/// The result of looking at the start of a binary-protocol input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryStep {
    /// Not a whole request yet.
    Incomplete,
    /// One request was executed; it used this many input bytes.
    Consumed(usize),
    /// A request was refused and answered; skip `consumed` bytes now and
    /// swallow `remaining` more as they arrive (an oversized value).
    Swallow { consumed: usize, remaining: usize },
    /// Write pending replies, then close (`quit`).
    CloseAfterWrite(usize),
    /// Close the connection.
    Close,
}

/// Execute the binary request at the start of `input`, if it is complete.
pub fn step(exec: &Exec<'_>, input: &[u8], out: &mut Vec<u8>) -> BinaryStep {
    let _ = (exec, input, out);
    BinaryStep::Close
}

//! Execution of meta commands (`mg ms md ma me`).
//!
//! Placeholder: the parser answers every meta command but `mn` with `ERROR`,
//! so nothing reaches here yet.

use protocol::meta::MetaRequest;

use crate::exec::{Exec, Flow};

/// Called before an `ms` data block is read. Returns false (after writing the
/// reply) when the value is refused, and the caller then swallows the block.
pub fn admit_data(exec: &Exec<'_>, req: &MetaRequest<'_>, out: &mut Vec<u8>) -> bool {
    let _ = (exec, req, out);
    true
}

/// Execute one meta request; `data` is the `ms` data block with its `\r\n`.
pub fn execute(
    exec: &Exec<'_>,
    req: MetaRequest<'_>,
    data: Option<&[u8]>,
    out: &mut Vec<u8>,
    flush_mark: &mut usize,
) -> Flow {
    let _ = (exec, req, data, flush_mark);
    out.extend_from_slice(b"ERROR\r\n");
    Flow::Continue
}

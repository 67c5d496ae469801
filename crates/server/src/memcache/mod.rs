//! memcached text and meta protocol (being written; see the memcache branch).

use crate::proto::{Cx, Outcome};

#[derive(Debug, Default)]
pub(crate) struct McConn {}

impl McConn {
    pub(crate) fn process(
        &mut self,
        _cx: &mut Cx<'_>,
        input: &[u8],
        out: &mut Vec<u8>,
        _reply_budget: usize,
    ) -> Outcome {
        out.extend_from_slice(b"SERVER_ERROR memcached protocol not in this build\r\n");
        Outcome {
            consumed: input.len(),
            close: true,
            abort: false,
        }
    }
}

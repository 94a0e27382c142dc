//! Turns finished request parts into statistics: per server for each part,
//! and for the whole request (total, and the per-second timeline) with its
//! last part.

use super::{End, Part, Session};
use crate::stats::Scope;
use crate::stats::Stats;
use crate::workload::OpKind;

/// The run's time window as a worker sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    pub(super) warmup_ns: u64,
    pub(super) end_ns: u64,
    pub(super) timeout_ns: u64,
}

impl Window {
    pub(super) fn measured(&self, start_ns: u64) -> bool {
        start_ns >= self.warmup_ns && start_ns < self.end_ns
    }
}

/// How a part was answered.
#[derive(Clone, Copy)]
pub(super) struct Answer {
    pub(super) end: End,
    pub(super) hits: u32,
    pub(super) corrupt: u32,
}

/// Turns finished requests into statistics.
pub(super) struct Recorder {
    pub(super) stats: Stats,
    pub(super) window: Window,
    /// When the last measured request completed (ns since start).
    pub(super) last_done_ns: u64,
}

impl Recorder {
    /// Records a finished part into its server's scope and, with its last
    /// part, the whole request into the total. Frees the session's slot.
    /// Returns true when this was the request's last part.
    #[must_use = "the worker's outstanding count drops only when a request finishes"]
    pub(super) fn complete(
        &mut self,
        session: &mut Session,
        server: usize,
        part: Part,
        answer: Answer,
        now: u64,
    ) -> bool {
        let w = self.window;
        let slot = &mut session.slots[part.slot as usize];
        slot.parts_left -= 1;
        slot.hits += answer.hits;
        slot.corrupt += answer.corrupt;
        let failed = matches!(answer.end, End::Failed | End::Lost);
        slot.failed |= failed;
        slot.timed_out |= answer.end == End::TimedOut;
        slot.lost |= answer.end == End::Lost;
        let measured = w.measured(slot.start_ns);
        let mut latency = now.saturating_sub(slot.start_ns);
        if answer.end == End::TimedOut {
            latency = latency.max(w.timeout_ns);
        }
        let late = latency > w.timeout_ns;
        if measured {
            let scope = &mut self.stats.servers[server];
            let timed_out = late || answer.end == End::TimedOut;
            account(
                scope,
                part.kind,
                part.nkeys,
                answer.hits,
                answer.corrupt,
                failed,
                timed_out,
                (answer.end != End::Lost).then_some(latency),
            );
        }
        if slot.parts_left > 0 {
            return false;
        }
        let slot = *slot;
        session.free.push(part.slot);
        session.outstanding -= 1;
        if measured {
            self.last_done_ns = self.last_done_ns.max(now);
            // The drain after the end counts in the last measured second,
            // so the timeline ends with the window, not with a stub.
            let since_warmup = now
                .min(w.end_ns.saturating_sub(1))
                .saturating_sub(w.warmup_ns);
            self.stats.count_second(since_warmup, slot.failed);
            let timed_out = late || slot.timed_out;
            account(
                &mut self.stats.total,
                slot.kind,
                slot.nkeys,
                slot.hits,
                slot.corrupt,
                slot.failed,
                timed_out,
                (!slot.lost).then_some(latency),
            );
        }
        true
    }
}

#[allow(clippy::too_many_arguments)]
fn account(
    scope: &mut Scope,
    kind: OpKind,
    nkeys: u32,
    hits: u32,
    corrupt: u32,
    failed: bool,
    timed_out: bool,
    latency_ns: Option<u64>,
) {
    let c = &mut scope.counters;
    c.ops += 1;
    c.keys += u64::from(nkeys);
    match kind {
        OpKind::Get => {
            c.gets += 1;
            c.get_keys += u64::from(nkeys);
            c.hits += u64::from(hits);
        }
        OpKind::Set => c.sets += 1,
    }
    c.errors += u64::from(failed);
    c.timeouts += u64::from(timed_out);
    c.verify_failures += u64::from(corrupt);
    if let Some(latency_ns) = latency_ns {
        scope.record(latency_ns);
    }
}

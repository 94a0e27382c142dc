//! The UDP side of a worker: one datagram per request part, replies
//! reassembled by request id, and requests given up after `--timeout`.

use std::io;
use std::os::fd::AsRawFd;

use anyhow::Context;
use protocol::client::{UdpHeader, UDP_HEADER_BYTES};

use super::recorder::Answer;
use super::{report_corruption, End, LinkState, Partial, Worker, UDP_MAX_REQUEST_BYTES};
use crate::config::Load;
use crate::engine::wire::{self, Outcome};
use crate::verify;

impl Worker<'_> {
    /// UDP: queues what `compose_part` just wrote as one datagram (sent
    /// with the rest of this wake-up's by `flush_dirty`) and returns its
    /// request id; TCP: nothing to do yet (`u16::MAX` is never used as an
    /// id, so it flags TCP).
    pub(super) fn send_udp(&mut self, ci: usize, now: u64) -> u16 {
        let conn = &mut self.conns[ci];
        let LinkState::Udp {
            next_id, outbox, ..
        } = &mut conn.link
        else {
            return u16::MAX;
        };
        let id = *next_id;
        *next_id = if id == u16::MAX - 1 { 0 } else { id + 1 };
        let header = UdpHeader {
            request_id: id,
            seq: 0,
            total: 1,
        }
        .encode();
        if UDP_HEADER_BYTES + conn.out.len() <= UDP_MAX_REQUEST_BYTES {
            outbox.push(&[&header, &conn.out], None);
        }
        conn.out.clear();
        conn.sent_ns.push_back(now);
        id
    }

    /// UDP: drains the socket, reassembles replies by request id, and
    /// completes the requests they answer.
    pub(super) fn on_udp_readable(&mut self, ci: usize, now: u64) -> anyhow::Result<()> {
        let server = self.conns[ci].server;
        loop {
            let LinkState::Udp { socket, .. } = &self.conns[ci].link else {
                unreachable!("UDP link");
            };
            // Up to 32 reply datagrams per recvmmsg.
            let received = match self.inbox.recv(socket.as_raw_fd()) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(self.conn_error(server, e)),
            };
            for i in 0..received {
                self.on_udp_datagram(ci, i, now)?;
            }
            if received < self.inbox.capacity() {
                // Drained when the kernel returned; edge-triggered polling
                // wakes us for anything newer.
                break;
            }
        }
        Ok(())
    }

    /// UDP: the `i`th datagram of the last receive on connection `ci`.
    fn on_udp_datagram(&mut self, ci: usize, i: usize, now: u64) -> anyhow::Result<()> {
        let Some(datagram) = self.inbox.get(i) else {
            return Ok(());
        };
        if datagram.truncated {
            return Ok(());
        }
        let Some(h) = UdpHeader::decode(datagram.data) else {
            return Ok(());
        };
        let payload = &datagram.data[UDP_HEADER_BYTES..];
        let message: Vec<u8> = if h.total == 1 {
            payload.to_vec()
        } else {
            let LinkState::Udp { partial, .. } = &mut self.conns[ci].link else {
                unreachable!("UDP link");
            };
            let p = partial.entry(h.request_id).or_insert_with(|| Partial {
                total: h.total,
                chunks: vec![None; usize::from(h.total)],
            });
            if p.total != h.total || h.seq >= h.total {
                return Ok(());
            }
            p.chunks[usize::from(h.seq)] = Some(payload.to_vec());
            if p.chunks.iter().any(Option::is_none) {
                return Ok(());
            }
            let p = partial.remove(&h.request_id).expect("present");
            p.chunks.into_iter().flatten().flatten().collect()
        };
        self.complete_udp(ci, h.request_id, &message, now)
    }

    /// UDP: applies one reassembled message to the request it answers.
    /// memcached 1.6 sends a multi-get's values as separate one-datagram
    /// messages under the same request id, so a request stays in flight,
    /// counting its hits, until a message carries its `END`.
    fn complete_udp(&mut self, ci: usize, id: u16, message: &[u8], now: u64) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let conn = &mut self.conns[ci];
        let Some(at) = conn.inflight.iter().position(|p| p.request_id == id) else {
            return Ok(()); // a late reply to a request already given up
        };
        let part = &mut conn.inflight[at];
        let (mut pos, mut end) = (0, None);
        while let Some((outcome, next)) = wire::outcome_at(cfg.protocol, message, pos, part.kind)
            .with_context(|| {
                format!(
                    "bad UDP reply from server {}",
                    cfg.servers[conn.server].name
                )
            })?
        {
            pos = next;
            match outcome {
                Outcome::Hit { key, value } => {
                    part.hits += 1;
                    if cfg.verify && !verify::check_value(&message[key.clone()], &message[value]) {
                        part.corrupt += 1;
                        report_corruption(&self.rec.stats, &message[key]);
                    }
                }
                Outcome::Failed => part.failed = true,
                Outcome::Done { ok } => {
                    end = Some(if ok && !part.failed {
                        End::Ok
                    } else {
                        End::Failed
                    });
                    break;
                }
            }
        }
        let Some(end) = end else {
            return Ok(());
        };
        let part = conn.inflight.remove(at).expect("found");
        conn.sent_ns.remove(at);
        let session = &mut self.sessions[conn.session];
        let answer = Answer {
            end,
            hits: part.hits,
            corrupt: part.corrupt,
        };
        if self.rec.complete(session, conn.server, part, answer, now) {
            self.outstanding -= 1;
            if cfg.load == Load::Closed && now < self.shared.end_ns {
                self.refill.push(conn.session);
                self.refill_sessions(now);
            }
        }
        Ok(())
    }

    /// UDP: gives up on requests older than `--timeout`, counting their
    /// missing datagrams as lost.
    pub(super) fn expire_udp(&mut self, now: u64) {
        let cfg = self.cfg;
        for ci in 0..self.conns.len() {
            loop {
                let conn = &mut self.conns[ci];
                let Some(&sent) = conn.sent_ns.front() else {
                    break;
                };
                if now.saturating_sub(sent) < self.timeout_ns {
                    break;
                }
                conn.sent_ns.pop_front();
                let part = conn.inflight.pop_front().expect("parallel queues");
                let LinkState::Udp { partial, .. } = &mut conn.link else {
                    break;
                };
                let lost = partial.remove(&part.request_id).map_or(1, |p| {
                    p.chunks.iter().filter(|c| c.is_none()).count() as u64
                });
                let measured = self
                    .rec
                    .window
                    .measured(self.sessions[conn.session].slots[part.slot as usize].start_ns);
                if measured {
                    self.rec.stats.total.counters.lost_datagrams += lost;
                    self.rec.stats.servers[conn.server].counters.lost_datagrams += lost;
                }
                let session = &mut self.sessions[conn.session];
                let finished = self.rec.complete(
                    session,
                    conn.server,
                    part,
                    Answer {
                        end: End::TimedOut,
                        hits: 0,
                        corrupt: 0,
                    },
                    now,
                );
                self.outstanding -= usize::from(finished);
                if finished && cfg.load == Load::Closed {
                    self.refill.push(conn.session);
                }
            }
        }
    }
}

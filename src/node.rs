//! A member on a real link: the sans-IO engine driven by a [`Link`] and the wall clock.
//!
//! This is the thin I/O layer. [`Node::poll`] does one turn of the loop the engine asks for:
//! send what the engine wants sent, wait for frames no longer than the engine's next timer,
//! feed every frame in, fire due timers, send again. The blocking calls ([`Node::recv_from`],
//! [`Node::wait_idle`], [`Node::next_event`]) are loops of `poll` with a deadline, so no call
//! waits forever.
//!
//! Ranks map to MAC addresses through the peer table given at construction. A frame whose
//! source MAC is not the MAC of the rank it claims is dropped and counted: on a shared segment
//! that is the cheapest defence against a confused or spoofing host (the group key is the real
//! one).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::eqa::Rank;
use crate::link::{Link, LinkError, MacAddr, BROADCAST_MAC};
use crate::proto::{Algo, Config, ConfigError, Dest, Engine, Event, PostError, SendError};

/// Errors of a member on a real link.
#[derive(Debug, Error)]
pub enum NodeError {
    /// The link failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The engine configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The broadcast could not be queued.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The receive could not be posted.
    #[error(transparent)]
    Post(#[from] PostError),
    /// The peer table does not match the group size.
    #[error("peer table has {got} MAC addresses for a group of {want}")]
    Peers {
        /// Entries given.
        got: usize,
        /// Group size.
        want: usize,
    },
    /// Nothing arrived before the deadline.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, &'static str),
    /// A posted receive was smaller than the message.
    #[error("message {msg_id} from root {root} has {len} bytes, the receive allowed {max}")]
    Truncated {
        /// Root.
        root: Rank,
        /// Message id.
        msg_id: u64,
        /// Real length.
        len: usize,
        /// Allowed length.
        max: usize,
    },
}

/// Counters of the I/O layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Frames handed to the link.
    pub frames_sent: u64,
    /// Frames received from the link.
    pub frames_received: u64,
    /// Frames whose source MAC did not match the rank they claim.
    pub mac_mismatch: u64,
}

/// One member: an engine, a link and the rank-to-MAC table.
pub struct Node {
    engine: Engine,
    link: Box<dyn Link + Send>,
    peers: Vec<MacAddr>,
    buf: Vec<u8>,
    events: VecDeque<Event>,
    stats: NodeStats,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("rank", &self.engine.config().rank)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Node {
    /// A member with `cfg` on `link`; `peers[r]` is the MAC address of rank `r`.
    pub fn new(
        mut cfg: Config,
        link: Box<dyn Link + Send>,
        peers: Vec<MacAddr>,
    ) -> Result<Node, NodeError> {
        if peers.len() != usize::from(cfg.size) {
            return Err(NodeError::Peers {
                got: peers.len(),
                want: usize::from(cfg.size),
            });
        }
        cfg.max_pdu = cfg.max_pdu.min(link.max_pdu());
        let buf = vec![0u8; cfg.max_pdu.max(crate::wire::OVERHEAD)];
        Ok(Node {
            engine: Engine::new(cfg)?,
            link,
            peers,
            buf,
            events: VecDeque::new(),
            stats: NodeStats::default(),
        })
    }

    /// The engine (configuration, counters, cursors).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
    /// Mutable access to the engine, for the layers above (control frames, eviction).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
    /// I/O counters.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }
    /// This member's rank.
    pub fn rank(&self) -> Rank {
        self.engine.config().rank
    }

    /// Queues a broadcast; frames leave on the next `poll`.
    pub fn bcast(&mut self, data: Vec<u8>, algo: Algo) -> Result<u64, NodeError> {
        let id = self.engine.bcast(Instant::now(), data, algo)?;
        self.flush()?;
        Ok(id)
    }

    fn flush(&mut self) -> Result<(), NodeError> {
        let now = Instant::now();
        while let Some(t) = self.engine.poll_transmit(now, &mut self.buf) {
            let dst = match t.dst {
                Dest::All => BROADCAST_MAC,
                Dest::Rank(r) => self.peers[usize::from(r)],
            };
            self.link.send(dst, &self.buf[..t.len])?;
            self.stats.frames_sent += 1;
        }
        self.link.flush()?;
        Ok(())
    }

    /// One turn: send, wait up to `wait` (or the engine's next timer, if sooner) for frames,
    /// handle them and the timers, send again.
    pub fn poll(&mut self, wait: Duration) -> Result<(), NodeError> {
        self.flush()?;
        let now = Instant::now();
        let wait = match self.engine.poll_timeout() {
            Some(t) => wait.min(t.saturating_duration_since(now)),
            None => wait,
        };
        let engine = &mut self.engine;
        let peers = &self.peers;
        let stats = &mut self.stats;
        self.link.recv(Some(wait), &mut |src, pdu| {
            stats.frames_received += 1;
            // Bytes 8..10 of a PDU are the claimed source rank (checked properly by the engine).
            if pdu.len() >= 10 {
                let rank = usize::from(u16::from_be_bytes([pdu[8], pdu[9]]));
                if peers.get(rank).is_some_and(|m| *m != src) {
                    stats.mac_mismatch += 1;
                    return;
                }
            }
            let _ = engine.handle_frame(Instant::now(), pdu);
        })?;
        self.engine.handle_timeout(Instant::now());
        while let Some(ev) = self.engine.poll_event() {
            self.events.push_back(ev);
        }
        self.flush()
    }

    /// The next event, polling until `deadline`.
    pub fn next_event(&mut self, deadline: Instant) -> Result<Option<Event>, NodeError> {
        loop {
            if let Some(ev) = self.events.pop_front() {
                return Ok(Some(ev));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.poll((deadline - now).min(Duration::from_millis(50)))?;
        }
    }

    /// Events already received and not yet taken.
    pub fn take_events(&mut self) -> impl Iterator<Item = Event> + '_ {
        self.events.drain(..)
    }

    /// Waits for the next message of `root` and returns its id and bytes. Other events stay
    /// queued.
    pub fn recv_from(
        &mut self,
        root: Rank,
        timeout: Duration,
    ) -> Result<(u64, Vec<u8>), NodeError> {
        let deadline = Instant::now() + timeout;
        loop {
            let pos = self.events.iter().position(|e| match e {
                Event::Delivered { root: r, .. } | Event::Truncated { root: r, .. } => *r == root,
                _ => false,
            });
            if let Some(p) = pos {
                match self.events.remove(p) {
                    Some(Event::Delivered { msg_id, data, .. }) => return Ok((msg_id, data)),
                    Some(Event::Truncated {
                        root,
                        msg_id,
                        len,
                        max,
                    }) => {
                        return Err(NodeError::Truncated {
                            root,
                            msg_id,
                            len,
                            max,
                        })
                    }
                    _ => unreachable!("position matched a delivery"),
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(NodeError::Timeout(timeout, "a message from the root"));
            }
            self.poll((deadline - now).min(Duration::from_millis(50)))?;
        }
    }

    /// Waits until every live destination has acknowledged everything this member sent.
    pub fn wait_idle(&mut self, timeout: Duration) -> Result<(), NodeError> {
        let deadline = Instant::now() + timeout;
        while !self.engine.is_idle() {
            let now = Instant::now();
            if now >= deadline {
                return Err(NodeError::Timeout(
                    timeout,
                    "acknowledgements of our broadcasts",
                ));
            }
            self.poll((deadline - now).min(Duration::from_millis(50)))?;
        }
        Ok(())
    }
}

//! A hostile host on the test-bed: it reads every ethbcast frame its port sees, records them,
//! replays them, and forges frames from them. The attack suite (`ethbcast-suite attack`) and
//! the keyed-transfer test use it to check that a group or transfer with a key survives a
//! host on the segment that has no key.
//!
//! Forgeries are built from frames captured live, because every session derives its own wire
//! group id (and key) from a fresh nonce at join: a frame made from the configured group id
//! alone would be ignored as foreign and would prove nothing. Each forgery is CRC-valid, so
//! it reaches the parser, the session check and the tag check instead of being dropped as
//! noise. Frames of a keyed session are forged with a tag of the attacker's own key
//! ([`ATTACKER_KEY`]); the hostile host does not know the group's.
//!
//! The raw frames go through `pnet_datalink` (an `AF_PACKET` socket), so the source MAC is
//! whatever the frame says: a test-bed port with MAC learning off
//! ([`crate::testbed::Testbed::set_learning`]) models switch port security.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ethbcast::{Rank, BROADCAST_MAC};
// The wire format: the hostile host forges frames (headers, CRCs, tags, pair channels),
// which the library does not export.
use ethbcast_proto::{
    pdu_crc, seal, BarrierAlgo, BarrierMsg, BarrierOp, Control, Flags, Frame, Kind, Repr, CRC_LEN,
    ETH_HEADER_LEN, OVERHEAD, TAG_LEN,
};
use rand::{Rng, RngCore};

use crate::netns;

/// The key the hostile host tags its forgeries with: not the group's.
pub const ATTACKER_KEY: [u8; 32] = [0x5A; 32];

/// The EtherType of ethbcast frames.
const ETHERTYPE: [u8; 2] = [0x88, 0xB5];

/// Errors of the hostile host.
#[derive(Debug, thiserror::Error)]
pub enum HostileError {
    /// The interface is missing from the namespace.
    #[error("no interface {0} in this namespace")]
    NoInterface(String),
    /// The raw socket could not be opened (needs CAP_NET_RAW).
    #[error("cannot open a raw socket on {iface}: {source} (run as root)")]
    Channel {
        /// Interface.
        iface: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The thread could not enter the namespace.
    #[error("cannot start the hostile host in namespace {netns}: {source}")]
    Spawn {
        /// Namespace.
        netns: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The hostile thread panicked.
    #[error("the hostile host's thread panicked")]
    Panicked,
}

/// A raw port on `eth0` of the namespace the calling thread is in.
pub struct Port {
    tx: Box<dyn pnet_datalink::DataLinkSender>,
    rx: Box<dyn pnet_datalink::DataLinkReceiver>,
    /// Frames sent.
    pub sent: usize,
}

impl Port {
    /// Opens `eth0` of the current namespace; reads wait at most `read_timeout`.
    pub fn open(read_timeout: Duration) -> Result<Port, HostileError> {
        let iface = pnet_datalink::interfaces()
            .into_iter()
            .find(|i| i.name == "eth0")
            .ok_or_else(|| HostileError::NoInterface("eth0".into()))?;
        let config = pnet_datalink::Config {
            read_timeout: Some(read_timeout),
            ..Default::default()
        };
        match pnet_datalink::channel(&iface, config) {
            Ok(pnet_datalink::Channel::Ethernet(tx, rx)) => Ok(Port { tx, rx, sent: 0 }),
            Ok(_) => Err(HostileError::Channel {
                iface: "eth0".into(),
                source: std::io::Error::other("not an Ethernet channel"),
            }),
            Err(source) => Err(HostileError::Channel {
                iface: "eth0".into(),
                source,
            }),
        }
    }

    /// The next ethbcast frame the port sees (with its Ethernet header), if one arrives
    /// before the read timeout.
    pub fn next_frame(&mut self) -> Option<Vec<u8>> {
        match self.rx.next() {
            Ok(f) if is_ethbcast(f) => Some(f.to_vec()),
            _ => None,
        }
    }

    /// Sends a whole Ethernet frame as it is (source MAC included).
    pub fn send(&mut self, frame: &[u8]) {
        if frame.len() > ETH_HEADER_LEN {
            let _ = self.tx.send_to(frame, None);
            self.sent += 1;
        }
    }
}

/// Whether `frame` (with its Ethernet header) carries an ethbcast PDU.
pub fn is_ethbcast(frame: &[u8]) -> bool {
    frame.len() > ETH_HEADER_LEN + OVERHEAD && frame[12..14] == ETHERTYPE
}

/// The PDU of a captured frame, checked (CRC, version, kind).
pub fn pdu(eth: &[u8]) -> Option<Frame<&[u8]>> {
    Frame::new_checked(eth.get(ETH_HEADER_LEN..)?).ok()
}

/// Rewrites the CRC of the PDU in `eth` after its bytes were changed.
fn fix_crc(eth: &mut [u8]) -> Option<()> {
    let pdu = eth.get_mut(ETH_HEADER_LEN..)?;
    let total = Frame::new_unchecked(&*pdu).total_len();
    if total > pdu.len() || total < OVERHEAD {
        return None;
    }
    let body = total - CRC_LEN;
    let crc = pdu_crc(pdu, body);
    pdu[body..total].copy_from_slice(&crc.to_be_bytes());
    Some(())
}

/// A copy of `eth` with one bit flipped after the first 8 bytes of the header (version, kind,
/// flags and group id stay, so the copy reaches the session's checks) and a valid CRC.
pub fn mutate(eth: &[u8], rng: &mut impl RngCore) -> Option<Vec<u8>> {
    let mut m = eth.to_vec();
    let total = Frame::new_unchecked(m.get(ETH_HEADER_LEN..)?).total_len();
    if total > m.len() - ETH_HEADER_LEN || total <= OVERHEAD + 8 {
        return None;
    }
    let at = 8 + (rng.next_u32() as usize) % (total - CRC_LEN - 8);
    m[ETH_HEADER_LEN + at] ^= 1 << (rng.next_u32() % 8);
    fix_crc(&mut m)?;
    Some(m)
}

/// A frame with the header fields of `template` (its session's group id, its keyed flag)
/// but random contents otherwise, CRC-valid, from the template's source MAC.
pub fn random_from(template: &[u8], rng: &mut impl RngCore) -> Option<Vec<u8>> {
    let f = pdu(template)?;
    let mut r = Repr::new(Kind::from_code(1 + (rng.next_u32() % 12) as u8)?);
    r.group = f.group();
    r.src = Rank::new((rng.next_u32() % 8) as u16);
    r.dst = if rng.next_u32().is_multiple_of(2) {
        Rank::BROADCAST
    } else {
        Rank::new((rng.next_u32() % 8) as u16)
    };
    r.seq = rng.next_u32();
    r.msg_id = rng.next_u32();
    r.msg_len = rng.next_u32();
    r.offset = rng.next_u32();
    r.bitmap = rng.next_u32() as u16;
    r.aux = rng.next_u32();
    let mut payload = vec![0u8; (rng.next_u32() % 200) as usize];
    rng.fill_bytes(&mut payload);
    let keyed = f.flags().contains(Flags::KEYED);
    Some(frame_from(template, &r.to_vec(&payload).ok()?, keyed))
}

/// Random bytes after an ethbcast Ethernet header (mostly failing the CRC or the version).
pub fn noise(src: [u8; 6], rng: &mut impl RngCore) -> Vec<u8> {
    let mut f = vec![0xFF; 6];
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE);
    let mut junk = vec![0u8; 46 + (rng.next_u32() % 1400) as usize];
    rng.fill_bytes(&mut junk);
    f.extend_from_slice(&junk);
    f
}

/// An Ethernet frame with `template`'s header carrying `pdu`, tagged with [`ATTACKER_KEY`] if
/// `keyed`.
fn frame_from(template: &[u8], pdu: &[u8], keyed: bool) -> Vec<u8> {
    let mut pdu = pdu.to_vec();
    if keyed {
        let n = pdu.len();
        pdu.resize(n + TAG_LEN, 0);
        if seal(&ATTACKER_KEY, &mut pdu, n).is_err() {
            pdu.truncate(n);
        }
    }
    let mut frame = template[..ETH_HEADER_LEN].to_vec();
    frame.extend_from_slice(&pdu);
    frame
}

/// Where a forged frame goes and whom it claims to come from.
#[derive(Debug, Clone, Copy)]
pub struct Spoof {
    /// Claimed source rank.
    pub src: Rank,
    /// Destination rank (or [`Rank::BROADCAST`]).
    pub dst: Rank,
    /// Source MAC of the Ethernet frame.
    pub src_mac: [u8; 6],
    /// Destination MAC of the Ethernet frame.
    pub dst_mac: [u8; 6],
    /// Tag the frame with [`ATTACKER_KEY`] if the template is keyed (otherwise send it
    /// without a tag, as an unkeyed member would).
    pub tag: bool,
}

impl Spoof {
    /// As rank 0 from `root_mac`, to every member at the broadcast MAC.
    pub fn from_root(root_mac: [u8; 6], tag: bool) -> Spoof {
        Spoof {
            src: Rank::new(0),
            dst: Rank::BROADCAST,
            src_mac: root_mac,
            dst_mac: BROADCAST_MAC.0,
            tag,
        }
    }
}

/// Fresh control counters far ahead of any real one: each forgery takes a new one, so that
/// an unkeyed group's replay window would take every one.
#[derive(Debug, Clone, Copy)]
pub struct Counter(u32);

impl Default for Counter {
    fn default() -> Self {
        Counter(1 << 30)
    }
}

impl Counter {
    /// The next counter.
    pub fn fresh(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(1);
        self.0
    }
}

/// The control message `control` as `spoof` says, in the session (group id) of `template`,
/// with the next counter of `ctr`.
pub fn forge_control(
    template: &[u8],
    control: &Control,
    spoof: Spoof,
    ctr: &mut Counter,
) -> Option<Vec<u8>> {
    let f = pdu(template)?;
    let keyed = spoof.tag && f.flags().contains(Flags::KEYED);
    let mut frame = frame_from(
        template,
        &control.to_vec(f.group(), spoof.src, spoof.dst, ctr.fresh()),
        keyed,
    );
    let (src_mac, dst_mac) = (spoof.src_mac, spoof.dst_mac);
    frame[..6].copy_from_slice(&dst_mac);
    frame[6..12].copy_from_slice(&src_mac);
    Some(frame)
}

/// The sender's abort notice of `ethbcast send`, forged from a frame the sender (rank 0)
/// sent. Without a key every receiver would abort and delete its output.
pub fn forge_abort(eth: &[u8]) -> Option<Vec<u8>> {
    let f = pdu(eth)?;
    if f.src() != Rank::new(0) || f.kind() == Kind::Join {
        return None;
    }
    let notice = Control::Notice {
        body: crate::transfer::ABORT.to_vec(),
    };
    let mut src = [0u8; 6];
    src.copy_from_slice(&eth[6..12]);
    let spoof = Spoof::from_root(src, true);
    forge_control(eth, &notice, spoof, &mut Counter::default())
}

/// Data frames that race the real ones: for a data frame of the running session, the next
/// two sequence numbers with random payloads, ahead of the sender's. Without a key,
/// receivers would take them.
pub fn forge_ahead(eth: &[u8], rng: &mut impl RngCore) -> Vec<Vec<u8>> {
    let Some(f) = pdu(eth) else {
        return Vec::new();
    };
    if !f.kind().is_data() {
        return Vec::new();
    }
    let keyed = f.flags().contains(Flags::KEYED);
    let repr = Repr::parse(&f);
    let len = f.payload().len();
    (1..=2u32)
        .filter_map(|k| {
            let mut r = repr;
            r.flags.remove(Flags::KEYED);
            r.seq = r.seq.wrapping_add(k);
            r.offset = r.offset.wrapping_add(k * len as u32);
            let mut junk = vec![0u8; len];
            rng.fill_bytes(&mut junk);
            Some(frame_from(eth, &r.to_vec(&junk).ok()?, keyed))
        })
        .collect()
}

/// The barrier message of a captured barrier frame: read from it when its payload is in the
/// clear, else (an encrypted session) a guess at one: the combining tree's, of epoch `epoch`,
/// with an empty view and arrival set. A host without the key reads the kind of a frame in its
/// header and nothing of its content, so it guesses the rest; the forgery fails the tag either
/// way.
pub fn barrier_of(p: &Frame<&[u8]>, epoch: u32) -> Option<BarrierMsg> {
    match Control::parse(p) {
        Ok(Control::Barrier(b)) => Some(b),
        _ if p.kind() == Kind::Barrier && p.flags().contains(Flags::ENCRYPTED) => {
            Some(BarrierMsg {
                algo: BarrierAlgo::Broadcast,
                op: BarrierOp::Arrive,
                epoch,
                round: 0,
                view: 0,
                set: Vec::new(),
            })
        }
        _ => None,
    }
}

/// A hostile host running in a thread inside a host namespace until stopped.
pub struct Hostile<T> {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Result<T, HostileError>>,
}

impl<T: Send + 'static> Hostile<T> {
    /// Runs `attack` on a [`Port`] of `netns` (reads wait at most `read_timeout`) until
    /// [`Hostile::stop`]; `attack` is given the port and the stop flag and must return once
    /// the flag is set.
    pub fn spawn(
        netns: &str,
        read_timeout: Duration,
        attack: impl FnOnce(&mut Port, &AtomicBool) -> T + Send + 'static,
    ) -> Result<Self, HostileError> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = netns::spawn_in(netns, move || {
            let port = Port::open(read_timeout);
            let _ = ready_tx.send(());
            let mut port = port?;
            Ok(attack(&mut port, &s))
        })
        .map_err(|source| HostileError::Spawn {
            netns: netns.to_string(),
            source,
        })?;
        // The port listens before this returns: what the caller starts next is seen from its
        // first frame, however late the thread was scheduled. (A port that failed to open
        // says so from `stop`.)
        let _ = ready_rx.recv_timeout(Duration::from_secs(10));
        Ok(Hostile { stop, handle })
    }

    /// Stops the attack and returns what it returned.
    pub fn stop(self) -> Result<T, HostileError> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().map_err(|_| HostileError::Panicked)?
    }
}

/// Records up to `limit` ethbcast frames the port of `netns` sees, until stopped.
pub fn record(netns: &str, limit: usize) -> Result<Hostile<Vec<Vec<u8>>>, HostileError> {
    Hostile::spawn(netns, Duration::from_millis(20), move |port, stop| {
        let mut got = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            if let Some(f) = port.next_frame() {
                if got.len() < limit {
                    got.push(f);
                }
            }
        }
        got
    })
}

/// Sends `frames` (recorded earlier) again and again from `netns`, each followed by a mutated
/// copy, and forges frames of the running session it sees: a mutated copy of each, data
/// ahead of the sender's ([`forge_ahead`]) and, every 20 ms, the sender's abort notice
/// ([`forge_abort`]). Returns the number of frames sent.
pub fn replay_and_forge(netns: &str, frames: Vec<Vec<u8>>) -> Result<Hostile<usize>, HostileError> {
    Hostile::spawn(netns, Duration::from_micros(200), move |port, stop| {
        use rand::SeedableRng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(99);
        let mut last_abort = std::time::Instant::now();
        let mut next = 0usize;
        while !stop.load(Ordering::SeqCst) {
            if let Some(f) = port.next_frame() {
                if let Some(m) = mutate(&f, &mut rng) {
                    port.send(&m);
                }
                for ahead in forge_ahead(&f, &mut rng) {
                    port.send(&ahead);
                }
                if last_abort.elapsed() > Duration::from_millis(20) {
                    if let Some(abort) = forge_abort(&f) {
                        port.send(&abort);
                        last_abort = std::time::Instant::now();
                    }
                }
            }
            if let Some(f) = frames.get(next % frames.len().max(1)) {
                port.send(f);
                if let Some(m) = mutate(f, &mut rng) {
                    port.send(&m);
                }
                next += 1;
            }
        }
        port.sent
    })
}

/// A forged data message of `len` bytes `payload` from `src` to `dst` on group `group` (a
/// session's or a point-to-point channel's, see [`ethbcast_proto::pair_group`]), as frame
/// `seq` of message `msg_id`, in the session of `template`.
pub fn forge_data(
    template: &[u8],
    group: u32,
    spoof: Spoof,
    seq: u32,
    msg_id: u32,
    payload: &[u8],
) -> Option<Vec<u8>> {
    let f = pdu(template)?;
    let keyed = spoof.tag && f.flags().contains(Flags::KEYED);
    let mut r = Repr::new(Kind::Data);
    r.group = group;
    r.src = spoof.src;
    r.dst = spoof.dst;
    r.seq = seq;
    r.msg_id = msg_id;
    r.msg_len = payload.len() as u32;
    r.flags = Flags::LAST;
    let mut frame = frame_from(template, &r.to_vec(payload).ok()?, keyed);
    frame[..6].copy_from_slice(&spoof.dst_mac);
    frame[6..12].copy_from_slice(&spoof.src_mac);
    Some(frame)
}

/// Picks a random element (for the attacks' choices of frames).
pub fn pick<'a, T>(items: &'a [T], rng: &mut impl Rng) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[rng.gen_range(0..items.len())])
}

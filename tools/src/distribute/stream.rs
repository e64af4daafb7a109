//! The stream protocol carried by the broadcast messages, and the control payloads.
//!
//! Broadcast messages from the sender (rank 0), first byte = type:
//! - `H` header: magic `EBDS`, version (1), total size (u64, `u64::MAX` = unknown), chunk
//!   size (u32);
//! - `D` data: the next bytes of the stream;
//! - `T` trailer: total bytes (u64) and the BLAKE3 digest (32 bytes) of the whole stream;
//! - `A` abort: a reason (UTF-8).
//!
//! Point-to-point messages from a receiver to the sender: `J` (joined) and `F` (final
//! report: ok flag, bytes, digest, error text).
//!
//! Control frames (`Join` kind, told apart by a 4-byte magic): `EBDH` hello + MAC,
//! `EBDR` roster (count u16 + MACs in rank order), `EBDX` abort, `EBDE` "you were evicted".

use ethbcast::link::MacAddr;

/// Protocol version in the header.
pub const VERSION: u8 = 1;
/// Header magic.
pub const MAGIC: &[u8; 4] = b"EBDS";
/// Receiver hello.
pub const HELLO: &[u8; 4] = b"EBDH";
/// Roster.
pub const ROSTER: &[u8; 4] = b"EBDR";
/// Abort control.
pub const ABORT: &[u8; 4] = b"EBDX";
/// Eviction notice.
pub const EVICTED: &[u8; 4] = b"EBDE";
/// Unknown total size.
pub const UNKNOWN: u64 = u64::MAX;

/// One broadcast message of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Header.
    Header {
        /// Total bytes, if known.
        total: Option<u64>,
        /// Chunk size.
        chunk: u32,
    },
    /// Data.
    Data(Data),
    /// Trailer.
    Trailer {
        /// Bytes in the stream.
        bytes: u64,
        /// BLAKE3 of the stream.
        digest: [u8; 32],
    },
    /// Abort.
    Abort(String),
}

impl Msg {
    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Header { total, chunk } => {
                let mut v = vec![b'H'];
                v.extend_from_slice(MAGIC);
                v.push(VERSION);
                v.extend_from_slice(&total.unwrap_or(UNKNOWN).to_be_bytes());
                v.extend_from_slice(&chunk.to_be_bytes());
                v
            }
            Msg::Data(d) => d.0.clone(),
            Msg::Trailer { bytes, digest } => {
                let mut v = vec![b'T'];
                v.extend_from_slice(&bytes.to_be_bytes());
                v.extend_from_slice(digest);
                v
            }
            Msg::Abort(r) => {
                let mut v = vec![b'A'];
                v.extend_from_slice(r.as_bytes());
                v
            }
        }
    }

    /// Decodes (taking the buffer, so data needs no copy beyond one shift).
    pub fn decode(m: Vec<u8>) -> Result<Msg, String> {
        let Some(&t) = m.first() else {
            return Err("empty message".into());
        };
        match t {
            b'H' => {
                if m.len() < 18 || &m[1..5] != MAGIC {
                    return Err("not an ethbcast stream header".into());
                }
                if m[5] != VERSION {
                    return Err(format!(
                        "stream version {} (this receiver speaks {VERSION})",
                        m[5]
                    ));
                }
                let total = u64::from_be_bytes(m[6..14].try_into().expect("8 bytes"));
                let chunk = u32::from_be_bytes(m[14..18].try_into().expect("4 bytes"));
                Ok(Msg::Header {
                    total: (total != UNKNOWN).then_some(total),
                    chunk,
                })
            }
            b'D' => Ok(Msg::Data(Data(m))),
            b'T' if m.len() == 41 => Ok(Msg::Trailer {
                bytes: u64::from_be_bytes(m[1..9].try_into().expect("8 bytes")),
                digest: m[9..41].try_into().expect("32 bytes"),
            }),
            b'A' => Ok(Msg::Abort(String::from_utf8_lossy(&m[1..]).into_owned())),
            _ => Err(format!("unknown stream message type {t:#x}")),
        }
    }
}

/// The bytes of a data message, kept in the buffer the engine delivered (type byte first):
/// decoding a megabyte of data copies none of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data(Vec<u8>);

impl Data {
    /// A data message carrying `bytes`.
    pub fn new(bytes: &[u8]) -> Data {
        let mut v = Vec::with_capacity(bytes.len() + 1);
        v.push(b'D');
        v.extend_from_slice(bytes);
        Data(v)
    }

    /// The stream bytes it carries.
    pub fn bytes(&self) -> &[u8] {
        &self.0[1..]
    }
}

/// A receiver's final report to the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Final {
    /// Completed and the digest matched.
    pub ok: bool,
    /// Bytes received.
    pub bytes: u64,
    /// Error text if not ok.
    pub error: String,
}

impl Final {
    /// Encodes (`F` + ok + bytes + error).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![b'F', u8::from(self.ok)];
        v.extend_from_slice(&self.bytes.to_be_bytes());
        v.extend_from_slice(self.error.as_bytes());
        v
    }
    /// Decodes.
    pub fn decode(m: &[u8]) -> Option<Final> {
        if m.len() < 10 || m[0] != b'F' {
            return None;
        }
        Some(Final {
            ok: m[1] == 1,
            bytes: u64::from_be_bytes(m[2..10].try_into().ok()?),
            error: String::from_utf8_lossy(&m[10..]).into_owned(),
        })
    }
}

/// Roster payload: magic, count, MACs.
pub fn encode_roster(peers: &[MacAddr]) -> Vec<u8> {
    let mut v = ROSTER.to_vec();
    v.extend_from_slice(&(peers.len() as u16).to_be_bytes());
    for m in peers {
        v.extend_from_slice(m);
    }
    v
}

/// Parses a roster payload.
pub fn decode_roster(p: &[u8]) -> Option<Vec<MacAddr>> {
    if p.len() < 6 || &p[..4] != ROSTER {
        return None;
    }
    let n = usize::from(u16::from_be_bytes([p[4], p[5]]));
    let body = &p[6..];
    if body.len() < n * 6 || n < 2 {
        return None;
    }
    Some(
        body.chunks_exact(6)
            .take(n)
            .map(|c| c.try_into().expect("6 bytes"))
            .collect(),
    )
}

/// Hex of a digest.
pub fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        for m in [
            Msg::Header {
                total: Some(123),
                chunk: 1 << 20,
            },
            Msg::Header {
                total: None,
                chunk: 7,
            },
            Msg::Data(Data::new(&[1, 2, 3])),
            Msg::Data(Data::new(&[])),
            Msg::Trailer {
                bytes: 99,
                digest: [7; 32],
            },
            Msg::Abort("ctrl-c".into()),
        ] {
            assert_eq!(Msg::decode(m.encode()).unwrap(), m);
        }
        assert!(Msg::decode(vec![]).is_err());
        assert!(Msg::decode(b"Hxxxx".to_vec()).is_err());
        let f = Final {
            ok: false,
            bytes: 5,
            error: "disk full".into(),
        };
        assert_eq!(Final::decode(&f.encode()), Some(f));
        let peers = vec![[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        assert_eq!(decode_roster(&encode_roster(&peers)), Some(peers));
    }
}

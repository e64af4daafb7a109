//! The end-to-end check: what the engine consumed of the stream (data bytes and their digest,
//! shared by the observer once a message) against what the sender's trailer says it sent.

use std::sync::Mutex;

use crate::distribute::{Fatal, EXIT_FAILED};
use crate::transfer::{DigestAlgo, PieceDigest};

/// What the engine had consumed of the stream when its last message ended: data bytes and
/// their digest (`None` before a header, see [`PieceDigest::digest`]). The observer keeps the
/// digest's state to itself and shares only this, once a message.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::distribute) struct Hashed {
    pub(super) bytes: u64,
    pub(super) digest: Option<(DigestAlgo, [u8; 32])>,
}

impl Hashed {
    pub(in crate::distribute) fn of(d: &PieceDigest) -> Hashed {
        Hashed {
            bytes: d.bytes(),
            digest: d.digest(),
        }
    }
}

/// The shared result, whatever a panic elsewhere left it as (a plain value: nothing to break).
pub(in crate::distribute) fn lock(d: &Mutex<Hashed>) -> std::sync::MutexGuard<'_, Hashed> {
    d.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether what the engine consumed of the stream is what the trailer says the sender sent:
/// as many data bytes, the same digest.
pub(super) fn check_digest(
    seen: &Mutex<Hashed>,
    bytes: u64,
    digest: &[u8; 32],
) -> Result<(), Fatal> {
    let d = *lock(seen);
    match d.digest {
        Some((_, mine)) if d.bytes == bytes && &mine == digest => Ok(()),
        Some((algo, mine)) => Err(Fatal::new(
            EXIT_FAILED,
            format!(
                "integrity check failed: got {} bytes {}, the sender sent {bytes} bytes {}",
                d.bytes,
                algo.render(&mine),
                algo.render(digest)
            ),
        )),
        None => Err(Fatal::new(
            EXIT_FAILED,
            "integrity check failed: stream data came before its header",
        )),
    }
}

/// Resumed at `from`: whether the engine consumed the rest of the stream, as many data bytes
/// as the trailer's count leaves after `from` (the digest is the writer's to check).
pub(super) fn check_count(seen: &Mutex<Hashed>, from: u64, bytes: u64) -> Result<(), Fatal> {
    let got = lock(seen).bytes;
    if from.checked_add(got) == Some(bytes) {
        Ok(())
    } else {
        Err(Fatal::new(
            EXIT_FAILED,
            format!("integrity check failed: resumed at byte {from} and got {got} bytes more, the sender sent {bytes} bytes"),
        ))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::transfer::{Data, Msg};

    /// What a digest fed the header and one data message of `data`, in two pieces each,
    /// shares.
    fn digest_of(data: &[u8]) -> Mutex<Hashed> {
        let mut d = PieceDigest::new();
        let header = Msg::Header {
            total: Some(data.len() as u64),
            chunk: 1 << 20,
            digest: crate::transfer::DigestAlgo::Xxh3,
        }
        .encode();
        for (id, m) in [header, Msg::Data(Data::new(data)).encode()]
            .iter()
            .enumerate()
        {
            let half = m.len() / 2;
            for (offset, bytes) in [(0, &m[..half]), (half, &m[half..])] {
                d.piece(&ethbcast::Piece {
                    msg_id: id as u64,
                    msg_len: m.len(),
                    offset,
                    bytes,
                    held: false,
                });
            }
        }
        Mutex::new(Hashed::of(&d))
    }

    pub(in crate::distribute) fn xxh3(data: &[u8]) -> [u8; 32] {
        let mut h = crate::transfer::StreamHasher::new(crate::transfer::DigestAlgo::Xxh3);
        h.update(data);
        h.finalize()
    }

    #[test]
    fn the_trailer_is_checked_against_what_the_engine_consumed() {
        let data = b"the stream's bytes";
        let seen = digest_of(data);
        assert!(check_digest(&seen, data.len() as u64, &xxh3(data)).is_ok());
        let e = check_digest(&seen, data.len() as u64, &xxh3(b"other bytes")).unwrap_err();
        assert_eq!(e.code, EXIT_FAILED);
        assert!(e.msg.contains("integrity check failed"), "{}", e.msg);
        let e = check_digest(&seen, data.len() as u64 + 1, &xxh3(data)).unwrap_err();
        assert!(e.msg.contains("the sender sent 19 bytes"), "{}", e.msg);
        let e = check_digest(&Mutex::new(Hashed::default()), 0, &xxh3(b"")).unwrap_err();
        assert!(e.msg.contains("before its header"), "{}", e.msg);
    }
}

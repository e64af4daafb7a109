//! A keyed engine's frame cipher ([`wire::crypt`]) and the frames it decrypted in the current
//! batch of frames.
//!
//! With a key, every frame this member sends is sealed ([`Crypt::seal`]): encrypted and
//! authenticated, or authenticated alone when the configuration does not encrypt. A received
//! frame that is encrypted is opened into room the engine keeps ([`Opened`]): while a stream
//! with an observer or frames left in the link (`hold`) may read it until the batch ends, the
//! room stays put, as the frames a link holds do; otherwise one frame's room is reused by the
//! next.

use crate::wire::{self, Frame, FrameCipher, Opened, WireError};

use super::EngineConfig;

/// The cipher and the frames it decrypted (see the module's doc).
#[derive(Debug, Default)]
pub(super) struct Crypt {
    /// Boxed: a cipher's key schedule and tables are about a kilobyte, which a keyless engine
    /// (every member of a simulated group of thousands) would otherwise carry.
    cipher: Option<Box<FrameCipher>>,
    opened: Opened,
    hold: bool,
}

impl Crypt {
    /// The cipher of `cfg`'s key, if it has one.
    pub(super) fn new(cfg: &EngineConfig) -> Crypt {
        Crypt {
            cipher: cfg
                .key
                .as_ref()
                .map(|k| Box::new(FrameCipher::new(k, cfg.group))),
            ..Crypt::default()
        }
    }

    /// Frames decrypted from now on stay put until their batch ends (a stream reads them
    /// there afterwards).
    pub(super) fn hold(&mut self) {
        self.hold = true;
    }

    /// Heap bytes of the room decrypted frames take.
    pub(super) fn heap_bytes(&self) -> usize {
        self.opened.heap_bytes()
    }

    /// Seals the frame of `len` bytes in `buf` as `cfg` says (encrypted, or with a tag alone;
    /// as it is without a key): its new length.
    pub(super) fn seal(
        &self,
        cfg: &EngineConfig,
        buf: &mut [u8],
        len: usize,
    ) -> Result<usize, WireError> {
        match (&cfg.key, &self.cipher) {
            (Some(_), Some(c)) if cfg.encrypt => c.seal(buf, len),
            (Some(key), _) => wire::seal(key, buf, len),
            (None, _) => Ok(len),
        }
    }

    /// The decrypted frames of this batch, taken while a frame is opened into them
    /// ([`Crypt::open`]) or the batch ends; given back with [`Crypt::put_back`].
    pub(super) fn take_opened(&mut self) -> Opened {
        std::mem::take(&mut self.opened)
    }

    /// Gives back the decrypted frames taken with [`Crypt::take_opened`].
    pub(super) fn put_back(&mut self, opened: Opened) {
        self.opened = opened;
    }

    /// Opens the encrypted `frame` into room of `opened`: the frame in the clear, or `None`
    /// without a cipher or when it does not open under the key.
    pub(super) fn open<'b>(
        &self,
        frame: &Frame<&[u8]>,
        opened: &'b mut Opened,
    ) -> Option<Frame<&'b [u8]>> {
        let c = self.cipher.as_ref()?;
        c.open(frame, opened.room(frame.total_len(), self.hold))
    }
}

//! What a receiver shows of the bytes it consumes: the [`Observe`] trait and its [`Piece`]s.

/// Sees the bytes of a root's messages as they are consumed, given to a receiver for one
/// root's stream.
pub type Observer = Box<dyn Observe>;

/// What an [`Observer`] is told: each piece of a root's messages as it is consumed, and when
/// the frames handed in since the last time are given back to the link. A closure taking a
/// [`Piece`] is an observer that ignores the second.
pub trait Observe: Send {
    /// The next bytes of the stream, in order.
    fn piece(&mut self, piece: &Piece<'_>);
    /// The frames handed in since the last call are about to be given back to the link
    /// that holds them, and the engine's copies consumed meanwhile may be reused: `memory`
    /// names where every piece with [`Piece::held`] set since the last call lies: the
    /// frames as the link holds them, whole (link headers included), and the engine's
    /// window of copies. An observer that kept where its pieces were writes them out now;
    /// after this call they are gone. A link that holds nothing passes no frames.
    fn frames_done(&mut self, memory: &dyn crate::machine::Held) {
        let _ = memory;
    }
}

impl<F: FnMut(&Piece<'_>) + Send> Observe for F {
    fn piece(&mut self, piece: &Piece<'_>) {
        self(piece)
    }
}

/// Bytes of a message, handed to an [`Observer`] as the receiver consumes them.
#[derive(Debug, Clone, Copy)]
pub struct Piece<'a> {
    /// The message's id (its index in the root's stream).
    pub msg_id: u64,
    /// The message's length.
    pub msg_len: usize,
    /// Where `bytes` begin in the message.
    pub offset: usize,
    /// The bytes.
    pub bytes: &'a [u8],
    /// Whether `bytes` stay where they are until the next [`Observe::frames_done`], which
    /// names the memory they lie in: the frame being handed in (the frame in order, consumed
    /// as it came; a link that [holds its frames](crate::machine::Machine::frames_done)
    /// keeps it), or the engine's copy of a frame that came behind a gap, consumed while
    /// frames are handed in (its window slot is reused by no frame before the
    /// acknowledgements of this batch leave). Not set for bytes consumed at other times
    /// (a receive posted late, a timer).
    pub held: bool,
}

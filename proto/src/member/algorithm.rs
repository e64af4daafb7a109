//! How a member's broadcast travels: in hardware (the engine's two algorithms) or down a
//! binomial tree of point-to-point channels.

use crate::engine::HardwareAlgorithm;

/// How a broadcast travels: in hardware, push-pull or simple (the engine's two algorithms,
/// [`HardwareAlgorithm`]), or down a point-to-point binomial tree (the member's own, over
/// its pair channels).
///
/// The default is simple broadcast. Measured on the test-bed (`ethbcast-bench latency --nodes
/// 2,3,4,8 --sizes 8,256,1024,4096,16384,65536`, on unshaped veths and on ports shaped to
/// 1 Gbit/s and 100 Mbit/s), it was faster than the tree from four members on at every size and
/// speed, and push-pull's pull cost a round trip from 4 KiB on (at 8 members and 1 Gbit/s, 1.00
/// of the tree's time against simple's 0.55).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Algorithm {
    /// Hardware broadcast, push-pull (PPBCAST): push the first BTP1 + BTP2 bytes, pull the
    /// rest on request.
    PushPull,
    /// Hardware broadcast, every frame at once (SBCAST). The default.
    #[default]
    Simple,
    /// Point-to-point binomial tree (MPICH-style baseline).
    Tree,
}

crate::spelled!(Algorithm, "algorithm", {
    PushPull => "ppbcast" | "pushpull" | "push-pull",
    Simple => "sbcast" | "simple",
    Tree => "tree" | "binomial" | "mpich",
});

impl Algorithm {
    /// The engine's algorithm for a broadcast in hardware; `None` for the tree.
    pub fn hardware(self) -> Option<HardwareAlgorithm> {
        match self {
            Algorithm::PushPull => Some(HardwareAlgorithm::PushPull),
            Algorithm::Simple => Some(HardwareAlgorithm::Simple),
            Algorithm::Tree => None,
        }
    }
}

impl From<HardwareAlgorithm> for Algorithm {
    fn from(a: HardwareAlgorithm) -> Algorithm {
        match a {
            HardwareAlgorithm::PushPull => Algorithm::PushPull,
            HardwareAlgorithm::Simple => Algorithm::Simple,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Algorithm, HardwareAlgorithm};

    #[test]
    fn the_tree_is_no_hardware_algorithm_and_the_others_map_both_ways() {
        assert_eq!(Algorithm::Tree.hardware(), None);
        for h in [HardwareAlgorithm::PushPull, HardwareAlgorithm::Simple] {
            assert_eq!(Algorithm::from(h).hardware(), Some(h));
        }
        assert_eq!("simple".parse::<Algorithm>(), Ok(Algorithm::Simple));
        assert_eq!("mpich".parse::<Algorithm>(), Ok(Algorithm::Tree));
        assert_eq!(Algorithm::default(), Algorithm::Simple);
    }
}

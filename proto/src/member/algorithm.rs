//! How a member's broadcast travels: in hardware (the engine's two algorithms) or down a
//! binomial tree of point-to-point channels, and which of them a group takes by default.

use crate::engine::HardwareAlgorithm;

/// How a broadcast travels: in hardware, push-pull or simple (the engine's two algorithms,
/// [`HardwareAlgorithm`]), or down a point-to-point binomial tree (the member's own, over
/// its pair channels); or as the group's size says ([`Algorithm::Auto`], the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Algorithm {
    /// The default: the binomial tree in a group of two members, simple broadcast in a larger
    /// one (see [`Algorithm::for_group`]).
    #[default]
    Auto,
    /// Hardware broadcast, push-pull (PPBCAST): push the first BTP1 + BTP2 bytes, pull the
    /// rest on request.
    PushPull,
    /// Hardware broadcast, every frame at once (SBCAST).
    Simple,
    /// Point-to-point binomial tree (MPICH-style baseline).
    Tree,
}

crate::spelled!(Algorithm, "algorithm", {
    Auto => "auto",
    PushPull => "ppbcast" | "pushpull" | "push-pull",
    Simple => "sbcast" | "simple",
    Tree => "tree" | "binomial" | "mpich",
});

impl Algorithm {
    /// The algorithm a broadcast in a group of `members` takes: the chosen one, or for
    /// [`Algorithm::Auto`] the binomial tree when there are at most two members (the one
    /// receiver's message goes point to point, and a broadcast frame has nobody to share it
    /// with), simple broadcast otherwise. Every member knows the group's size, so all of them
    /// resolve it alike.
    ///
    /// Why not push-pull: measured on the test-bed (`ethbcast-bench latency --nodes 2,3,4,8
    /// --sizes 8,256,1024,4096,16384,65536`, on unshaped veths and on ports shaped to
    /// 1 Gbit/s and 100 Mbit/s), simple broadcast took at most push-pull's time in nearly every
    /// case, and push-pull's pull costs a round trip from 4 KiB on (at 8 members and 1 Gbit/s,
    /// 1.00 of the tree's time against simple's 0.55). Why the tree at two members: there simple
    /// broadcast took up to 1.94x the tree's time (64 KiB on veths), and the tree was nowhere
    /// more than 3% slower (256 B on veths); from four members on simple broadcast took less
    /// than the tree's time at every size and speed.
    pub fn for_group(self, members: u16) -> Algorithm {
        match self {
            Algorithm::Auto if members <= 2 => Algorithm::Tree,
            Algorithm::Auto => Algorithm::Simple,
            a => a,
        }
    }

    /// The engine's algorithm for a broadcast in hardware; `None` for the tree. For
    /// [`Algorithm::Auto`], simple broadcast (what it takes whenever a broadcast goes in
    /// hardware).
    pub fn hardware(self) -> Option<HardwareAlgorithm> {
        match self {
            Algorithm::PushPull => Some(HardwareAlgorithm::PushPull),
            Algorithm::Simple | Algorithm::Auto => Some(HardwareAlgorithm::Simple),
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
        assert_eq!("auto".parse::<Algorithm>(), Ok(Algorithm::Auto));
    }

    #[test]
    fn by_default_two_members_use_the_tree_and_larger_groups_simple_broadcast() {
        assert_eq!(Algorithm::default(), Algorithm::Auto);
        assert_eq!(Algorithm::Auto.for_group(1), Algorithm::Tree);
        assert_eq!(Algorithm::Auto.for_group(2), Algorithm::Tree);
        for n in [3, 4, 8, 4096] {
            assert_eq!(
                Algorithm::Auto.for_group(n),
                Algorithm::Simple,
                "{n} members"
            );
        }
        // A chosen algorithm is taken as chosen, whatever the group.
        for a in [Algorithm::PushPull, Algorithm::Simple, Algorithm::Tree] {
            for n in [2, 3, 64] {
                assert_eq!(a.for_group(n), a);
            }
        }
    }
}

//! The one place where a host collective's algorithm is chosen, for teams and active sets
//! alike ([`World::engine`]): by the kind of collective, the group's shape (team or active
//! set, where its members are) and the user heap's memory (host or GPU).

use super::{tree, Group};
use crate::transport::Transport;
use crate::world::World;

/// The collectives that have more than one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// broadcast
    Broadcast,
    /// fcollect
    Fcollect,
    /// collect
    Collect,
    /// Element-wise reductions into every member's `dest`.
    Reduce,
    /// reducescatter
    ReduceScatter,
    /// alltoall(s)
    Alltoall,
}

/// How a collective moves its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    /// Straight between the members' symmetric buffers, between the collective's two syncs:
    /// data movement pulls each member's block into my `dest` (load/store, copy engine, or a
    /// get); reductions are partitioned (every member's memory by load/store).
    Direct,
    /// Pull what this PE needs into private memory between the two syncs, write `dest` after
    /// the second one (reductions on the GPU heap, every active set that is not all on this
    /// host, `reduce_with` and the scans).
    Staged,
    /// The push engines of [`super::tree`] (O(log n) messages per PE): teams with members
    /// on other hosts.
    Push,
}

impl World {
    /// The engine of a `kind` collective over `g`. `direct` tells whether the direct engine
    /// can serve the call (the reductions' partitioned engine needs every member's buffers by
    /// load/store: the caller found them).
    pub(crate) fn engine(&self, kind: Kind, g: Group<'_>, direct: bool) -> Engine {
        let host_heap = matches!(self.xport, Transport::Shm);
        let n = g.n();
        let remote = (0..n).any(|j| self.node.local_of.get(g.pe(j)).is_some_and(|l| l.is_none()));
        let pushes = matches!(
            kind,
            Kind::Broadcast | Kind::Fcollect | Kind::Collect | Kind::Reduce
        );
        // Pushing needs a team's signal words (an active set has only the caller's pSync,
        // sized for its barrier) and host memory (remote transports reach no GPU heap).
        if pushes && remote && host_heap && n > 1 && tree::fits(n) {
            if let Group::Team(_) = g {
                return Engine::Push;
            }
        }
        match kind {
            // Pulls straight into my dest serve every heap and member.
            Kind::Broadcast | Kind::Fcollect | Kind::Collect | Kind::Alltoall => Engine::Direct,
            Kind::Reduce | Kind::ReduceScatter if direct => Engine::Direct,
            Kind::Reduce | Kind::ReduceScatter => Engine::Staged,
        }
    }
}

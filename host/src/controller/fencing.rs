//! The write fences of reconciles: adapts what a reconcile acts for (the
//! leader's term, a shard's hold) to [`crate::apply::fence::Hold`], so the
//! apply step can check, right before each write, that it is still held.
//! It owns only these adapters; the check is [`crate::apply::fence`]'s.
//!
//! Without election (`Leadership::always`) the fence is open: nothing is
//! read per write.

use crate::apply::fence::{Hold, Validity, WriteFence};
use crate::leader::{Term, TermHold};
use crate::shards::{ShardGuard, ShardHold};

/// The leader's term, as a fence's hold.
struct Leadership(TermHold);

impl Hold for Leadership {
    fn kind(&self) -> &'static str {
        "leadership"
    }

    fn validity(&self) -> Validity {
        match self.0.valid_until() {
            None => Validity::Ended,
            Some(None) => Validity::Unbounded,
            Some(Some(until)) => Validity::Until(until),
        }
    }
}

/// A shard's hold, as a fence's hold.
struct Shard(ShardHold);

impl Hold for Shard {
    fn kind(&self) -> &'static str {
        "shard"
    }

    fn validity(&self) -> Validity {
        self.0
            .valid_until()
            .map_or(Validity::Ended, Validity::Until)
    }
}

/// The fence of a reconcile run in `term`: open when the term never ends
/// (no election).
pub fn for_term(term: &Term) -> WriteFence {
    let hold = term.hold();
    if hold.valid_until() == Some(None) {
        return WriteFence::open();
    }
    WriteFence::new(Leadership(hold))
}

/// The fence of a reconcile of an object of the shard `guard` entered.
pub fn for_shard(guard: &ShardGuard) -> WriteFence {
    WriteFence::new(Shard(guard.hold()))
}

/// The fence of a write for `hold` made outside a reconcile.
pub fn for_shard_hold(hold: ShardHold) -> WriteFence {
    WriteFence::new(Shard(hold))
}

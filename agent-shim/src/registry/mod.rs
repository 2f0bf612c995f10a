//! What the agent knows about the process between captures: live blocks (`blocks`), their
//! allocation stacks (`stacks`), threads (`threads`), the live counters (`counters`) and the
//! frees held back to be applied in batches (`held_frees`).

pub mod blocks;
pub mod counters;
pub mod held_frees;
pub mod new_blocks;
pub mod stacks;
pub mod threads;

//! What the agent knows about the process between captures: live blocks (`blocks`), their
//! allocation stacks (`stacks`), threads (`threads`) and the live counters (`counters`).

pub mod blocks;
pub mod counters;
pub mod stacks;
pub mod threads;

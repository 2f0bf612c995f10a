//! One file per screen; each draws the top view of its kind into the body's areas.

pub mod ages;
pub mod frames;
pub mod group;
pub mod growth;
pub mod leaks;
pub mod object;
pub mod objects;
pub mod release;
pub mod sites;
pub mod threads;
pub mod units;

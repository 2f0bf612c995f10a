//! Dialogs drawn over a screen, one file each: the help and the cancel confirmation.

pub mod cancel;
pub mod help;

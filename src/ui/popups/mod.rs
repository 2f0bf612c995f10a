//! Dialogs drawn over a screen: the help for now (the cancel confirmation comes with issue 6).

pub mod help;

//! Pieces shared by the screens: the generic table, the header with its sparkline, the footer.

pub mod footer;
pub mod header;
pub mod notice;
pub mod table;

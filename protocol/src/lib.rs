//! Wire messages, framing and handshake between `heaptui` and its agent (SPEC §6).
//!
//! No I/O policy and no analysis live here: only what goes on the wire and how it is
//! framed, so that both ends agree by construction.

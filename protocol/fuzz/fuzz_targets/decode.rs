//! Fuzzes the frame decoder and every message decoder of heaptui-protocol with arbitrary
//! bytes; the invariants checked are those of `heaptui_protocol::fuzzing::decode_stream`,
//! which the `random_bytes_never_panic` proptest also runs in CI.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    heaptui_protocol::fuzzing::decode_stream(data);
});

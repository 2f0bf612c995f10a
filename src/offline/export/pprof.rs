//! A gzipped pprof profile (`profile.proto` of github.com/google/pprof) of the live heap by
//! allocation stack, as `go tool pprof` and speedscope open it.
//!
//! Two sample types, as in Go heap profiles: `inuse_objects`/`count` and `inuse_space`/`bytes`
//! (the default). One sample per allocation stack, its locations innermost first; one location
//! per distinct frame, one function per distinct name. A frame written `name (file:line)` gives
//! the function's file and the location's line. There is no mapping: the frames are already
//! symbolized.
//!
//! The protobuf encoding is written here by hand: a profile uses only varints and
//! length-delimited fields, and the field numbers are listed below from the schema (the test
//! decodes the output against the vendored `tests/data/profile.proto`).

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use heaptui_analysis::HeapGraph;

use super::{merge_in_order, site_frames, totals_by_site};

// Field numbers of profile.proto.
mod field {
    pub mod profile {
        pub const SAMPLE_TYPE: u32 = 1;
        pub const SAMPLE: u32 = 2;
        pub const LOCATION: u32 = 4;
        pub const FUNCTION: u32 = 5;
        pub const STRING_TABLE: u32 = 6;
        pub const TIME_NANOS: u32 = 9;
        pub const PERIOD_TYPE: u32 = 11;
        pub const PERIOD: u32 = 12;
        pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
    }
    pub mod value_type {
        pub const TYPE: u32 = 1;
        pub const UNIT: u32 = 2;
    }
    pub mod sample {
        pub const LOCATION_ID: u32 = 1;
        pub const VALUE: u32 = 2;
    }
    pub mod location {
        pub const ID: u32 = 1;
        pub const LINE: u32 = 4;
    }
    pub mod line {
        pub const FUNCTION_ID: u32 = 1;
        pub const LINE: u32 = 2;
    }
    pub mod function {
        pub const ID: u32 = 1;
        pub const NAME: u32 = 2;
        pub const SYSTEM_NAME: u32 = 3;
        pub const FILENAME: u32 = 4;
    }
}

/// A protobuf message being written.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire_type));
    }

    /// A varint field; zero is the default and is left out, as protobuf encoders do.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, field: u32, m: &Message) {
        self.bytes(field, &m.0);
    }

    /// A packed repeated varint field.
    fn packed(&mut self, field: u32, values: impl IntoIterator<Item = u64>) {
        let mut inner = Message::default();
        for v in values {
            inner.varint(v);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
    }
}

/// The string table: index 0 is "" as the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// `name (file:line)` → (name, file, line); anything else is a bare name.
fn parse_frame(frame: &str) -> (&str, &str, u64) {
    if let Some(open) = frame.rfind(" (")
        && let Some(inner) = frame[open + 2..].strip_suffix(')')
        && let Some((file, line)) = inner.rsplit_once(':')
        && let Ok(line) = line.parse::<u64>()
    {
        return (&frame[..open], file, line);
    }
    (frame, "", 0)
}

/// The encoded (not yet gzipped) profile of `graph`; `time_nanos` is when it was taken (0 if
/// unknown).
pub fn encode(graph: &HeapGraph, time_nanos: u64) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut profile = Message::default();
    for (kind, unit) in [("inuse_objects", "count"), ("inuse_space", "bytes")] {
        let mut vt = Message::default();
        vt.uint(field::value_type::TYPE, strings.id(kind));
        vt.uint(field::value_type::UNIT, strings.id(unit));
        profile.message(field::profile::SAMPLE_TYPE, &vt);
    }
    let mut locations: HashMap<&str, u64> = HashMap::new();
    let mut functions: HashMap<(&str, &str), u64> = HashMap::new();
    let mut location_msgs = Vec::new();
    let mut function_msgs = Vec::new();
    let samples = merge_in_order(
        totals_by_site(graph)
            .into_iter()
            .map(|(site, t)| (site_frames(graph, site), t)),
    );
    for (frames, t) in samples {
        let mut ids = Vec::with_capacity(frames.len());
        for frame in frames {
            let next = locations.len() as u64 + 1;
            let id = *locations.entry(frame).or_insert(next);
            if id == next {
                let (name, file, line) = parse_frame(frame);
                let next_fn = functions.len() as u64 + 1;
                let fid = *functions.entry((name, file)).or_insert(next_fn);
                if fid == next_fn {
                    let mut f = Message::default();
                    f.uint(field::function::ID, fid);
                    f.uint(field::function::NAME, strings.id(name));
                    f.uint(field::function::SYSTEM_NAME, strings.id(name));
                    f.uint(field::function::FILENAME, strings.id(file));
                    function_msgs.push(f);
                }
                let mut l = Message::default();
                l.uint(field::line::FUNCTION_ID, fid);
                l.uint(field::line::LINE, line);
                let mut loc = Message::default();
                loc.uint(field::location::ID, id);
                loc.message(field::location::LINE, &l);
                location_msgs.push(loc);
            }
            ids.push(id);
        }
        let mut s = Message::default();
        s.packed(field::sample::LOCATION_ID, ids);
        s.packed(field::sample::VALUE, [t.objects, t.bytes]);
        profile.message(field::profile::SAMPLE, &s);
    }
    for loc in &location_msgs {
        profile.message(field::profile::LOCATION, loc);
    }
    for f in &function_msgs {
        profile.message(field::profile::FUNCTION, f);
    }
    profile.uint(field::profile::TIME_NANOS, time_nanos);
    let mut period = Message::default();
    period.uint(field::value_type::TYPE, strings.id("space"));
    period.uint(field::value_type::UNIT, strings.id("bytes"));
    profile.message(field::profile::PERIOD_TYPE, &period);
    profile.uint(field::profile::PERIOD, 1);
    profile.uint(
        field::profile::DEFAULT_SAMPLE_TYPE,
        strings.id("inuse_space"),
    );
    // Strings last: every id above was handed out by now.
    for s in &strings.table {
        profile.bytes(field::profile::STRING_TABLE, s.as_bytes());
    }
    profile.0
}

/// Writes the gzipped profile of `graph`.
pub fn write(graph: &HeapGraph, out: &mut impl Write) -> std::io::Result<()> {
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&encode(graph, 0))?;
    gz.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_frame;

    #[test]
    fn frames_with_a_file_and_line_are_split() {
        assert_eq!(
            parse_frame("alloc_buf (server.c:42)"),
            ("alloc_buf", "server.c", 42)
        );
        assert_eq!(parse_frame("main"), ("main", "", 0));
        assert_eq!(parse_frame("f (liba.so)"), ("f (liba.so)", "", 0));
        assert_eq!(
            parse_frame("ns::f(int) (a b.cc:7)"),
            ("ns::f(int)", "a b.cc", 7)
        );
    }
}

//! `heaptui report --format pprof`: the gzipped profile is decoded with a small decoder driven
//! by the profile schema (`tests/data/pprof-profile.proto`, parsed here): every field must be
//! declared there with a matching wire type, and the samples, string table, locations and
//! functions are checked value by value.

use std::collections::HashMap;
use std::io::Read;
use std::process::Command;

mod export_common;

/// A field of the schema.
#[derive(Clone, Debug)]
struct FieldDecl {
    name: String,
    ty: String,
    repeated: bool,
}

/// message name → field number → declaration, from the .proto text.
type Schema = HashMap<String, HashMap<u64, FieldDecl>>;

fn parse_schema(text: &str) -> Schema {
    let mut schema = Schema::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.split("//").next().unwrap().trim();
        if let Some(rest) = line.strip_prefix("message ") {
            let name = rest.trim_end_matches('{').trim().to_string();
            schema.insert(name.clone(), HashMap::new());
            current = Some(name);
        } else if line == "}" {
            current = None;
        } else if let Some(msg) = &current
            && let Some((decl, number)) = line.trim_end_matches(';').split_once('=')
        {
            let words: Vec<&str> = decl.split_whitespace().collect();
            let (repeated, ty, name) = match words[..] {
                ["repeated", ty, name] => (true, ty, name),
                [ty, name] => (false, ty, name),
                _ => panic!("unexpected schema line {line:?}"),
            };
            let number: u64 = number.trim().parse().unwrap();
            schema.get_mut(msg).unwrap().insert(
                number,
                FieldDecl {
                    name: name.into(),
                    ty: ty.into(),
                    repeated,
                },
            );
        }
    }
    schema
}

#[derive(Clone, Debug, PartialEq)]
enum Value {
    Int(u64),
    Str(String),
    Msg(Msg),
}

/// A decoded message: field name → values in order.
#[derive(Clone, Debug, Default, PartialEq)]
struct Msg(HashMap<String, Vec<Value>>);

impl Msg {
    fn ints(&self, field: &str) -> Vec<u64> {
        self.0
            .get(field)
            .map(|v| {
                v.iter()
                    .map(|x| match x {
                        Value::Int(i) => *i,
                        other => panic!("{field} is not an integer: {other:?}"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn int(&self, field: &str) -> u64 {
        let v = self.ints(field);
        assert!(v.len() <= 1, "{field} repeated");
        v.first().copied().unwrap_or(0)
    }

    fn msgs(&self, field: &str) -> Vec<&Msg> {
        self.0
            .get(field)
            .map(|v| {
                v.iter()
                    .map(|x| match x {
                        Value::Msg(m) => m,
                        other => panic!("{field} is not a message: {other:?}"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn strs(&self, field: &str) -> Vec<&str> {
        self.0
            .get(field)
            .map(|v| {
                v.iter()
                    .map(|x| match x {
                        Value::Str(s) => s.as_str(),
                        other => panic!("{field} is not a string: {other:?}"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn varint(bytes: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = bytes[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return v;
        }
    }
    panic!("varint too long");
}

const SCALARS: &[&str] = &["int64", "uint64", "bool"];

fn decode(schema: &Schema, message: &str, bytes: &[u8]) -> Msg {
    let fields = &schema[message];
    let mut msg = Msg::default();
    let mut pos = 0;
    while pos < bytes.len() {
        let key = varint(bytes, &mut pos);
        let (number, wire) = (key >> 3, key & 7);
        let decl = fields
            .get(&number)
            .unwrap_or_else(|| panic!("{message}: field {number} is not in the schema"));
        let values = msg.0.entry(decl.name.clone()).or_default();
        let scalar = SCALARS.contains(&decl.ty.as_str());
        match wire {
            0 => {
                assert!(scalar, "{message}.{}: varint for a {}", decl.name, decl.ty);
                values.push(Value::Int(varint(bytes, &mut pos)));
            }
            2 => {
                let len = varint(bytes, &mut pos) as usize;
                let body = &bytes[pos..pos + len];
                pos += len;
                if scalar {
                    assert!(
                        decl.repeated,
                        "{message}.{}: packed but not repeated",
                        decl.name
                    );
                    let mut p = 0;
                    while p < body.len() {
                        values.push(Value::Int(varint(body, &mut p)));
                    }
                } else if decl.ty == "string" {
                    values.push(Value::Str(String::from_utf8(body.to_vec()).unwrap()));
                } else {
                    values.push(Value::Msg(decode(schema, &decl.ty, body)));
                }
            }
            w => panic!(
                "{message}.{}: wire type {w} is never used by this schema",
                decl.name
            ),
        }
        assert!(
            decl.repeated || values.len() == 1,
            "{message}.{} appears twice but is not repeated",
            decl.name
        );
    }
    msg
}

fn pprof_of_snapshot() -> Vec<u8> {
    let path = export_common::snapshot_file("pprof");
    let out = Command::new(env!("CARGO_BIN_EXE_heaptui"))
        .args(["report", path.to_str().unwrap(), "--format", "pprof"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn the_profile_decodes_with_the_schema_and_holds_the_live_heap() {
    let gz = pprof_of_snapshot();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let schema = parse_schema(include_str!("data/pprof-profile.proto"));
    let profile = decode(&schema, "Profile", &raw);

    let strings = profile.strs("string_table");
    assert_eq!(strings[0], "", "string_table[0] must be empty");
    let s = |i: u64| strings[i as usize];
    let types: Vec<(&str, &str)> = profile
        .msgs("sample_type")
        .iter()
        .map(|vt| (s(vt.int("type")), s(vt.int("unit"))))
        .collect();
    assert_eq!(
        types,
        [("inuse_objects", "count"), ("inuse_space", "bytes")]
    );
    assert_eq!(s(profile.int("default_sample_type")), "inuse_space");

    let functions: HashMap<u64, &Msg> = profile
        .msgs("function")
        .into_iter()
        .map(|f| (f.int("id"), f))
        .collect();
    let locations: HashMap<u64, &Msg> = profile
        .msgs("location")
        .into_iter()
        .map(|l| (l.int("id"), l))
        .collect();
    assert_eq!(locations.len(), 6, "one location per distinct frame");
    assert_eq!(functions.len(), 6);
    assert!(
        !locations.contains_key(&0) && !functions.contains_key(&0),
        "ids are nonzero"
    );

    // Each sample: its stack (leaf first) as function names with file:line, and its values.
    let mut samples: Vec<(Vec<String>, Vec<u64>)> = profile
        .msgs("sample")
        .iter()
        .map(|sample| {
            let stack = sample
                .ints("location_id")
                .iter()
                .map(|id| {
                    let lines = locations[id].msgs("line");
                    assert_eq!(lines.len(), 1);
                    let f = functions[&lines[0].int("function_id")];
                    let (file, line) = (s(f.int("filename")), lines[0].int("line"));
                    assert_eq!(s(f.int("system_name")), s(f.int("name")));
                    if file.is_empty() {
                        s(f.int("name")).to_string()
                    } else {
                        format!("{} {file}:{line}", s(f.int("name")))
                    }
                })
                .collect();
            (stack, sample.ints("value"))
        })
        .collect();
    samples.sort();
    let expected: Vec<(Vec<String>, Vec<u64>)> = vec![
        (vec!["[unknown]".into()], vec![1, 16]),
        (
            vec![
                "alloc_buf server.c:42".into(),
                "handle".into(),
                "main".into(),
            ],
            vec![2, 128],
        ),
        (
            vec!["make_node".into(), "handle".into(), "main".into()],
            vec![1, 64],
        ),
        (vec!["weird;name".into(), "main".into()], vec![1, 8]),
    ];
    assert_eq!(samples, expected);
    let total: u64 = samples.iter().map(|(_, v)| v[1]).sum();
    assert_eq!(total, 216, "every live byte is in a sample");
}

#[test]
fn the_decoder_rejects_what_the_schema_does_not_declare() {
    let schema = parse_schema(include_str!("data/pprof-profile.proto"));
    assert_eq!(schema["Profile"][&6].name, "string_table");
    assert_eq!(schema["Location"][&4].ty, "Line");
    // A varint field 99 (key 99 << 3 = 792, varint 0x98 0x06) does not exist in Profile.
    let bad = [0x98, 0x06, 1];
    let caught = std::panic::catch_unwind(|| decode(&schema, "Profile", &bad)).unwrap_err();
    let message = caught.downcast_ref::<String>().unwrap();
    assert_eq!(message, "Profile: field 99 is not in the schema");
    // string_table as a varint is a wire-type mismatch.
    let caught = std::panic::catch_unwind(|| decode(&schema, "Profile", &[6 << 3, 1])).unwrap_err();
    let message = caught.downcast_ref::<String>().unwrap();
    assert_eq!(message, "Profile.string_table: varint for a string");
}

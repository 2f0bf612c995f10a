//! Snapshot files: the shared fixture reads as the graph it describes, both encodings round
//! trip any graph, and every kind of bad input gets its own one-line error naming the place.

use std::path::PathBuf;

use heaptui_analysis::snapshot::{self, MAGIC, SnapshotError};
use heaptui_analysis::{
    Edges, Frame, FrameKind, HeapGraph, NO_SEQ, NO_SITE, NO_THREAD, ObjectRecord, Objects, Process,
    Site, Thread, ThreadState,
};
use proptest::prelude::*;
use proptest::sample::Index;

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/patent-example.json")
}

fn fixture() -> HeapGraph {
    snapshot::read_file(&fixture_path()).expect("the fixture reads")
}

fn json_of(graph: &HeapGraph) -> Vec<u8> {
    let mut out = Vec::new();
    snapshot::write_json(graph, &mut out).unwrap();
    out
}

fn binary_of(graph: &HeapGraph) -> Vec<u8> {
    let mut out = Vec::new();
    snapshot::write_binary(graph, &mut out).unwrap();
    out
}

/// The error message for `text` read as a snapshot (it must fail).
fn error_of(text: &str) -> String {
    match snapshot::read_bytes(text.as_bytes()) {
        Ok(_) => panic!("accepted a bad snapshot:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn error_of_bytes(bytes: &[u8]) -> SnapshotError {
    match snapshot::read_bytes(bytes) {
        Ok(_) => panic!("accepted a bad binary snapshot"),
        Err(e) => e,
    }
}

/// A small well-formed JSON snapshot with `patch` spliced in place of its objects and
/// threads, for the bad-input cases.
fn doc(objects: &str, threads: &str) -> String {
    format!(
        r#"{{"format": "heaptui-snapshot", "version": 1,
  "sites": [{{"id": 10, "frames": ["f"]}}],
  "objects": {objects},
  "threads": {threads} }}"#
    )
}

const OBJECTS: &str = r#"[{"id": 7, "size": 8, "refs": [9]}, {"id": 9, "size": 4, "refs": []}]"#;
const THREADS: &str = r#"[{"tid": 1, "frames": [{"refs": [7]}]}]"#;

#[test]
fn the_fixture_reads_as_the_graph_it_describes() {
    let g = fixture();
    assert_eq!(g.process.pid, 4242);
    assert_eq!(g.process.command, "patent-example");
    assert_eq!(g.object_count(), 16);
    assert_eq!(g.total_bytes(), 760);
    assert_eq!(g.sites.len(), 16);
    assert_eq!(
        g.threads.iter().map(|t| t.tid).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert_eq!(g.threads[3].name, "thread-n");
    assert!(g.threads.iter().all(|t| t.state == ThreadState::Stopped));
    // Object ids 1..16 map to indices 0..15, in file order.
    assert_eq!(g.objects().id, (1..=16).collect::<Vec<u64>>());
    // Object id 7 refers to ids 8 and 5, in that order.
    assert_eq!(g.edges().of(6), &[7, 4]);
    assert_eq!(g.site_label(4), "Class2.Cache");
    assert_eq!(g.objects().addr[4], 66816);
    let methode = &g.threads[2].frames[1];
    assert_eq!(methode.function, "Class2.methodE");
    assert_eq!(methode.module, "libsystem");
    assert_eq!(methode.kind, FrameKind::System);
    assert_eq!(methode.refs, [5, 4, 9, 10]);
    assert_eq!(g.globals, [14, 15]);
    // Fields the fixture leaves out take their defaults.
    assert!(g.objects().thread.iter().all(|&t| t == NO_THREAD));
    assert!(g.objects().seq.iter().all(|&s| s == NO_SEQ));
}

#[test]
fn optional_fields_default_and_unknown_fields_are_ignored() {
    let text = r#"{"format": "heaptui-snapshot", "version": 1, "comment": "by hand",
        "objects": [{"id": 5, "size": 3, "refs": [], "colour": "red"}],
        "threads": [{"tid": 9, "frames": [{"refs": [5], "inlined": false}]},
                    {"tid": 10, "state": {"not-stoppable": "signals blocked"}}]}"#;
    let g = snapshot::read_bytes(text.as_bytes()).unwrap();
    assert_eq!(g.process, Process::default());
    assert!(g.sites.is_empty() && g.globals.is_empty());
    let o = g.objects().record(0);
    assert_eq!(
        (o.id, o.addr, o.size, o.site, o.thread, o.seq),
        (5, 0, 3, NO_SITE, NO_THREAD, NO_SEQ)
    );
    let f = &g.threads[0].frames[0];
    assert_eq!((f.function.as_str(), f.module.as_str()), ("?", ""));
    assert_eq!(f.kind, FrameKind::User);
    assert_eq!(g.threads[0].name, "");
    assert_eq!(g.threads[0].state, ThreadState::Stopped);
    assert_eq!(
        g.threads[1].state,
        ThreadState::NotStoppable("signals blocked".into())
    );
    assert!(g.threads[1].frames.is_empty());
}

#[test]
fn the_fixture_round_trips_through_both_encodings() {
    let g = fixture();
    assert_eq!(snapshot::read_bytes(&json_of(&g)).unwrap(), g);
    let bin = binary_of(&g);
    assert!(bin.starts_with(&MAGIC));
    assert_eq!(snapshot::read_bytes(&bin).unwrap(), g);
    // Compact: the 3.7 KB JSON fixture is a few hundred bytes in the binary form.
    assert!(bin.len() < 1000, "binary fixture is {} bytes", bin.len());
}

#[test]
fn read_file_names_the_path() {
    let missing = PathBuf::from("/nonexistent/dir/snap.hsnap");
    let e = snapshot::read_file(&missing).unwrap_err().to_string();
    assert!(
        e.starts_with("/nonexistent/dir/snap.hsnap: ") && e.contains("No such file"),
        "{e}"
    );

    let dir = std::env::temp_dir().join(format!("heaptui-snapshot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        doc(OBJECTS, r#"[{"tid": 1, "frames": [{"refs": [8]}]}]"#),
    )
    .unwrap();
    let e = snapshot::read_file(&bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: threads[0].frames[0].refs[0]: reference to unknown object id 8",
            bad.display()
        )
    );
    assert!(matches!(
        e.kind(),
        SnapshotError::UnknownObject { id: 8, .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_base_document_of_the_bad_cases_is_good() {
    let g = snapshot::read_bytes(doc(OBJECTS, THREADS).as_bytes()).unwrap();
    assert_eq!(g.edges().of(0), &[1]);
    assert_eq!(g.objects().site, [NO_SITE, NO_SITE]);
}

#[test]
fn truncated_json_names_line_and_column() {
    let text = std::fs::read_to_string(fixture_path()).unwrap();
    let cut = &text[..text.len() / 2];
    let e = error_of(cut);
    assert!(e.contains("truncated JSON: EOF while parsing"), "{e}");
    assert!(e.contains(" at line ") && e.contains(" column "), "{e}");
}

#[test]
fn malformed_json_names_line_and_column() {
    let e = error_of("{\"format\": \"heaptui-snapshot\",\n \"version\": 1,,}");
    assert!(e.starts_with("invalid JSON: "), "{e}");
    assert!(e.ends_with("at line 2 column 15"), "{e}");
}

#[test]
fn wrong_version_is_named() {
    let text = doc(OBJECTS, THREADS).replace("\"version\": 1", "\"version\": 2");
    assert_eq!(
        error_of(&text),
        "version: unsupported version 2 (this heaptui reads version 1)"
    );
}

#[test]
fn wrong_format_is_named() {
    let text = doc(OBJECTS, THREADS).replace("heaptui-snapshot", "heaptui-report");
    assert_eq!(
        error_of(&text),
        "format: expected \"heaptui-snapshot\", found \"heaptui-report\""
    );
    let e = error_of(r#"{"version": 1, "objects": [], "threads": []}"#);
    assert!(e.starts_with("missing field `format`"), "{e}");
}

#[test]
fn duplicate_object_id_is_named() {
    let objects = r#"[{"id": 7, "size": 8, "refs": []}, {"id": 9, "size": 4, "refs": []},
                      {"id": 7, "size": 1, "refs": []}]"#;
    assert_eq!(
        error_of(&doc(objects, "[]")),
        "objects[2].id: duplicate object id 7"
    );
}

#[test]
fn duplicate_and_unknown_ids_are_named_when_ids_are_scattered() {
    // Ids too far apart for a table go through a hash map; same errors.
    let objects = r#"[{"id": 7, "size": 8, "refs": [1099511627776]},
                      {"id": 1099511627776, "size": 4, "refs": [6]}]"#;
    assert_eq!(
        error_of(&doc(objects, "[]")),
        "objects[1].refs[0]: reference to unknown object id 6"
    );
    let objects = r#"[{"id": 7, "size": 8, "refs": []},
                      {"id": 1099511627776, "size": 4, "refs": []},
                      {"id": 1099511627776, "size": 4, "refs": []}]"#;
    assert_eq!(
        error_of(&doc(objects, "[]")),
        "objects[2].id: duplicate object id 1099511627776"
    );
}

#[test]
fn references_outside_the_id_range_are_unknown() {
    // Below the smallest id and above the largest, with ids packed in a table.
    for (bad, at) in [(2, 0), (u64::MAX, 1)] {
        let objects = format!(
            r#"[{{"id": 7, "size": 8, "refs": [{}]}}, {{"id": 9, "size": 4, "refs": [{}]}}]"#,
            if at == 0 { bad } else { 9 },
            if at == 1 { bad } else { 7 }
        );
        assert_eq!(
            error_of(&doc(&objects, "[]")),
            format!("objects[{at}].refs[0]: reference to unknown object id {bad}")
        );
    }
}

#[test]
fn dangling_reference_is_named() {
    let objects = r#"[{"id": 7, "size": 8, "refs": [9, 99]}, {"id": 9, "size": 4, "refs": []}]"#;
    assert_eq!(
        error_of(&doc(objects, THREADS)),
        "objects[0].refs[1]: reference to unknown object id 99"
    );
    let text = doc(OBJECTS, THREADS).replace(
        "\"threads\"",
        "\"globals\": {\"refs\": [7, 9, 3]}, \"threads\"",
    );
    assert_eq!(
        error_of(&text),
        "globals.refs[2]: reference to unknown object id 3"
    );
}

#[test]
fn negative_size_is_named() {
    let objects = r#"[{"id": 7, "size": 8, "refs": []}, {"id": 9, "size": -4, "refs": []}]"#;
    let e = error_of(&doc(objects, THREADS));
    assert!(
        e.starts_with("objects[1].size: negative size -4 at line "),
        "{e}"
    );
}

#[test]
fn missing_required_field_is_named_with_its_path() {
    let objects = r#"[{"id": 7, "size": 8, "refs": []}, {"id": 9, "refs": []}]"#;
    let e = error_of(&doc(objects, THREADS));
    assert!(e.starts_with("objects[1]: missing field `size`"), "{e}");
    let e = error_of(&doc(
        OBJECTS,
        r#"[{"tid": 1, "frames": [{"function": "f"}]}]"#,
    ));
    assert!(
        e.starts_with("threads[0].frames[0]: missing field `refs`"),
        "{e}"
    );
    let e = error_of(&doc(OBJECTS, r#"[{"tid": "one"}]"#));
    assert!(e.starts_with("threads[0].tid: invalid type: string"), "{e}");
}

#[test]
fn unknown_site_is_named() {
    let objects = r#"[{"id": 7, "size": 8, "site": 10, "refs": []},
                      {"id": 9, "size": 4, "site": 11, "refs": []}]"#;
    assert_eq!(
        error_of(&doc(objects, "[]")),
        "objects[1].site: unknown site id 11"
    );
}

#[test]
fn duplicate_site_is_named() {
    let text = doc(OBJECTS, THREADS).replace(
        r#"[{"id": 10, "frames": ["f"]}]"#,
        r#"[{"id": 10, "frames": ["f"]}, {"id": 10, "frames": ["g"]}]"#,
    );
    assert_eq!(error_of(&text), "sites[1].id: duplicate site id 10");
}

#[test]
fn duplicate_thread_is_named() {
    let threads =
        r#"[{"tid": 1, "frames": []}, {"tid": 2, "frames": []}, {"tid": 1, "frames": []}]"#;
    assert_eq!(
        error_of(&doc(OBJECTS, threads)),
        "threads[2].tid: duplicate thread id 1"
    );
}

#[test]
fn neither_json_nor_binary_is_named() {
    assert_eq!(
        error_of("\x7fELF\x02\x01"),
        "not a heaptui snapshot (neither JSON nor the binary form; it starts with bytes 7f 45 4c 46 02 01)"
    );
    assert_eq!(error_of(""), "empty file: not a heaptui snapshot");
    assert_eq!(error_of("  \n"), "empty file: not a heaptui snapshot");
}

#[test]
fn wrong_magic_is_named() {
    let mut bin = binary_of(&fixture());
    bin[11] = b'X';
    let e = error_of_bytes(&bin);
    assert!(matches!(e, SnapshotError::BadMagic { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        r#"binary snapshot: wrong magic (expected "HEAPTUI\\x00SNAP", found "HEAPTUI\\x00SNAX")"#
    );
}

#[test]
fn wrong_binary_version_is_named() {
    let mut bin = binary_of(&fixture());
    bin[12] = 3;
    assert_eq!(
        error_of_bytes(&bin).to_string(),
        "binary snapshot: unsupported version 3 (this heaptui reads versions 1 to 2)"
    );
}

/// A version 1 file (written by the agent of the build before reference kinds, at the exit of
/// a small C program) still reads: every reference a start edge, the same figures as then.
#[test]
fn a_version_1_binary_file_still_reads() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/binary-v1.hsnap");
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[12..16].try_into().unwrap()), 1);
    snapshot::check_bytes(&bytes).unwrap();
    let g = snapshot::read_bytes(&bytes).unwrap();
    assert_eq!(g.object_count(), 5);
    assert_eq!(g.edges().interior_count(), 0);
    assert!(g.globals_interior.is_empty());
    assert!(
        g.threads
            .iter()
            .all(|t| t.frames.iter().all(|f| f.interior.is_empty()))
    );
    let a = heaptui_analysis::Analysis::new(&g);
    assert_eq!((a.totals().bytes, a.leaks().bytes), (96, 16));
    // Written again, it is a version 2 file of the same graph.
    let again = binary_of(&g);
    assert_eq!(u32::from_le_bytes(again[12..16].try_into().unwrap()), 2);
    assert_eq!(snapshot::read_bytes(&again).unwrap(), g);
}

#[test]
fn truncated_binary_is_named_at_every_length() {
    let bin = binary_of(&fixture());
    for len in 1..bin.len() {
        let e = error_of_bytes(&bin[..len]);
        assert!(
            matches!(e, SnapshotError::Truncated { .. }),
            "cut at {len}: {e}"
        );
        assert!(
            e.to_string().starts_with("binary snapshot: truncated "),
            "{e}"
        );
    }
    assert_eq!(
        error_of_bytes(&bin[..5]).to_string(),
        "binary snapshot: truncated header (5 of 16 bytes)"
    );
}

#[test]
fn trailing_bytes_are_refused() {
    let mut bin = binary_of(&fixture());
    bin.extend_from_slice(b"xyz");
    assert_eq!(
        error_of_bytes(&bin).to_string(),
        "binary snapshot: 3 trailing bytes after the graph (file damaged or not a snapshot)"
    );
}

#[test]
fn a_forged_string_length_is_refused_before_allocating() {
    // The process command is the first string of the payload: pid 0 (one byte), then the
    // command's length as a varint. Claim 2^60 bytes.
    let mut forged = MAGIC.to_vec();
    forged.extend_from_slice(&1u32.to_le_bytes());
    forged.push(0);
    forged.push(253);
    forged.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let e = error_of_bytes(&forged);
    assert!(e.to_string().contains("claims more than"), "{e}");
}

#[test]
fn json_writer_refuses_duplicate_ids() {
    let mut objects = Objects::default();
    let mut edges = Edges::default();
    for _ in 0..2 {
        objects.push(ObjectRecord {
            id: 3,
            site: NO_SITE,
            ..Default::default()
        });
        edges.push([]);
    }
    let g = HeapGraph::new(Process::default(), vec![], objects, edges, vec![], vec![]).unwrap();
    let e = snapshot::write_json(&g, Vec::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("object id 3 is used twice"), "{e}");
    // The binary form addresses objects by index and keeps them.
    assert_eq!(snapshot::read_bytes(&binary_of(&g)).unwrap(), g);
}

/// Random graphs: arbitrary unique ids, sites, thread states, strings, cycles and self
/// references, dangling nothing.
fn arb_graph() -> impl Strategy<Value = HeapGraph> {
    let sites = prop::collection::hash_set(any::<u64>(), 0..5).prop_flat_map(|ids| {
        let ids: Vec<u64> = ids.into_iter().collect();
        let n = ids.len();
        (
            Just(ids),
            prop::collection::vec(prop::collection::vec("\\PC{0,12}", 0..3), n),
        )
    });
    // Ids either scattered over all of u64 or packed in a small range in descending order
    // (the reader indexes the two differently).
    let ids = prop_oneof![
        prop::collection::hash_set(any::<u64>(), 0..30).prop_map(|ids| ids.into_iter().collect()),
        (0..u64::MAX / 2, 0u64..30)
            .prop_map(|(base, n)| (0..n).rev().map(|i| base + 2 * i).collect()),
    ];
    let objects = ids.prop_flat_map(|ids: Vec<u64>| {
        let n = ids.len();
        let row = (
            any::<u64>(),
            any::<u64>(),
            any::<Option<Index>>(),
            prop_oneof![Just(0u32), any::<u32>()],
            prop_oneof![Just(0u64), any::<u64>()],
            prop::collection::vec((any::<Index>(), prop::bool::weighted(0.3)), 0..5),
        );
        (Just(ids), prop::collection::vec(row, n))
    });
    let frame = (
        "\\PC{0,16}",
        "\\PC{0,8}",
        any::<bool>(),
        prop::collection::vec((any::<Index>(), prop::bool::weighted(0.3)), 0..4),
    );
    let thread = (
        "\\PC{0,10}",
        prop::option::of("\\PC{0,20}"),
        prop::collection::vec(frame, 0..4),
    );
    let threads = prop::collection::hash_set(any::<u32>(), 0..5).prop_flat_map(move |tids| {
        let tids: Vec<u32> = tids.into_iter().collect();
        let n = tids.len();
        (Just(tids), prop::collection::vec(thread.clone(), n))
    });
    (
        any::<u32>(),
        "\\PC{0,20}",
        sites,
        objects,
        threads,
        prop::collection::vec((any::<Index>(), prop::bool::weighted(0.3)), 0..4),
    )
        .prop_map(
            |(pid, command, (site_ids, site_frames), (ids, rows), (tids, threads), globals)| {
                let n = ids.len();
                // References with their kinds (interior or start).
                let pick = |refs: Vec<(Index, bool)>| -> Vec<(u32, bool)> {
                    if n == 0 {
                        vec![]
                    } else {
                        refs.into_iter()
                            .map(|(i, interior)| (i.index(n) as u32, interior))
                            .collect()
                    }
                };
                // A root's references: all targets, and the sorted interior ones.
                let root = |refs: Vec<(Index, bool)>| -> (Vec<u32>, Vec<u32>) {
                    let refs = pick(refs);
                    let mut interior: Vec<u32> = refs.iter().filter(|r| r.1).map(|r| r.0).collect();
                    interior.sort_unstable();
                    interior.dedup();
                    (refs.into_iter().map(|r| r.0).collect(), interior)
                };
                let sites: Vec<Site> = site_ids
                    .into_iter()
                    .zip(site_frames)
                    .map(|(id, frames)| Site { id, frames })
                    .collect();
                let mut objects = Objects::with_capacity(n);
                let mut edges = Edges::with_capacity(n, 0);
                for (id, (addr, size, site, thread, seq, refs)) in ids.into_iter().zip(rows) {
                    let site = match site {
                        Some(i) if !sites.is_empty() => i.index(sites.len()) as u32,
                        _ => NO_SITE,
                    };
                    objects.push(ObjectRecord {
                        id,
                        addr,
                        size,
                        site,
                        thread,
                        seq,
                    });
                    edges.push_with_kinds(pick(refs));
                }
                let threads = tids
                    .into_iter()
                    .zip(threads)
                    .map(|(tid, (name, state, frames))| Thread {
                        tid,
                        name,
                        state: state.map_or(ThreadState::Stopped, ThreadState::NotStoppable),
                        frames: frames
                            .into_iter()
                            .map(|(function, module, system, refs)| {
                                let (refs, interior) = root(refs);
                                Frame {
                                    function,
                                    module,
                                    kind: if system {
                                        FrameKind::System
                                    } else {
                                        FrameKind::User
                                    },
                                    refs,
                                    interior,
                                }
                            })
                            .collect(),
                    })
                    .collect();
                let (globals, globals_interior) = root(globals);
                HeapGraph::new(
                    Process { pid, command },
                    sites,
                    objects,
                    edges,
                    threads,
                    globals,
                )
                .and_then(|g| g.with_globals_interior(globals_interior))
                .expect("the generator builds valid graphs")
            },
        )
}

proptest! {
    #[test]
    fn json_round_trips(g in arb_graph()) {
        prop_assert_eq!(snapshot::read_bytes(&json_of(&g)).unwrap(), g);
    }

    #[test]
    fn binary_round_trips(g in arb_graph()) {
        prop_assert_eq!(snapshot::read_bytes(&binary_of(&g)).unwrap(), g);
    }

    /// Damaged JSON, likewise: an error or a valid graph, never a panic.
    #[test]
    fn damaged_json_never_panics(at in any::<Index>(), byte in any::<u8>(), cut in any::<bool>()) {
        let mut text = std::fs::read(fixture_path()).unwrap();
        let i = at.index(text.len());
        if cut {
            text.truncate(i);
        } else {
            text[i] = byte;
        }
        if let Ok(read) = snapshot::read_bytes(&text) {
            prop_assert!(read.validate().is_ok());
        }
    }

    /// Damaged binary files give an error or, when the damage lands in a value, some valid
    /// graph: never a panic, never an invalid graph.
    #[test]
    fn damaged_binary_never_panics(g in arb_graph(), at in any::<Index>(), byte in any::<u8>()) {
        let mut bin = binary_of(&g);
        let i = at.index(bin.len());
        bin[i] = byte;
        if let Ok(read) = snapshot::read_bytes(&bin) {
            prop_assert!(read.validate().is_ok());
        }
    }

    /// The check that builds no graph accepts exactly the files that read back, damaged or
    /// cut anywhere.
    #[test]
    fn the_check_of_a_binary_file_agrees_with_reading_it(
        g in arb_graph(),
        at in any::<Index>(),
        byte in any::<u8>(),
        cut in any::<Index>(),
    ) {
        let bin = binary_of(&g);
        prop_assert!(snapshot::check_bytes(&bin).is_ok());
        let mut damaged = bin.clone();
        let i = at.index(damaged.len());
        damaged[i] = byte;
        let cut = &bin[..cut.index(bin.len())];
        for bytes in [&damaged[..], cut] {
            prop_assert_eq!(
                snapshot::check_bytes(bytes).is_ok(),
                snapshot::read_bytes(bytes).is_ok()
            );
        }
    }
}

#[test]
fn json_is_written_one_object_a_line() {
    // Each object, site and thread on a line of its own, the rest of the outline pretty.
    let text = String::from_utf8(json_of(&fixture())).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "{",
            r#"  "format": "heaptui-snapshot","#,
            r#"  "version": 1,"#,
            r#"  "process": {"#
        ]
    );
    assert!(
        lines.contains(&r#"    {"id": 7, "addr": 67328, "size": 76, "site": 7, "refs": [8, 5]},"#)
    );
    assert!(lines.contains(&r#"    {"id": 16, "frames": ["Registry"]}"#));
    assert!(lines.contains(&r#"    {"tid": 4, "name": "thread-n", "state": "stopped", "frames": [{"function": "Class1.methodF", "module": "app", "kind": "user", "refs": [10, 12, 16]}]}"#));
    assert_eq!(
        lines[lines.len() - 4..],
        ["  \"globals\": {", "    \"refs\": [15, 16]", "  }", "}"]
    );
    // {, format and version, process (4 lines), sites (18), objects (18), threads (6), globals (3), }
    assert_eq!(lines.len(), 1 + 2 + 4 + 18 + 18 + 6 + 3 + 1);
}

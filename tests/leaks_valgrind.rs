//! heaptui's leak classes against valgrind memcheck's (docs/reference.md §3 "Leak classes").
//!
//! Each C and C++ program of `tests/leak_programs/` is built at -O0 and -O2 (its perl script
//! runs as it is, perl's hash seed fixed for both tools) and run
//! - once under `valgrind --leak-check=full --leak-check-heuristics=none
//!   --run-libc-freeres=no --run-cxx-freeres=no --xml=yes` (memcheck is deterministic), whose
//!   definitely, indirectly and possibly lost bytes and blocks are read from its XML;
//! - ten times under the real agent, which writes a snapshot at exit (`HEAPTUI_DUMP`), whose
//!   leak classes the engine computes.
//!
//! Every run's three classes must equal memcheck's, bytes and blocks, except for the
//! differences each program states (and the test asserts exactly):
//! - `entered_ring.c`: a lost ring entered from a lost block at a higher address. memcheck
//!   walks lost blocks in address order and keeps the ring's lowest member definitely lost;
//!   heaptui's rule gives the ring no definitely lost block. memcheck has one more definitely
//!   lost block (32 bytes) and one indirectly lost block less.
//! - `unwritten.c`: a stale pointer to a lost block of 100 bytes in a word of a new block
//!   that the program never wrote. memcheck skips a word with an undefined byte; heaptui
//!   cannot tell and finds the block reachable: memcheck has one more definitely lost block.
//! - `threads.c` and `registers.c`: their possibly lost blocks are threads' TLS vectors
//!   (glibc's `allocate_dtv`), pointed at 16 bytes in by the thread descriptors. Under the
//!   agent each is 16 bytes longer: the agent is one more module with thread-local storage.
//!
//! `slack.c` leaves a stale pointer in the slack past a block's asked size, completed by the
//! two bytes the program wrote into that word: neither tool counts a word that is not wholly
//! within the asked size, so the block it points into is definitely lost for both, whatever
//! the layout.
//!
//! `slack.c` and `unwritten.c` leave their stale word in a chunk they free and malloc again:
//! each says whether malloc gave that chunk back, and under the agent it must have, or the
//! run tested nothing (`Program::reuses_freed_chunk`).
//!
//! `cycles.pl` is perl, which nobody here wrote, leaking cycles of hashes: its shared hash
//! keys are such blocks (42 bytes for an 8-byte key).
//!
//! `registers.c` holds blocks only in registers of threads blocked in a system call (a
//! callee-saved register, the call's buffer argument) while main exits: reachable for both
//! tools, memcheck scanning every register and heaptui the call's arguments and the
//! callee-saved ones (docs/reference.md §3). A pointer only in a dead caller-saved register of
//! a blocked thread would be reachable for memcheck only: the programs keep none.
//!
//! What the programs do so that the two tools see the same roots, and why: they build their
//! structures in functions that return, then wipe the stack below main's frame and the
//! caller-saved registers (`leak.h`), as valgrind's own leak tests do: a stale copy of a
//! pointer in a dead stack slot is a root for both tools, but where it lands differs (the
//! agent's hooks and valgrind's allocator run different code on the program's stack).
//! A thread that ends need not wipe its stack: glibc keeps a finished thread's stack in a cache
//! (an mmap), of which both tools scan only the TLS and the thread descriptor, so `threads.c`'s
//! workers leave copies of their leaked blocks' addresses in frames they returned from.
//!
//! glibc's and libstdc++'s own allocations (stdio buffers, the exception pool) are reachable
//! for both tools with `--run-libc-freeres=no --run-cxx-freeres=no`; with valgrind's defaults
//! they would be freed before its leak check and missing from its figures only.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use heaptui_analysis::{Analysis, snapshot};

/// Runs under the agent per program and optimisation level.
const AGENT_RUNS: usize = 10;

/// Bytes and blocks of one leak class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Class {
    bytes: u64,
    blocks: u64,
}

/// Definitely, indirectly and possibly lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Classes {
    definitely: Class,
    indirectly: Class,
    possibly: Class,
}

/// One program of `tests/leak_programs/`, and what heaptui finds given memcheck's figures.
struct Program {
    source: &'static str,
    expected: fn(Classes) -> Classes,
    /// The program tests a stale word left in a chunk it freed, which its next malloc must
    /// give back, and says on stdout whether it did ("reused" or "fresh", `leak.h`). Under
    /// the agent the chunk comes back only while the free goes straight to libc (the block
    /// still in its thread's nursery); were the free held, the new block would be fresh,
    /// with no stale word, and `expected` would hold for want of a test: so every run under
    /// the agent must say "reused". Under valgrind it says "fresh" (memcheck's freed blocks
    /// wait in a queue) and memcheck's figures are the same as with the stale word (outside
    /// the asked size, or undefined): not asserted there.
    reuses_freed_chunk: bool,
}

fn same(memcheck: Classes) -> Classes {
    memcheck
}

const PROGRAMS: &[Program] = &[
    Program {
        source: "lists.c",
        expected: same,
        reuses_freed_chunk: false,
    },
    Program {
        source: "interior.c",
        expected: same,
        reuses_freed_chunk: false,
    },
    Program {
        source: "mapped.c",
        expected: same,
        reuses_freed_chunk: false,
    },
    Program {
        source: "slack.c",
        expected: same,
        reuses_freed_chunk: true,
    },
    Program {
        source: "cycles.pl",
        expected: same,
        reuses_freed_chunk: false,
    },
    Program {
        source: "unwritten.c",
        expected: |m| Classes {
            definitely: Class {
                bytes: m.definitely.bytes - 100,
                blocks: m.definitely.blocks - 1,
            },
            ..m
        },
        reuses_freed_chunk: true,
    },
    Program {
        source: "containers.cpp",
        expected: same,
        reuses_freed_chunk: false,
    },
    Program {
        source: "entered_ring.c",
        expected: |m| Classes {
            definitely: Class {
                bytes: m.definitely.bytes - 32,
                blocks: m.definitely.blocks - 1,
            },
            indirectly: Class {
                bytes: m.indirectly.bytes + 32,
                blocks: m.indirectly.blocks + 1,
            },
            possibly: m.possibly,
        },
        reuses_freed_chunk: false,
    },
    Program {
        source: "threads.c",
        expected: tls_vectors_longer,
        reuses_freed_chunk: false,
    },
    Program {
        source: "registers.c",
        expected: tls_vectors_longer,
        reuses_freed_chunk: false,
    },
];

/// memcheck's figures, with its possibly lost blocks (threads' TLS vectors) 16 bytes longer
/// each: under the agent, one more module has thread-local storage.
fn tls_vectors_longer(m: Classes) -> Classes {
    Classes {
        possibly: Class {
            bytes: m.possibly.bytes + 16 * m.possibly.blocks,
            blocks: m.possibly.blocks,
        },
        ..m
    }
}

fn programs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/leak_programs")
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("heaptui-leaks-valgrind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn agent() -> PathBuf {
    let out = Command::new(env!("CARGO_BIN_EXE_heaptui"))
        .arg("agent-path")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim_end())
}

/// One program ready to run: its name in messages and files, and its command line.
struct Run {
    tag: String,
    command: Vec<OsString>,
}

impl Run {
    /// The command, with the environment both tools run it in: perl's hash seed fixed, so
    /// that its hashes, and so its allocations, are the same in every run.
    fn command(&self) -> Command {
        let mut c = Command::new(&self.command[0]);
        c.args(&self.command[1..])
            .env("PERL_HASH_SEED", "0")
            .env("PERL_PERTURB_KEYS", "0");
        c
    }
}

/// Builds `source` at `opt` into `dir` (a perl script is run as it is, `opt` empty).
fn build(dir: &Path, source: &str, opt: &str) -> Run {
    let (stem, ext) = source.rsplit_once('.').unwrap();
    if ext == "pl" {
        return Run {
            tag: stem.to_string(),
            command: vec!["perl".into(), programs_dir().join(source).into()],
        };
    }
    let compiler = if ext == "cpp" { "g++" } else { "gcc" };
    let exe = dir.join(format!("{stem}{opt}"));
    let out = Command::new(compiler)
        .args([opt, "-g", "-pthread", "-I"])
        .arg(programs_dir())
        .arg("-o")
        .arg(&exe)
        .arg(programs_dir().join(source))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} {source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Run {
        tag: format!("{stem}{opt}"),
        command: vec![exe.into()],
    }
}

/// The text between `<tag>` and `</tag>` in `s`, from `from` on: (text, end offset).
fn element<'a>(s: &'a str, tag: &str, from: usize) -> Option<(&'a str, usize)> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = s[from..].find(&open)? + from + open.len();
    let end = s[start..].find(&close)? + start;
    Some((&s[start..end], end + close.len()))
}

fn number(text: &str) -> u64 {
    text.trim()
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

/// memcheck's three classes from its XML: the sum of its leak records of each kind. A
/// definitely (or possibly) lost record's bytes include the blocks it keeps indirectly lost;
/// its text says how many of them are its own ("N (D direct, I indirect) bytes").
fn memcheck_classes(xml: &str) -> Classes {
    let mut c = Classes::default();
    let mut at = 0;
    while let Some((error, end)) = element(xml, "error", at) {
        at = end;
        let Some((kind, _)) = element(error, "kind", 0) else {
            continue;
        };
        let class = match kind {
            "Leak_DefinitelyLost" => &mut c.definitely,
            "Leak_IndirectlyLost" => &mut c.indirectly,
            "Leak_PossiblyLost" => &mut c.possibly,
            _ => continue,
        };
        let (text, _) = element(error, "text", 0).expect("a leak record has a text");
        let (blocks, _) = element(error, "leakedblocks", 0).expect("leakedblocks");
        let (bytes, _) = element(error, "leakedbytes", 0).expect("leakedbytes");
        let own = match text.split_once(" direct, ") {
            Some((head, _)) => number(head.rsplit_once('(').expect("(N direct").1),
            None => number(bytes),
        };
        class.bytes += own;
        class.blocks += number(blocks);
    }
    c
}

fn valgrind(dir: &Path, run: &Run) -> Classes {
    let xml = dir.join(format!("{}.memcheck.xml", run.tag));
    let program = run.command();
    let out = Command::new("valgrind")
        .envs(program.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .args([
            "--tool=memcheck",
            "--leak-check=full",
            "--show-leak-kinds=all",
            "--leak-check-heuristics=none",
            "--run-libc-freeres=no",
            "--run-cxx-freeres=no",
            "--xml=yes",
        ])
        .arg(format!("--xml-file={}", xml.display()))
        .arg(program.get_program())
        .args(program.get_args())
        .output()
        .expect("valgrind runs (.ci/run installs it)");
    assert!(
        out.status.success(),
        "valgrind {}: {}",
        run.tag,
        String::from_utf8_lossy(&out.stderr)
    );
    memcheck_classes(&std::fs::read_to_string(&xml).unwrap())
}

/// One run under the agent: the leak classes of its snapshot at exit, and its stdout.
fn under_agent(dir: &Path, program: &Run, agent: &Path, run: usize) -> (Classes, String) {
    let tag = format!("{}-{run}", program.tag);
    let prefix = dir.join(format!("{tag}.dump"));
    let out = program
        .command()
        .env("LD_PRELOAD", agent)
        .env("HEAPTUI_DUMP", &prefix)
        .env(
            "HEAPTUI_LISTEN",
            format!("unix:{}", dir.join(format!("{tag}.sock")).display()),
        )
        .env("HEAPTUI_LOG", dir.join(format!("{tag}.log")))
        .output()
        .unwrap();
    assert!(out.status.success(), "{tag}: {out:?}");
    let name = format!("{tag}.dump.");
    let dumps: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let f = p.file_name().unwrap().to_string_lossy();
            f.starts_with(&name) && f.ends_with(".hsnap")
        })
        .collect();
    assert_eq!(dumps.len(), 1, "{tag}: one snapshot at exit, got {dumps:?}");
    let graph = snapshot::read_file(&dumps[0]).unwrap();
    let l = Analysis::new(&graph).leaks();
    let classes = Classes {
        definitely: Class {
            bytes: l.definitely_lost,
            blocks: l.definitely_lost_objects,
        },
        indirectly: Class {
            bytes: l.indirectly_lost,
            blocks: l.indirectly_lost_objects,
        },
        possibly: Class {
            bytes: l.possibly_lost,
            blocks: l.possibly_lost_objects,
        },
    };
    (classes, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn leak_classes_equal_memchecks() {
    let scratch = Scratch::new();
    let dir = scratch.0.as_path();
    let agent = agent();
    let jobs: Mutex<Vec<(&Program, &str)>> = Mutex::new(
        PROGRAMS
            .iter()
            .flat_map(|p| {
                let opts: &[&str] = if p.source.ends_with(".pl") {
                    &[""]
                } else {
                    &["-O0", "-O2"]
                };
                opts.iter().map(move |&opt| (p, opt))
            })
            .collect(),
    );
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let Some((program, opt)) = jobs.lock().unwrap().pop() else {
                        return;
                    };
                    let exe = build(dir, program.source, opt);
                    let memcheck = valgrind(dir, &exe);
                    let expected = (program.expected)(memcheck);
                    for run in 0..AGENT_RUNS {
                        let (got, stdout) = under_agent(dir, &exe, &agent, run);
                        if program.reuses_freed_chunk && stdout != "reused\n" {
                            failures.lock().unwrap().push(format!(
                                "{} {opt} run {run}: its new block is not the chunk it freed \
                                 (stdout {stdout:?}): the stale word was not tested",
                                program.source
                            ));
                        }
                        if got != expected {
                            failures.lock().unwrap().push(format!(
                                "{} {opt} run {run}:\n  heaptui  {got:?}\n  expected {expected:?}\n  memcheck {memcheck:?}",
                                program.source
                            ));
                        }
                    }
                    eprintln!("{} {opt}: memcheck {memcheck:?}", program.source);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The XML reader on a record of each kind as memcheck 3.19 writes them.
#[test]
fn memchecks_xml_is_read_by_class() {
    let xml = "<valgrindoutput><error><unique>0x1</unique><kind>Leak_DefinitelyLost</kind>\
        <xwhat><text>1,120 (32 direct, 1,088 indirect) bytes in 1 blocks are definitely lost in \
        loss record 3 of 4</text><leakedbytes>1120</leakedbytes><leakedblocks>1</leakedblocks>\
        </xwhat></error><error><kind>Leak_IndirectlyLost</kind><xwhat><text>1,088 bytes in 34 \
        blocks are indirectly lost</text><leakedbytes>1088</leakedbytes><leakedblocks>34\
        </leakedblocks></xwhat></error><error><kind>Leak_PossiblyLost</kind><xwhat><text>72 \
        bytes in 1 blocks are possibly lost</text><leakedbytes>72</leakedbytes><leakedblocks>1\
        </leakedblocks></xwhat></error><error><kind>Leak_StillReachable</kind><xwhat><text>64 \
        bytes in 1 blocks are still reachable</text><leakedbytes>64</leakedbytes><leakedblocks>\
        1</leakedblocks></xwhat></error><error><kind>Leak_DefinitelyLost</kind><xwhat><text>10 \
        bytes in 2 blocks are definitely lost</text><leakedbytes>10</leakedbytes><leakedblocks>\
        2</leakedblocks></xwhat></error></valgrindoutput>";
    let c = memcheck_classes(xml);
    assert_eq!(
        c.definitely,
        Class {
            bytes: 42,
            blocks: 3
        }
    );
    assert_eq!(
        c.indirectly,
        Class {
            bytes: 1088,
            blocks: 34
        }
    );
    assert_eq!(
        c.possibly,
        Class {
            bytes: 72,
            blocks: 1
        }
    );
}

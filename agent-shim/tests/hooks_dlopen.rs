//! A library loaded with dlopen allocates through the hooks like the program itself.

mod common;

use common::*;

const LIB: &str = r#"
#include <stdlib.h>
#include <string.h>
void *lib_make(size_t n) { char *p = malloc(n); memset(p, 7, n); return p; }
void lib_drop(void *p) { free(p); }
"#;

const MAIN: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int calls = atoi(argv[2]);
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    void *(*make)(size_t) = (void *(*)(size_t))dlsym(h, "lib_make");
    void (*drop)(void *) = (void (*)(void *))dlsym(h, "lib_drop");
    void *kept[100];
    for (int i = 0; i < calls; i++) kept[i] = make(1000 + i);
    for (int i = 0; i < calls; i += 2) drop(kept[i]);
    printf("made %d\n", calls);
    fflush(stdout);
    dlclose(h);
    return 0;
}
"#;

#[test]
fn allocations_of_a_dlopened_library_are_tracked() {
    let dir = TempDir::new("hooks-dlopen");
    let lib_src = dir.path().join("liballoc.c");
    std::fs::write(&lib_src, LIB).unwrap();
    let lib = dir.path().join("liballoc.so");
    let out = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&lib)
        .arg(&lib_src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = compile_c(&dir, "loader", MAIN, &[]);
    let lib = lib.to_str().unwrap();
    let base = run_preloaded(&dir, &exe, &[lib, "0"], &[]);
    assert_eq!(
        (base.code, base.stdout.as_str()),
        (Some(0), "made 0\n"),
        "{}",
        base.stderr
    );
    let run = run_preloaded(&dir, &exe, &[lib, "10"], &[]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "made 10\n"),
        "{}",
        run.stderr
    );
    let d = run.summary().minus(&base.summary());
    assert_eq!(d["malloc"], 10);
    assert_eq!(d["free"], 5);
    assert_eq!(d["live_blocks"], 5);
    assert_eq!(d["live_bytes"], (1001 + 1003 + 1005 + 1007 + 1009) as i64);
    assert_eq!(d["allocated_bytes"], (1000..1010).sum::<i64>());
    assert_eq!(d["unknown_frees"], 0);
}

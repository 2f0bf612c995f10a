//! Builds the two artifacts the `heaptui` binary carries inside it, so that one binary is all a
//! user needs (`heaptui agent-path`, `heaptui run`, `heaptui demo`):
//!
//! - the agent shared object (`heaptui-agent`, a cdylib of this workspace), built by a nested
//!   `cargo build` into a target directory of its own under `OUT_DIR` (the outer cargo holds the
//!   lock on the main one), with the same profile as this build;
//! - the demo workload (`demo/workload.c`), compiled with the system C compiler.
//!
//! Both paths reach the crate as `EMBEDDED_HEAPTUI_AGENT` and `EMBEDDED_HEAPTUI_DEMO`, read with
//! `include_bytes!` (not `HEAPTUI_*`: cargo also sets them for `cargo run`, and the agent would
//! take them for its own variables and warn about unknown ones). A failure here fails the build with the compiler's own output: a heaptui
//! without its agent would only fail later, less clearly.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));

    for input in [
        "agent-shim/src",
        "agent-shim/csrc",
        "agent-shim/include",
        "agent-shim/build.rs",
        "agent-shim/Cargo.toml",
        "analysis/src",
        "analysis/Cargo.toml",
        "capture/src",
        "capture/Cargo.toml",
        "protocol/src",
        "protocol/Cargo.toml",
        "Cargo.lock",
        "demo/workload.c",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }

    let agent = build_agent(&manifest_dir, &out_dir);
    println!("cargo:rustc-env=EMBEDDED_HEAPTUI_AGENT={}", agent.display());
    let demo = build_demo(&manifest_dir, &out_dir);
    println!("cargo:rustc-env=EMBEDDED_HEAPTUI_DEMO={}", demo.display());
}

fn build_agent(manifest_dir: &Path, out_dir: &Path) -> PathBuf {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out_dir.join("agent-target");
    // `PROFILE` is "debug" or "release"; custom profiles inherit from one of the two.
    let release = env::var("PROFILE").as_deref() == Ok("release");
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .args(["--package", "heaptui-agent", "--lib"])
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    if release {
        command.arg("--release");
    }
    // Frozen versions: the nested build must use exactly the outer build's lock file.
    if manifest_dir.join("Cargo.lock").exists() {
        command.arg("--locked");
    }
    // Flags meant for the outer build (e.g. coverage instrumentation) must not leak into the
    // agent, which is loaded into other programs.
    command
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS");
    run(
        &mut command,
        "build the heaptui agent (cargo build -p heaptui-agent)",
    );

    let built = target_dir
        .join(if release { "release" } else { "debug" })
        .join("libheaptui_agent.so");
    let embedded = out_dir.join("libheaptui_agent.so");
    std::fs::copy(&built, &embedded)
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
    embedded
}

fn build_demo(manifest_dir: &Path, out_dir: &Path) -> PathBuf {
    let compiler = env::var_os("CC").unwrap_or_else(|| "cc".into());
    let output = out_dir.join("heaptui-demo");
    let mut command = Command::new(compiler);
    // Frame pointers and line tables make the demo's frames and sites read well in the TUI.
    command
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-Wall"])
        .arg("-o")
        .arg(&output)
        .arg(manifest_dir.join("demo/workload.c"));
    run(&mut command, "compile the demo workload (demo/workload.c)");
    output
}

fn run(command: &mut Command, what: &str) {
    match command.status() {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("could not {what}: {status}; see the output above"),
        Err(e) => panic!(
            "could not {what}: cannot run {:?}: {e}",
            command.get_program()
        ),
    }
}

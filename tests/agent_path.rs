//! `heaptui agent-path` prints the agent built into this binary, ready for `LD_PRELOAD`.

use std::process::Command;

#[test]
fn agent_path_prints_a_loadable_agent() {
    let out = Command::new(env!("CARGO_BIN_EXE_heaptui"))
        .arg("agent-path")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8(out.stdout).unwrap();
    let path = std::path::Path::new(path.trim_end());
    assert!(path.is_absolute(), "{}", path.display());
    assert!(path.is_file(), "{} does not exist", path.display());

    // The loader accepts it and the program runs unchanged.
    let echo = Command::new("sh")
        .args(["-c", "echo preloaded"])
        .env("LD_PRELOAD", path)
        .env(
            "HEAPTUI_LISTEN",
            "unix:/nonexistent-dir/heaptui-agent-path-test.sock",
        )
        .output()
        .unwrap();
    assert!(
        echo.status.success(),
        "{}",
        String::from_utf8_lossy(&echo.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&echo.stdout), "preloaded\n");
    let stderr = String::from_utf8_lossy(&echo.stderr);
    assert!(
        !stderr.contains("cannot be preloaded"),
        "the loader refused the agent: {stderr}"
    );
}

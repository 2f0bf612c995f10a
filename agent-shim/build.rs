//! Builds the agent's tiny C helper (initial-exec TLS for the hooks' per-thread state) and
//! links the cdylib with immediate binding, so no lazy PLT resolution runs inside a hook.

fn main() {
    println!("cargo:rerun-if-changed=csrc/tls.c");
    cc::Build::new()
        .file("csrc/tls.c")
        .flag("-ftls-model=initial-exec")
        .flag("-fno-omit-frame-pointer")
        .opt_level(2)
        .compile("heaptui_tls");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
}

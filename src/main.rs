//! `heaptui`: the one binary users run (SPEC §2).

fn main() {
    println!("heaptui");
}

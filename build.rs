//! Tells the crate whether it is built with frame pointers (`-C force-frame-pointers=yes`), which
//! allocation-site capture needs (see `src/sites/unwind.rs`): without them the walk is compiled out
//! and the report says why sites have no stacks.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(frag_frame_pointers)");
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split('\x1f').collect();
    // `-C force-frame-pointers=yes` arrives as one word or as two ("-C", "force-frame-pointers=yes");
    // the last setting wins, as in rustc.
    let mut on = false;
    for (i, word) in flags.iter().enumerate() {
        let option = match word.strip_prefix("-C") {
            Some("") => flags.get(i + 1).copied().unwrap_or(""),
            Some(rest) => rest,
            None => continue,
        };
        if let Some(value) = option.strip_prefix("force-frame-pointers") {
            on = matches!(value, "" | "=yes" | "=y" | "=on" | "=true" | "=always");
        }
    }
    if on {
        println!("cargo::rustc-cfg=frag_frame_pointers");
    }
}

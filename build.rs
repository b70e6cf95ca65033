//! Chooses the unwinder for allocation-site stacks (see `src/sites/unwind/mod.rs`) and tells the
//! crate with `cfg(frag_unwind = ...)`:
//! - `"frame_pointers"`: built with `-C force-frame-pointers=yes`, on Linux with glibc, x86-64 or
//!   AArch64: the frame-pointer chain;
//! - `"tables"`: otherwise on x86-64 Linux with glibc: unwind tables built from `.eh_frame`;
//! - `"none"`: elsewhere: no stacks.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(frag_unwind, values(\"frame_pointers\", \"tables\", \"none\"))");
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let flags: Vec<&str> = flags.split('\x1f').collect();
    // `-C force-frame-pointers=yes` arrives as one word or as two ("-C", "force-frame-pointers=yes");
    // the last setting wins, as in rustc.
    let mut frame_pointers = false;
    for (i, word) in flags.iter().enumerate() {
        let option = match word.strip_prefix("-C") {
            Some("") => flags.get(i + 1).copied().unwrap_or(""),
            Some(rest) => rest,
            None => continue,
        };
        if let Some(value) = option.strip_prefix("force-frame-pointers") {
            frame_pointers = matches!(value, "" | "=yes" | "=y" | "=on" | "=true" | "=always");
        }
    }
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    let arch = var("CARGO_CFG_TARGET_ARCH");
    if glibc && frame_pointers && (arch == "x86_64" || arch == "aarch64") {
        println!("cargo::rustc-cfg=frag_unwind=\"frame_pointers\"");
    } else if glibc && arch == "x86_64" {
        println!("cargo::rustc-cfg=frag_unwind=\"tables\"");
    } else {
        println!("cargo::rustc-cfg=frag_unwind=\"none\"");
    }
}

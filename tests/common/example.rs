//! Builds one of the crate's examples for a test to run as a child process.

use std::path::PathBuf;
use std::process::Command;

/// `cargo build --example <name>` with this test binary's features, in its target directory and
/// profile (so it reuses the dependencies the tests were built with); returns the example's path.
pub fn build(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // <target>/<profile>/deps/<test binary>
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("<profile>/deps");
    let target = profile_dir.parent().expect("<target>/<profile>");
    // Every feature of the test build, so that the example reuses its dependencies as they are.
    let features: Vec<&str> = [
        ("jemalloc", cfg!(feature = "jemalloc")),
        ("jemalloc-prof", cfg!(feature = "jemalloc-prof")),
        ("mimalloc", cfg!(feature = "mimalloc")),
        ("snmalloc", cfg!(feature = "snmalloc")),
        ("serde", cfg!(feature = "serde")),
        ("http", cfg!(feature = "http")),
        ("tokio", cfg!(feature = "tokio")),
    ]
    .into_iter()
    .filter_map(|(feature, on)| on.then_some(feature))
    .collect();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--example", name, "--no-default-features"]);
    if profile_dir.ends_with("release") {
        cmd.arg("--release");
    }
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let status = cmd.env("CARGO_TARGET_DIR", target).current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("cargo");
    assert!(status.success(), "cargo build --example {name} failed");
    profile_dir.join("examples").join(name)
}

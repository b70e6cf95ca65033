//! `go tool pprof` (Debian's `golang-go`) as the client that reads our profiles.

use std::process::Command;

/// `go tool pprof -top -nodecount=1000 <args> [-diff_base=<base>] <profile>`: the report's text.
/// Panics when `go` is missing or `pprof` refuses the profile.
pub fn top(profile: &[u8], base: Option<&[u8]>, args: &[&str]) -> String {
    let args: Vec<&str> = ["-top", "-nodecount=1000"].into_iter().chain(args.iter().copied()).collect();
    pprof(profile, base, &args)
}

/// `go tool pprof <args> [-diff_base=<base>] <profile>`: the report's text. Panics when `go` is
/// missing or `pprof` refuses the profile.
pub fn pprof(profile: &[u8], base: Option<&[u8]>, args: &[&str]) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = |what: &str| std::env::temp_dir().join(format!("frag-go-{}-{n}-{what}.pb.gz", std::process::id()));
    let path = file("profile");
    std::fs::write(&path, profile).unwrap();
    let mut cmd = Command::new("go");
    cmd.args(["tool", "pprof"]).args(args);
    let base_path = base.map(|base| {
        let base_path = file("base");
        std::fs::write(&base_path, base).unwrap();
        cmd.arg(format!("-diff_base={}", base_path.display()));
        base_path
    });
    let out = cmd.arg(&path).output().expect("`go` on PATH (Debian: apt-get install golang-go)");
    let _ = std::fs::remove_file(&path);
    if let Some(base_path) = base_path {
        let _ = std::fs::remove_file(base_path);
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "go tool pprof failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    text
}

/// One row of `-top`: flat and cumulative values (bytes when run with `-unit=B`, else NaN), their
/// shares in percent, and the function's name.
#[derive(Debug)]
pub struct Row {
    pub flat: f64,
    pub flat_pct: f64,
    pub cum: f64,
    pub cum_pct: f64,
    pub name: String,
}

/// The rows of a `-top` report (columns: flat flat% sum% cum cum% name).
pub fn rows(text: &str) -> Vec<Row> {
    text.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let bytes = |i: usize| cols.get(i).and_then(|c| c.strip_suffix('B')?.parse().ok()).unwrap_or(f64::NAN);
            let pct = |i: usize| cols.get(i)?.strip_suffix('%')?.parse::<f64>().ok();
            Some(Row {
                flat: bytes(0),
                flat_pct: pct(1)?,
                cum: bytes(3),
                cum_pct: pct(4)?,
                name: cols.get(5..)?.join(" "),
            })
        })
        .collect()
}

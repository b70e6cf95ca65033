//! The worked example of the pins column (`examples/pinned.rs`), run as documented: with the
//! sessions in blocks of their own, the `holes` finding names the sites section's row whose leaf is
//! `remember_session`; with `--fix` (the sessions in one pool), the purge after the burst returns the
//! memory, and the resident set (the example's read of `/proc/self/statm`) ends far lower.
#![cfg(feature = "jemalloc")]

mod common;

/// The example's output, with `args`.
fn run(args: &[&str]) -> String {
    let out = std::process::Command::new(common::example::build("pinned")).args(args).output().expect("pinned");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "pinned {args:?} failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The last line's resident MiB after the burst.
fn resident_after(text: &str) -> f64 {
    let line = text.lines().rev().find(|l| l.contains(" at its peak, ")).expect("the summary line");
    let after = line.split(" at its peak, ").nth(1).unwrap();
    after.split(" MiB").next().unwrap().parse().unwrap()
}

/// The sites section's row `#n`: its leaf frame, and the whole line.
fn row(text: &str, n: usize) -> (String, String) {
    let marker = format!(" #{n}  ");
    let line = text.lines().find(|l| l.contains(&marker)).unwrap_or_else(|| panic!("no row #{n}\n{text}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    let at = cols.iter().position(|c| *c == format!("#{n}")).unwrap();
    (cols[at + 1].to_owned(), line.to_owned())
}

#[test]
fn the_report_names_the_pinning_site_and_the_fix_returns_the_memory() {
    let pinned = run(&[]);
    let fixed = run(&["--fix"]);
    eprintln!("{pinned}\n{fixed}");

    // "the sites pinning the most are the sites section's rows #N (~X)": the first named row.
    let finding = pinned.lines().find(|l| l.contains("the sites pinning the most")).expect("the holes finding");
    let n: usize = finding
        .split("sites section's rows #")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .expect("a row number");
    let (leaf, line) = row(&pinned, n);
    // `pinned::remember_session`, or its bare name in a build with line tables only.
    assert!(common::frame_is(&leaf, "remember_session"), "row #{n} is not the cache's site: {line}");

    // 200,000 sessions of 40 B kept among 3 million freed scratch blocks: about 150 MiB of slabs stay
    // resident; in one pool, they go back.
    let (kept, returned) = (resident_after(&pinned), resident_after(&fixed));
    eprintln!("resident after the burst: {kept:.1} MiB pinned, {returned:.1} MiB fixed");
    assert!(kept - returned >= 100.0, "the fix moved resident memory by {:.1} MiB only", kept - returned);
}

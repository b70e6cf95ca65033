//! A process that links frag but installs no `Tracked` (here: bare jemalloc as the global
//! allocator, as a user who forgot the wrapper has): every answer says so in those words.
#![cfg(feature = "jemalloc")]

use frag::tune::TuneError;

#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[test]
fn every_answer_says_no_tracked_allocator_is_installed() {
    let e = frag::tune::release_free_memory().unwrap_err();
    assert_eq!(e, TuneError::NotInstalled { knob: "release_free_memory" });
    assert!(e.to_string().contains("no Tracked allocator is installed"), "{e}");
    let e = frag::tune::jemalloc::set_decay(
        frag::tune::jemalloc::DecayKind::Dirty,
        frag::tune::Decay::After(std::time::Duration::from_secs(1)),
    )
    .unwrap_err();
    assert!(matches!(e, TuneError::NotInstalled { .. }), "{e:?}");
    assert!(e.to_string().contains("no Tracked allocator is installed"), "{e}");

    let e = frag::reclaim::Reclaimer::new().spawn().unwrap_err();
    assert!(matches!(e, frag::reclaim::ReclaimError::Backend(TuneError::NotInstalled { knob: "reclaim" })), "{e:?}");
    assert!(e.to_string().contains("no Tracked allocator is installed"), "{e}");

    let r = frag::report();
    assert_eq!(r.backend, None);
    assert_eq!(r.tracked.allocations, 0, "nothing went through a Tracked allocator");
    assert!(r.warnings.iter().any(|w| w.kind == frag::report::WarningKind::NotInstalled));
    assert!(r.to_string().starts_with("frag report: no Tracked allocator is installed"), "{r}");
}

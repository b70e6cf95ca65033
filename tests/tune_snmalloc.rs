//! snmalloc has no knobs: every tuning call says so with a typed error.
#![cfg(feature = "snmalloc")]

use frag::tune::{Decay, TuneError};

#[global_allocator]
static A: frag::Tracked<snmalloc_rs::SnMalloc> = frag::Tracked::new(snmalloc_rs::SnMalloc);

#[test]
fn every_call_is_unsupported_or_for_another_backend() {
    drop(vec![0u8; 100]);
    let e = frag::tune::release_free_memory().unwrap_err();
    assert!(
        matches!(
            e,
            TuneError::Unsupported {
                backend: frag::backend::WrappedBackend::Known(frag::backend::Backend::Snmalloc),
                ..
            }
        ),
        "{e}"
    );
    let e = frag::tune::set_purge_delay(Decay::Immediate).unwrap_err();
    assert!(
        matches!(
            e,
            TuneError::Unsupported {
                backend: frag::backend::WrappedBackend::Known(frag::backend::Backend::Snmalloc),
                ..
            }
        ),
        "{e}"
    );
    #[cfg(feature = "jemalloc")]
    assert_eq!(
        frag::tune::jemalloc::set_decay(frag::tune::jemalloc::DecayKind::Dirty, Decay::Immediate).unwrap_err(),
        TuneError::WrongBackend {
            wanted: frag::backend::Backend::Jemalloc,
            installed: frag::backend::WrappedBackend::Known(frag::backend::Backend::Snmalloc)
        }
    );
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    assert!(matches!(frag::tune::glibc::trim(), Err(TuneError::WrongBackend { .. })));
}

/// The reclaimer refuses snmalloc with a typed error instead of running a thread that can do nothing.
#[test]
fn the_reclaimer_is_refused() {
    drop(vec![0u8; 100]);
    let e = frag::reclaim::Reclaimer::new().spawn().unwrap_err();
    assert!(
        matches!(
            e,
            frag::reclaim::ReclaimError::Backend(TuneError::Unsupported {
                backend: frag::backend::WrappedBackend::Known(frag::backend::Backend::Snmalloc),
                ..
            })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("no call that returns free memory"), "{e}");
}

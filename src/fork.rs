//! frag's locks across `fork()`: each is held by the forking thread while the process is copied,
//! so that the child gets it unlocked and the data it guards whole, whatever the parent's other
//! threads were doing (the way jemalloc and glibc treat their own locks).
//!
//! A [`Lock`] is a `std::sync::Mutex` plus a slot for the forking thread's guard. The first time any
//! `Lock` is taken, `pthread_atfork` gets three handlers: before the fork, the forking thread takes
//! every lock that has been used (waiting for a holder to finish, as any taker would); after it, the
//! parent and the child each unlock them. No lock of frag's is held across a call that waits for
//! the forking thread, so the wait ends.
//!
//! **Order against the backend's handlers.** A holder of one of these locks may allocate, and
//! jemalloc's own `pthread_atfork` handler holds its arenas' locks from its prepare step to its
//! unlocking: frag's prepare must run first, while a holder can still allocate. Prepare handlers run
//! in the reverse order of registration, so frag registers after the backend: at the first use of a
//! lock, which comes after the process's first allocation, when jemalloc registered its handlers.
//! glibc takes its malloc locks inside `fork` itself, after every prepare handler.
//!
//! Everything else of frag's that a thread of the parent may have left half-done (counts of walks
//! or windows under way, claims in progress) is made of atomics, which the modules that own them
//! reset in the child (`loader`, `stats::pool`, `sampler`, `reclaim::threads`), or marks who holds it
//! by process id (the unwind tables' writer), so that a child never waits for a thread it does not
//! have. The symbolizer has handlers of its own (`sites::symbols`): a fork waits, bounded, for the
//! symbolizers at work, since the `backtrace` crate's lock is not one frag can hold.

use core::cell::UnsafeCell;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::sync::{AtomicBool, AtomicPtr, Ordering};

/// A mutex that a forked child gets unlocked (see the module docs). For statics: a guard kept
/// across the fork borrows the lock for `'static`.
#[repr(C)]
pub(crate) struct Lock<T: 'static> {
    /// First, so that the handlers reach every lock, whatever its `T`, through a `*const Link`.
    link: Link,
    mutex: Mutex<T>,
    /// The forking thread's guard, between the prepare handler and the unlocking in parent or child.
    /// Only the thread that holds `mutex` touches it.
    held: UnsafeCell<Option<MutexGuard<'static, T>>>,
}

/// A lock as the handlers see it: its place in the list of locks used, and how to hold and unlock
/// it.
struct Link {
    next: AtomicPtr<Link>,
    listed: AtomicBool,
    hold: unsafe fn(*const Link),
    unlock: unsafe fn(*const Link),
}

// SAFETY: `mutex` is `Sync` for `T: Send`; `held` is read and written only by the thread holding
// `mutex` (the forking thread, from its prepare handler to its parent or child handler), so never by
// two threads at once; the link is atomics and function pointers.
unsafe impl<T: Send> Sync for Lock<T> {}

/// The locks used so far: a list through their links (each listed once and never removed: locks
/// are statics).
static USED: AtomicPtr<Link> = AtomicPtr::new(core::ptr::null_mut());
static REGISTERED: AtomicBool = AtomicBool::new(false);

impl<T: Send> Lock<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self {
            link: Link {
                next: AtomicPtr::new(core::ptr::null_mut()),
                listed: AtomicBool::new(false),
                hold: hold::<T>,
                unlock: unlock::<T>,
            },
            mutex: Mutex::new(value),
            held: UnsafeCell::new(None),
        }
    }

    /// The guard: waits for the lock (a holder's panic does not poison it for the others). Never on
    /// the allocation path: it may wait, and the first call registers the fork handlers.
    pub(crate) fn lock(&'static self) -> MutexGuard<'static, T> {
        self.list();
        self.mutex.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts this lock on the list the fork handlers walk, and registers them the first time.
    fn list(&'static self) {
        let link = &self.link;
        if link.listed.load(Ordering::Acquire) || link.listed.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = (link as *const Link).cast_mut();
        let mut head = USED.load(Ordering::Acquire);
        loop {
            link.next.store(head, Ordering::Relaxed);
            match USED.compare_exchange_weak(head, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        if !REGISTERED.swap(true, Ordering::AcqRel) {
            // SAFETY: the handlers have the C ABI and stay valid for the life of the process. A
            // failure (ENOMEM) leaves forks as they were without them: a child may find a lock held.
            unsafe { libc::pthread_atfork(Some(prepare), Some(unlock_all), Some(unlock_all)) };
        }
    }
}

/// Takes the lock whose link is at `at`.
///
/// # Safety
///
/// `at` is the link of a `&'static Lock<T>` (its first field: `Lock` is `repr(C)`).
unsafe fn hold<T: Send + 'static>(at: *const Link) {
    // SAFETY: the caller's guarantee.
    let lock = unsafe { &*at.cast::<Lock<T>>() };
    let guard = lock.mutex.lock().unwrap_or_else(PoisonError::into_inner);
    // SAFETY: this thread holds `mutex` (just taken), the condition for touching `held`.
    unsafe { *lock.held.get() = Some(guard) };
}

/// Releases the lock whose link is at `at`, if this thread took it in [`hold`].
///
/// # Safety
///
/// As [`hold`]; and the calling thread holds the lock since [`hold`].
unsafe fn unlock<T: Send + 'static>(at: *const Link) {
    // SAFETY: the caller's guarantee.
    let lock = unsafe { &*at.cast::<Lock<T>>() };
    // SAFETY: this thread holds `mutex` since `hold`: taking the guard out unlocks it.
    drop(unsafe { (*lock.held.get()).take() });
}

std::thread_local! {
    /// The head of the list when this thread's prepare handler ran: the locks it holds are that one
    /// and those after it (a lock listed since is not held by it). Const-initialised, no `Drop`.
    static HELD_FROM: core::cell::Cell<*const Link> = const { core::cell::Cell::new(core::ptr::null()) };
}

/// Applies `op` to every lock listed from `at` on.
fn each(mut at: *const Link, op: impl Fn(&Link) -> unsafe fn(*const Link)) {
    // SAFETY: every listed link is the first field of a static `Lock` (`list`).
    while let Some(link) = unsafe { at.as_ref() } {
        // SAFETY: the link's own operation, given its own lock; `unlock` only by the thread that
        // held it (`HELD_FROM`).
        unsafe { op(link)(at) };
        at = link.next.load(Ordering::Acquire).cast_const();
    }
}

/// Before `fork`: the forking thread takes every listed lock.
extern "C" fn prepare() {
    let head = USED.load(Ordering::Acquire).cast_const();
    let _ = HELD_FROM.try_with(|h| h.set(head));
    each(head, |l| l.hold);
}

/// After `fork`, in the parent and in the child: the forking thread unlocks what it took.
extern "C" fn unlock_all() {
    if let Ok(head) = HELD_FROM.try_with(|h| h.replace(core::ptr::null())) {
        each(head, |l| l.unlock);
    }
}

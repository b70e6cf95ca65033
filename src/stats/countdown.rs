//! Where a thread's sampling countdown lives: [`Countdown`], frag's own [`FragCountdown`], and
//! [`declare_countdown!`](crate::declare_countdown) for one in the program's own crate.
//!
//! Every allocation takes its size off the calling thread's countdown, a thread-local, in code
//! inlined into the allocating function. A thread-local defined in another crate (frag's) is
//! reached there through its offset, loaded first; one defined in the program's own crate is at an
//! offset the linker fixes in the instruction (the local-exec model). So a countdown declared with
//! the macro saves one instruction on every allocation (`docs/PERFORMANCE.md`, "The
//! countdown, and why it lives in the program's crate"). Nothing else changes: frag moves the countdown to the home a `Tracked`'s cold path
//! names (`stats::thread::rehome`).

use core::cell::Cell;

/// Where a thread's sampling countdown lives, named by the third type parameter of
/// [`Tracked`](crate::Tracked): [`FragCountdown`] by default, or a type
/// [`declare_countdown!`](crate::declare_countdown) declares in the program's crate.
///
/// # Safety
///
/// [`Countdown::with`] must call `f` with the calling thread's cell and return its result, or
/// return `None` when thread-local storage is gone: the same cell every time on one thread, one that
/// nothing but frag writes, and which stays valid until the thread has exited, through the
/// destructors of its thread-locals (a `thread_local!` that is const-initialised and has no `Drop`,
/// on a target with native thread-locals, as Linux, macOS and Windows are). It must not allocate,
/// lock or panic. [`declare_countdown!`](crate::declare_countdown) writes such an implementation.
pub unsafe trait Countdown: 'static {
    /// Calls `f` with the calling thread's countdown cell.
    #[doc(hidden)]
    fn with<R>(f: impl FnOnce(&Cell<i64>) -> R) -> Option<R>;
}

/// The countdown in frag's own thread-local: the default of [`Tracked`](crate::Tracked).
#[derive(Clone, Copy, Debug)]
pub enum FragCountdown {}

std::thread_local! {
    /// [`FragCountdown`]'s cell (the rules of `reentry`: const-initialised, no `Drop`).
    static LEFT: Cell<i64> = const { Cell::new(0) };
}

// SAFETY: `LEFT` is a const-initialised `thread_local!` without `Drop`, private to this
// implementation, which hands it to frag alone.
unsafe impl Countdown for FragCountdown {
    #[inline(always)]
    fn with<R>(f: impl FnOnce(&Cell<i64>) -> R) -> Option<R> {
        LEFT.try_with(f).ok()
    }
}

/// Declares `$name`, a [`Countdown`] whose thread-local is defined in the calling crate, for the
/// third type parameter of [`Tracked`](crate::Tracked). Declared in the program's own crate (where
/// its `#[global_allocator]` is), it saves one instruction on every allocation of the sampled tier,
/// in every allocating function: the allocator's fast path reaches it at an offset fixed at link
/// time.
///
/// ```no_run
/// frag::declare_countdown!(Countdown);
///
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System, frag::Sampled, Countdown> = frag::Tracked::new(std::alloc::System);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! declare_countdown {
    ($(#[$meta:meta])* $vis:vis $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        $vis enum $name {}

        // SAFETY: the cell is a const-initialised `thread_local!` without `Drop`, private to this
        // implementation, which hands it to frag alone.
        unsafe impl $crate::countdown::Countdown for $name {
            #[inline(always)]
            fn with<R>(f: impl FnOnce(&::core::cell::Cell<i64>) -> R) -> ::core::option::Option<R> {
                ::std::thread_local! {
                    static LEFT: ::core::cell::Cell<i64> = const { ::core::cell::Cell::new(0) };
                }
                LEFT.try_with(f).ok()
            }
        }
    };
}

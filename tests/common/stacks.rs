//! Stacks a program switches to, or runs on, that are not a thread's ordinary one: each runs a
//! closure there (the hostile-environment tests, `tests/hostile_stacks*.rs`).
//!
//! Every stack made here has an inaccessible guard page directly below it and another directly
//! above it, so a walk that reads one word past either end faults at once, where a real program's
//! stack would often have readable memory next to it and hide the bug.

use std::cell::Cell;
use std::ptr;

pub const PAGE: usize = 4096;

/// An anonymous mapping of `size` bytes (a multiple of [`PAGE`]) with a `PROT_NONE` page directly
/// below and directly above it; unmapped on drop.
pub struct Guarded {
    base: usize,
    size: usize,
}

impl Guarded {
    pub fn new(size: usize) -> Self {
        assert_eq!(size % PAGE, 0);
        let whole = size + 2 * PAGE;
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let at = unsafe {
            libc::mmap(
                ptr::null_mut(),
                whole,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED, "mmap");
        let at = at as usize;
        // SAFETY: both pages lie inside the mapping just made.
        unsafe {
            assert_eq!(libc::mprotect(at as *mut libc::c_void, PAGE, libc::PROT_NONE), 0);
            assert_eq!(libc::mprotect((at + PAGE + size) as *mut libc::c_void, PAGE, libc::PROT_NONE), 0);
        }
        Self { base: at + PAGE, size }
    }

    /// The lowest usable address.
    pub fn base(&self) -> usize {
        self.base
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// The usable bytes, filled with `byte`.
    pub fn paint(&self, byte: u8) {
        // SAFETY: `[base, base + size)` is the mapping's read-write part.
        unsafe { ptr::write_bytes(self.base as *mut u8, byte, self.size) };
    }

    /// How many bytes from the top down are no longer all `byte` (the deepest the stack was used).
    pub fn used_below_top(&self, byte: u8) -> usize {
        // SAFETY: as `paint`; the thread that ran on it has ended.
        let bytes = unsafe { std::slice::from_raw_parts(self.base as *const u8, self.size) };
        self.size - bytes.iter().position(|&b| b != byte).unwrap_or(self.size)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in `new`, no longer in use.
        unsafe { libc::munmap((self.base - PAGE) as *mut libc::c_void, self.size + 2 * PAGE) };
    }
}

thread_local! {
    /// The closure a context entered by an `extern "C"` function runs (signal handler, ucontext).
    static TASK: Cell<Option<*mut dyn FnMut()>> = const { Cell::new(None) };
}

/// Runs the closure `TASK` holds, if any.
fn run_task() {
    if let Ok(Some(task)) = TASK.try_with(Cell::get) {
        // SAFETY: `with_task` keeps the closure alive, and this thread alone runs it, until it
        // returns.
        unsafe { (*task)() };
    }
}

/// Runs `enter` with `f` reachable from [`run_task`] on this thread.
fn with_task(mut f: impl FnMut(), enter: impl FnOnce()) {
    let f: &mut dyn FnMut() = &mut f;
    // SAFETY: only the lifetime is erased; `TASK` is cleared before `f` goes out of scope.
    let f: *mut (dyn FnMut() + 'static) = unsafe { std::mem::transmute(f as *mut dyn FnMut()) };
    TASK.try_with(|t| t.set(Some(f))).expect("a live thread");
    enter();
    TASK.try_with(|t| t.set(None)).expect("a live thread");
}

/// `f` on a `stacker` segment of `size` bytes (a fresh mapping with a guard page below it), as
/// rustc's `ensure_sufficient_stack`, `serde_stacker` and the `recursive` crate run deep code.
pub fn on_stacker<R>(size: usize, f: impl FnOnce() -> R) -> R {
    stacker::grow(size, f)
}

/// `f` in a ucontext fiber on a [`Guarded`] stack of `size` bytes: `makecontext` and
/// `swapcontext`, as C coroutine libraries do.
pub fn on_fiber(size: usize, f: impl FnMut()) {
    extern "C" fn entry() {
        run_task();
    }
    let stack = Guarded::new(size);
    with_task(f, || {
        // SAFETY: two contexts, both zeroed then filled by getcontext; the fiber's stack is the
        // guarded mapping, alive until after the switch back; `uc_link` returns to `back` when
        // `entry` returns.
        unsafe {
            let mut back: libc::ucontext_t = std::mem::zeroed();
            let mut fiber: libc::ucontext_t = std::mem::zeroed();
            assert_eq!(libc::getcontext(&mut fiber), 0);
            fiber.uc_stack.ss_sp = stack.base() as *mut libc::c_void;
            fiber.uc_stack.ss_size = stack.size();
            fiber.uc_link = &mut back;
            libc::makecontext(&mut fiber, entry, 0);
            assert_eq!(libc::swapcontext(&mut back, &fiber), 0);
        }
    });
}

/// `f` in a `corosensei` coroutine (its own stack, with a guard page), resumed `rounds` times: each
/// resumption calls `f` once and yields.
pub fn on_coroutine(rounds: usize, mut f: impl FnMut()) {
    use corosensei::{CoroutineResult, ScopedCoroutine};
    let co = ScopedCoroutine::new(|yielder, ()| {
        for _ in 0..rounds {
            f();
            yielder.suspend(());
        }
    });
    co.scope(|mut co| {
        for _ in 0..rounds {
            assert!(matches!(co.as_mut().resume(()), CoroutineResult::Yield(())));
        }
        assert!(matches!(co.resume(()), CoroutineResult::Return(())));
    });
}

/// `f` on a new thread whose stack the test made itself (`pthread_attr_setstack`: its descriptor
/// and TLS are carved out of the top of that memory), `size` bytes with guard pages around it;
/// returns how deep the stack was used, painted before and read after the thread ends.
pub fn on_given_stack(size: usize, f: impl FnMut() + Send) -> usize {
    let stack = Guarded::new(size);
    stack.paint(0xa5);
    on_pthread(
        |attr| {
            // SAFETY: `attr` is initialised; the stack outlives the thread (joined before it drops).
            unsafe {
                assert_eq!(libc::pthread_attr_setstack(attr, stack.base() as *mut libc::c_void, stack.size()), 0)
            };
        },
        f,
    );
    stack.used_below_top(0xa5)
}

/// `f` on a new thread with glibc's smallest stack (`PTHREAD_STACK_MIN`, 16 KiB) and `extra` bytes,
/// or the smallest glibc takes with this program's thread-local storage when that is more; returns
/// the stack size.
pub fn on_smallest_stack(extra: usize, f: impl FnMut() + Send) -> usize {
    let mut size = libc::PTHREAD_STACK_MIN + extra;
    let mut f = Some(f);
    loop {
        let mut task = f.take().expect("a task");
        let mut ran = false;
        let started = try_pthread(
            |attr| {
                // SAFETY: `attr` is initialised.
                unsafe { assert_eq!(libc::pthread_attr_setstacksize(attr, size), 0) };
            },
            || {
                ran = true;
                task();
            },
        );
        if started {
            assert!(ran);
            return size;
        }
        // EINVAL: the TLS does not leave the minimum; a page more.
        size += PAGE;
        assert!(size <= 64 * 1024, "glibc refuses every small stack");
        f = Some(task);
    }
}

fn on_pthread(set: impl FnOnce(*mut libc::pthread_attr_t), f: impl FnMut() + Send) {
    assert!(try_pthread(set, f), "pthread_create");
}

/// Runs `f` on a new pthread made with the attributes `set` gives, joined; `false` when
/// `pthread_create` refused them (EINVAL).
fn try_pthread(set: impl FnOnce(*mut libc::pthread_attr_t), mut f: impl FnMut() + Send) -> bool {
    extern "C" fn start(arg: *mut libc::c_void) -> *mut libc::c_void {
        // SAFETY: `arg` is the `&mut dyn FnMut()` below, alive until the join.
        let f = unsafe { &mut *arg.cast::<&mut dyn FnMut()>() };
        f();
        ptr::null_mut()
    }
    let mut f: &mut (dyn FnMut() + Send) = &mut f;
    // SAFETY: the attributes are initialised and destroyed here; the thread is joined before `f`
    // goes out of scope.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_attr_init(&mut attr), 0);
        set(&mut attr);
        let mut thread: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut thread, &attr, start, ptr::addr_of_mut!(f).cast());
        libc::pthread_attr_destroy(&mut attr);
        if rc == libc::EINVAL {
            return false;
        }
        assert_eq!(rc, 0, "pthread_create");
        assert_eq!(libc::pthread_join(thread, ptr::null_mut()), 0);
    }
    true
}

/// `f` in a `SIGUSR1` handler running on an alternate signal stack ([`Guarded`], `size` bytes),
/// raised `times` times from this thread.
pub fn in_handler_on_altstack(size: usize, times: usize, f: impl FnMut()) {
    extern "C" fn handler(_: libc::c_int) {
        run_task();
    }
    let stack = Guarded::new(size);
    with_task(f, || {
        // SAFETY: the alternate stack is the guarded mapping, removed (SS_DISABLE) before it is
        // unmapped; the handler is restored to the default before returning.
        unsafe {
            let alt = libc::stack_t { ss_sp: stack.base() as *mut libc::c_void, ss_flags: 0, ss_size: stack.size() };
            let mut old: libc::stack_t = std::mem::zeroed();
            assert_eq!(libc::sigaltstack(&alt, &mut old), 0);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(libc::SIGUSR1, &action, &mut previous), 0);
            for _ in 0..times {
                assert_eq!(libc::raise(libc::SIGUSR1), 0);
            }
            assert_eq!(libc::sigaction(libc::SIGUSR1, &previous, ptr::null_mut()), 0);
            let off = libc::stack_t { ss_sp: ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
            assert_eq!(libc::sigaltstack(&off, ptr::null_mut()), 0);
        }
    });
}

//! The unwinder under stress, with every block sampled (each allocation walks its stack): deep
//! recursion, small thread stacks, a stack the program supplied, panics unwinding through the middle
//! of the stack, tokio tasks, a shared library opened and closed in a loop while other threads
//! allocate, a forked child. Nothing may fault or hang, and where a stack is expected, the
//! `backtrace` crate's symbolizer (independent of frag's unwinder) must find the known callers in it.

mod common;

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

/// The names of the functions in each listed site's stack (inlined ones included), leaf first.
fn named_stacks() -> Vec<(Vec<String>, u64)> {
    let report = frag::report();
    let sites = report.sites.expect("a sites section");
    let named = sites
        .top
        .iter()
        .map(|r| {
            let mut names = Vec::new();
            for &pc in &r.stack {
                backtrace::resolve((pc as usize - 1) as *mut c_void, |s| {
                    if let Some(n) = s.name() {
                        names.push(format!("{n:#}"));
                    }
                });
            }
            (names, r.inuse_bytes)
        })
        .collect();
    backtrace::clear_symbol_cache();
    named
}

fn holds(names: &[String], function: &str) -> bool {
    names.iter().any(|n| n.split("::").any(|s| s == function))
}

/// Whether some listed site's stack holds all of `functions`. Under valgrind's memcheck, which is
/// there for the walks' memory accesses, the names are not read (the symbolizer parses the test
/// binary's debug information, minutes under valgrind): the scenarios run, the names are checked in
/// the native runs.
fn some_stack_holds(functions: &[&str]) -> bool {
    if common::under_memcheck() {
        return true;
    }
    named_stacks().iter().any(|(n, _)| functions.iter().all(|f| holds(n, f)))
}

#[inline(never)]
fn recurse_and_keep(depth: usize, kept: &mut Vec<Box<[u8]>>) {
    kept.push(vec![depth as u8; 1 << 10].into_boxed_slice());
    if depth > 0 {
        recurse_and_keep(depth - 1, kept);
    }
    black_box(kept.len());
}

#[test]
fn deep_recursion_keeps_the_deepest_frames() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let mut kept = Vec::with_capacity(4_000);
    recurse_and_keep(common::scaled(3_000).max(200), &mut kept);
    let report = frag::report();
    let sites = report.sites.expect("sites");
    let deepest = sites.top.iter().map(|r| r.stack.len()).max().unwrap_or(0);
    assert_eq!(deepest, 64, "stacks are cut at 64 frames, leaf first");
    drop(kept);
}

#[inline(never)]
fn small_stack_site(n: usize) -> Vec<Box<[u8]>> {
    black_box((0..n).map(|i| vec![i as u8; 8 << 10].into_boxed_slice()).collect())
}

#[test]
fn threads_with_64_kib_stacks() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let kept = std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(|| {
            let mut out = Vec::new();
            for _ in 0..common::scaled(200) {
                out.extend(small_stack_site(8));
            }
            out
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(some_stack_holds(&["small_stack_site", "threads_with_64_kib_stacks"]), "{:#?}", named_stacks());
    drop(kept);
}

#[inline(never)]
extern "C" fn own_stack_site(arg: *mut c_void) -> *mut c_void {
    let blocks: Vec<Box<[u8]>> = (0..64).map(|i| vec![i as u8; 16 << 10].into_boxed_slice()).collect();
    // SAFETY: `arg` is the `Mutex` that the test passes and keeps alive until the join.
    let sink = unsafe { &*arg.cast::<Mutex<Vec<Box<[u8]>>>>() };
    sink.lock().unwrap().extend(blocks);
    core::ptr::null_mut()
}

/// A thread on a stack the program mapped itself (`pthread_attr_setstack`): glibc places the thread's
/// descriptor at its top, as on its own stacks, so the stack has its frames.
#[test]
fn a_thread_on_a_stack_the_program_supplied() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let size = 1 << 20;
    let sink: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());
    // SAFETY: a fresh private mapping, used as the thread's stack until it is joined, then unmapped.
    unsafe {
        let stack = libc::mmap(
            core::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        assert_ne!(stack, libc::MAP_FAILED);
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        assert_eq!(libc::pthread_attr_init(&mut attr), 0);
        assert_eq!(libc::pthread_attr_setstack(&mut attr, stack, size), 0);
        let mut thread: libc::pthread_t = 0;
        let arg = (&raw const sink).cast_mut().cast();
        assert_eq!(libc::pthread_create(&mut thread, &attr, own_stack_site, arg), 0);
        assert_eq!(libc::pthread_join(thread, core::ptr::null_mut()), 0);
        libc::pthread_attr_destroy(&mut attr);
        libc::munmap(stack, size);
    }
    assert!(some_stack_holds(&["own_stack_site"]), "{:#?}", named_stacks());
    drop(sink);
}

/// Allocates when dropped, as destructors run during unwinding.
struct AllocatesOnDrop(&'static Mutex<Vec<Box<[u8]>>>);

impl Drop for AllocatesOnDrop {
    #[inline(never)]
    fn drop(&mut self) {
        let block = black_box(vec![3u8; 24 << 10].into_boxed_slice());
        self.0.lock().unwrap().push(block);
    }
}

static UNWOUND: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());

#[inline(never)]
fn panic_below(depth: usize) {
    let _guard = AllocatesOnDrop(&UNWOUND);
    if depth == 0 {
        panic!("on purpose");
    }
    panic_below(depth - 1);
    black_box(depth);
}

#[inline(never)]
fn catch_in_the_middle(depth: usize) -> usize {
    if depth > 0 {
        return black_box(catch_in_the_middle(depth - 1) + 1);
    }
    let caught = std::panic::catch_unwind(|| panic_below(12)).is_err();
    usize::from(caught)
}

#[test]
fn panics_caught_in_the_middle_of_the_stack() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    std::panic::set_hook(Box::new(|_| {}));
    for _ in 0..common::scaled(50) {
        assert_eq!(catch_in_the_middle(10), 11);
    }
    let _ = std::panic::take_hook();
    // Blocks allocated by destructors while the panic unwound (in landing pads, on the stack being
    // unwound), under the frames that panicked and caught.
    assert!(some_stack_holds(&["drop", "panic_below", "catch_in_the_middle"]), "{:#?}", named_stacks());
    UNWOUND.lock().unwrap().clear();
}

static FROM_LIBGCC: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());

/// Walks its own stack with libgcc (`_Unwind_Backtrace`, through the `backtrace` crate), allocating
/// in the callback: those blocks' stacks run through libgcc's frames, C built without frame pointers.
#[inline(never)]
fn allocate_inside_libgcc() {
    let mut n = 0;
    // SAFETY: this thread does not unwind otherwise meanwhile.
    unsafe {
        backtrace::trace_unsynchronized(|_| {
            FROM_LIBGCC.lock().unwrap().push(black_box(vec![5u8; 16 << 10].into_boxed_slice()));
            n += 1;
            n < 4
        })
    };
    black_box(n);
}

#[test]
fn stacks_through_a_c_library_without_frame_pointers() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    for _ in 0..common::scaled(16) {
        allocate_inside_libgcc();
    }
    assert!(
        some_stack_holds(&["allocate_inside_libgcc", "stacks_through_a_c_library_without_frame_pointers"]),
        "{:#?}",
        named_stacks()
    );
    FROM_LIBGCC.lock().unwrap().clear();
}

#[inline(never)]
async fn task_site(i: usize) -> Vec<Box<[u8]>> {
    let mut out = Vec::new();
    for _ in 0..4 {
        out.push(vec![i as u8; 32 << 10].into_boxed_slice());
        tokio::task::yield_now().await;
    }
    out
}

#[test]
fn tokio_tasks() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let kept: Vec<Vec<Box<[u8]>>> = rt.block_on(async {
        let tasks: Vec<_> = (0..common::scaled(64)).map(|i| tokio::spawn(task_site(i))).collect();
        let mut kept = Vec::new();
        for t in tasks {
            kept.push(t.await.unwrap());
        }
        kept
    });
    assert!(some_stack_holds(&["task_site"]), "{:#?}", named_stacks());
    drop((kept, rt));
}

/// A C library whose two functions call back into Rust, built without frame pointers: stacks through
/// it need its own unwind tables.
const LIBRARY: &str = r#"
typedef void (*callback)(unsigned long);
__attribute__((noinline)) void frag_test_inner(callback f, unsigned long n) {
    volatile unsigned long pad[8];
    for (int i = 0; i < 8; i++) pad[i] = n + i;
    f(pad[3] - 3);
    pad[0] = 0;
}
void frag_test_call(callback f, unsigned long n) {
    frag_test_inner(f, n);
    __asm__ volatile("" ::: "memory");
}
"#;

static FROM_LIBRARY: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());

#[inline(never)]
extern "C" fn library_callback(n: std::ffi::c_ulong) {
    FROM_LIBRARY.lock().unwrap().push(black_box(vec![1u8; n as usize].into_boxed_slice()));
}

/// Opens the library, refreshes the tables, calls through it, closes it.
#[inline(never)]
fn through_the_library(path: &std::ffi::CStr) {
    // SAFETY: a library of our own, with no constructors; its function has the declared type, and is
    // not used after `dlclose`.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!handle.is_null(), "dlopen failed");
        frag::sites::refresh_unwind_tables();
        let call = libc::dlsym(handle, c"frag_test_call".as_ptr());
        assert!(!call.is_null());
        let call: extern "C" fn(extern "C" fn(std::ffi::c_ulong), std::ffi::c_ulong) = core::mem::transmute(call);
        call(library_callback, 20 << 10);
        assert_eq!(libc::dlclose(handle), 0);
    }
    black_box(());
}

#[test]
fn a_library_opened_and_closed_in_a_loop_while_others_allocate() {
    let dir = std::env::temp_dir().join(format!("frag-unwind-stress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("callback.c");
    let library = dir.join("libfragcallback.so");
    std::fs::write(&source, LIBRARY).unwrap();
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success());
    let path = std::ffi::CString::new(library.to_str().unwrap()).unwrap();
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2u8 {
            let stop = &stop;
            s.spawn(move || {
                let mut kept = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    kept.push(vec![t; 512].into_boxed_slice());
                    if kept.len() > 256 {
                        kept.clear();
                    }
                    // Reports refresh the tables too, racing with the loop's refreshes.
                    if kept.len() == 100 {
                        black_box(frag::report());
                    }
                }
            });
        }
        for _ in 0..common::scaled(200).max(10) {
            through_the_library(&path);
        }
        stop.store(true, Ordering::Relaxed);
    });
    // The closed library's tables are gone after the next refresh.
    frag::sites::refresh_unwind_tables();
    let name = library.to_str().unwrap();
    assert!(frag::sites::unwind_tables().is_some());
    assert!(some_stack_holds(&["library_callback", "through_the_library"]), "{:#?} ({name})", named_stacks());
    FROM_LIBRARY.lock().unwrap().clear();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[inline(never)]
fn site_in_the_child() -> Vec<Box<[u8]>> {
    black_box((0..32).map(|i| vec![i as u8; 48 << 10].into_boxed_slice()).collect())
}

#[test]
fn a_forked_child_captures_stacks() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    // SAFETY: the child only allocates, reports and exits, in this single-threaded test process.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let kept = site_in_the_child();
        let found = some_stack_holds(&["site_in_the_child", "a_forked_child_captures_stacks"]);
        drop(kept);
        // SAFETY: ends the child without running the parent's test harness.
        unsafe { libc::_exit(if found { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child found no stack: {status:#x}");
}

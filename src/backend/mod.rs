//! The allocators frag knows, and what they tell it: [`Backend`] names one, [`Select`] picks one at
//! start-up, [`Introspect`] lets a custom allocator answer frag's questions; [`AllocatorStats`] and
//! [`AllocatorClass`] are the allocator's own figures in a [`Report`](crate::Report),
//! [`WrappedBackend`] and [`UsableSource`] say which backend and which usable sizes it read.

// Every known backend implements three traits once, in its own file (`system/`, `jemalloc/`,
// `mimalloc/`, `snmalloc.rs`): what the allocation path needs
// (`known::KnownAllocator`), what the report asks
// (`introspect::KnownIntrospect`) and what tuning changes
// (`tuning::actions::Knobs`); and is named once, in `list.rs`, which
// generates the `Backend` enum and the static dispatch to it (`with_backend!`). A user's allocator
// answers the same questions through a `Introspect`. Backends know nothing of reports: the report, the
// diagnosis and `frag::tune` ask them.

pub(crate) mod assist;
pub(crate) mod classes;
pub(crate) mod custom;
pub(crate) mod heap_split;
pub(crate) mod introspect;
pub(crate) mod known;
pub(crate) mod list;
pub(crate) mod registry;
pub(crate) mod select;
pub(crate) mod stats;
pub(crate) mod tuning;
pub(crate) mod usable;
pub(crate) mod usable_rule;
pub(crate) mod wrapped;

// Each backend's module (`system`, `jemalloc`, ...), declared from the one list.
list::backend_list!(declare_modules!());

pub use classes::AllocatorClass;
pub(crate) use classes::SlabUse;
pub use custom::Introspect;
pub use introspect::UsableSource;
pub use list::Backend;
pub use select::Select;
pub use stats::AllocatorStats;
pub use wrapped::WrappedBackend;

/// The known backend whose allocator type is `A` (`None`: a user's allocator). A compile-time
/// constant after monomorphisation, which costs nothing on the allocation path; for
/// [`Select`] the backend the process chose: one relaxed load.
#[inline(always)]
pub(crate) fn backend_of<A: 'static>() -> Option<Backend> {
    if core::any::TypeId::of::<A>() == core::any::TypeId::of::<select::Select>() {
        return Some(select::chosen());
    }
    Backend::of_type::<A>()
}

/// [`backend_of`] for the allocator value `a`: for [`Select`] the backend it chooses,
/// deciding it now if this is the process's first allocation (the allocation path needs the backend
/// before the inner call). A constant for every other type.
#[inline(always)]
pub(crate) fn backend_of_value<A: 'static>(a: &A) -> Option<Backend> {
    match (a as &dyn core::any::Any).downcast_ref::<select::Select>() {
        Some(s) => Some(s.backend()),
        None => backend_of::<A>(),
    }
}

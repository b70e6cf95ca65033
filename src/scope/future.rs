//! A future that polls in a scope ([`Scoped`]), and the extension trait that wraps one
//! ([`ScopeExt`]).

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use super::handle::Scope;

pin_project_lite::pin_project! {
    /// A future whose every poll runs in a scope, on whichever thread polls it: the scope is entered
    /// before each poll and the thread's previous scope restored after. Made by
    /// [`ScopeExt::in_scope`].
    ///
    /// Dropping the future (and what it owns) happens outside the scope, as frees are credited to
    /// the scope that allocated the block anyway.
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        #[pin]
        inner: F,
        scope: Scope,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.scope.enter();
        this.inner.poll(cx)
    }
}

/// Runs a future in a scope: `fut.in_scope(scope)`.
///
/// A task spawned from inside a scope does not inherit it: wrap the spawned future too.
///
/// ```
/// use frag::{Scope, ScopeExt};
///
/// # async fn handle() -> Vec<u8> { vec![0; 1024] }
/// let tenant = Scope::new("tenant-42")?;
/// let request = handle().in_scope(tenant);
/// // tokio::spawn(request), or .await it: every poll runs in `tenant-42`.
/// # drop(request);
/// # Ok::<(), frag::scope::ScopeError>(())
/// ```
pub trait ScopeExt: Future + Sized {
    /// This future, polled in `scope`.
    fn in_scope(self, scope: Scope) -> Scoped<Self> {
        Scoped { inner: self, scope }
    }
}

impl<F: Future> ScopeExt for F {}

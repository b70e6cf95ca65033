//! Go's memory-profile endpoints on the [`http`] crate's types (feature `http`), for any HTTP stack
//! built on them (axum, hyper, warp, ...).

use ::http::{HeaderValue, Method, Request, Response, StatusCode, header};

use super::go::{Endpoint, GoAnswer, go_answer_to_query, symbol_answer};

/// A request body [`handle`] can read: none (`()`), bytes or text. Only `/debug/pprof/symbol`'s
/// `POST` has one; the profiles are `GET`s.
pub trait RequestBody {
    /// The body's bytes.
    fn body_bytes(&self) -> &[u8];
}

impl RequestBody for () {
    fn body_bytes(&self) -> &[u8] {
        &[]
    }
}

impl RequestBody for Vec<u8> {
    fn body_bytes(&self) -> &[u8] {
        self
    }
}

impl RequestBody for &[u8] {
    fn body_bytes(&self) -> &[u8] {
        self
    }
}

impl RequestBody for String {
    fn body_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl RequestBody for &str {
    fn body_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Answers Go's memory-profile endpoints as its `net/http/pprof` does: `GET .../debug/pprof/heap` and
/// `GET .../debug/pprof/allocs` (see [`go_answer`](super::go_answer) for the profile and
/// [`GoQuery`](super::GoQuery) for the parameters), and `.../debug/pprof/symbol` (`GET` for whether
/// names are to be had, `POST` with addresses for their names: [`symbol_answer`]), which
/// `go tool pprof http://…/debug/pprof/heap` asks to name an unsymbolized profile's addresses;
/// `GET .../debug/frag/history`, the heap's [`history()`](crate::history()) as JSON (feature
/// `serde`), and `GET .../debug/frag/history.svg`, its picture ([`History::svg`](crate::history::History::svg)). 404 for another path, 405 for another method, 400 for a bad query, and the refusals of the
/// [`Serving`](super::Serving) limits (400, 413, 429 with `Retry-After`, 503); every refusal is
/// text that says what was wrong and what is accepted, with Go's `X-Go-Pprof: 1` (which `go tool
/// pprof` takes as leave to print it).
///
/// Blocks for `?seconds=N` and while symbolizing: run it on a blocking thread. A thread waits out
/// a delta profile whether or not its caller is still there; on tokio, [`serve`] waits without one
/// and stops when the caller goes.
///
/// Scrape configurations it answers as Go would: Grafana Alloy's `pyroscope.scrape` with its
/// default `profile.memory` target (`/debug/pprof/allocs`, no parameters, `delta = false`), and
/// Parca's default `memory` profile config (`/debug/pprof/allocs`). Both symbolize from the
/// mappings' build IDs, which the default unsymbolized profile keeps.
///
/// # Example
///
/// With any server that hands requests over on the `http` crate's types:
///
/// ```no_run
/// let request = http::Request::get("/debug/pprof/heap?debug=1").body(()).unwrap();
/// let response = frag::profile::http::handle(&request);
/// assert_eq!(response.status(), 200);
/// ```
#[must_use]
pub fn handle<B: RequestBody>(request: &Request<B>) -> Response<Vec<u8>> {
    let path = request.uri().path().trim_end_matches('/');
    let query = request.uri().query().unwrap_or("");
    match route(request.method(), path) {
        Route::Answered(response) => response,
        Route::Symbol => respond(symbol_answer(if request.method() == Method::POST {
            request.body().body_bytes()
        } else {
            query.as_bytes()
        })),
        Route::Profile(endpoint) => respond(go_answer_to_query(endpoint, query)),
        Route::History => history(),
        Route::HistorySvg => history_svg(),
    }
}

/// `.../history.svg`: [`History::svg`](crate::history::History::svg) of the process's history.
fn history_svg() -> Response<Vec<u8>> {
    let body = crate::own::handed_over(|| crate::history::history().svg().into_bytes());
    let mut r = Response::new(body);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("image/svg+xml"));
    r.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

/// `.../history`: [`history()`](crate::history()) as JSON (feature `serde`; without it, 404 says so).
fn history() -> Response<Vec<u8>> {
    #[cfg(feature = "serde")]
    {
        let body =
            crate::own::handed_over(|| serde_json::to_vec(&crate::history::history()).map_err(|e| e.to_string()));
        match body {
            Ok(body) => {
                let mut r = Response::new(body);
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
                r
            }
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("the history as JSON: {e}\n")),
        }
    }
    #[cfg(not(feature = "serde"))]
    plain(StatusCode::NOT_FOUND, "the history is JSON: frag-alloc was built without its serde feature\n")
}

/// Where a request goes.
enum Route {
    /// 404 or 405.
    Answered(Response<Vec<u8>>),
    /// `/debug/pprof/symbol`, `GET` or `POST`.
    Symbol,
    /// `/debug/pprof/heap` or `/allocs`, `GET`.
    Profile(Endpoint),
    /// `/debug/frag/history`, `GET`.
    History,
    /// `/debug/frag/history.svg`, `GET`.
    HistorySvg,
}

fn route(method: &Method, path: &str) -> Route {
    if path.rsplit('/').next() == Some("symbol") {
        return match *method {
            Method::GET | Method::POST => Route::Symbol,
            _ => Route::Answered(not_allowed("GET, POST")),
        };
    }
    match path.rsplit('/').next() {
        Some("history") if method == Method::GET => return Route::History,
        Some("history.svg") if method == Method::GET => return Route::HistorySvg,
        Some("history" | "history.svg") => return Route::Answered(not_allowed("GET")),
        _ => {}
    }
    let Some(endpoint) = Endpoint::from_path(path) else {
        return Route::Answered(plain(
            StatusCode::NOT_FOUND,
            "not a memory profile: expected .../heap, .../allocs, .../symbol, .../history or .../history.svg\n",
        ));
    };
    if method != Method::GET {
        return Route::Answered(not_allowed("GET"));
    }
    Route::Profile(endpoint)
}

/// [`handle`] for tokio (feature `tokio`): a delta profile's wait holds no thread and ends as soon
/// as the future is dropped (hyper and axum drop it when the client goes), freeing its place among
/// [`Serving::delta_waits`](super::Serving::delta_waits); a `/debug/pprof/symbol` body is read up
/// to what [`Serving::symbol_addresses`](super::serving::Serving::symbol_addresses)(super::Serving::symbol_addresses) addresses take, and a
/// longer one is refused (413) without reading the rest. Snapshots, profile builds and the
/// symbolizer run on tokio's blocking threads, one symbolizer at a time.
///
/// Takes any body ([`http_body::Body`]): mount it on a router as it is.
///
/// # Example
///
/// With axum, on a listener of its own on loopback, never the application's router (see the
/// crate's README, "Serving the endpoints safely"):
///
/// ```no_run
/// use axum::{Router, routing::get};
///
/// async fn pprof(request: axum::extract::Request) -> axum::response::Response {
///     frag::profile::http::serve(request).await.map(axum::body::Body::from)
/// }
///
/// # async fn run() -> std::io::Result<()> {
/// let debug: Router = Router::new().route("/debug/pprof/{profile}", get(pprof).post(pprof));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:6060").await?;
/// axum::serve(listener, debug).await
/// # }
/// ```
#[cfg(feature = "tokio")]
pub async fn serve<B>(request: Request<B>) -> Response<Vec<u8>>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "frag::profile::http::serve runs on a tokio runtime\n");
    }
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().trim_end_matches('/');
    let query = parts.uri.query().unwrap_or("");
    match route(&parts.method, path) {
        Route::Answered(response) => response,
        Route::Symbol => {
            let addresses = if parts.method == Method::POST {
                match on_tokio::read_symbol_body(body).await {
                    Ok(bytes) => bytes,
                    Err(refusal) => return respond(refusal),
                }
            } else {
                query.as_bytes().to_vec()
            };
            respond(on_tokio::symbol_answer(addresses).await)
        }
        Route::Profile(endpoint) => respond(on_tokio::go_answer(endpoint, query).await),
        // Copying and encoding up to a thousand snapshots takes milliseconds: off the runtime.
        Route::History => tokio::task::spawn_blocking(history)
            .await
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "the history task failed\n")),
        Route::HistorySvg => tokio::task::spawn_blocking(history_svg)
            .await
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "the history task failed\n")),
    }
}

#[cfg(feature = "tokio")]
mod on_tokio {
    //! [`serve`](super::serve)'s steps: what waits is a future, what works runs on a blocking
    //! thread as frag's own work.

    use http_body_util::BodyExt as _;

    use super::super::admit::{POLL, Turn};
    use super::super::go::{ADDRESS_BYTES, Endpoint, GoAnswer, GoQuery, Plan, busy, names, too_long, without_names};
    use super::super::serving::serving;
    use crate::own::{self, Kept};
    use crate::stats::clock::now_ns;

    /// `work` on a blocking thread (it builds its answer as frag's own work and hands it over); 500
    /// if the task fails.
    async fn blocking(work: impl FnOnce() -> GoAnswer + Send + 'static) -> GoAnswer {
        match tokio::task::spawn_blocking(work).await {
            Ok(answer) => answer,
            Err(e) => GoAnswer::refusal(500, &format!("frag's profile task failed: {e}")),
        }
    }

    /// The symbolizer's turn, waiting at most
    /// [`Serving::symbolizer_wait`](super::super::serving::Serving::symbolizer_wait) without a
    /// thread.
    async fn turn() -> Option<Turn> {
        let wait = serving().symbolizer_wait;
        let start = tokio::time::Instant::now();
        loop {
            if let Some(turn) = Turn::try_take() {
                return Some(turn);
            }
            if start.elapsed() >= wait {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub(super) async fn go_answer(endpoint: Endpoint, query: &str) -> GoAnswer {
        let query = match GoQuery::parse(query) {
            Ok(q) => q,
            Err(e) => return GoAnswer::refusal(400, &e.to_string()),
        };
        let plan = match Plan::new(endpoint, &query, now_ns()) {
            Ok(plan) => plan,
            Err(refusal) => return refusal,
        };
        let (plan, before) = match plan.end() {
            None => (plan, None),
            Some(end) => {
                let taken = tokio::task::spawn_blocking(move || {
                    let before = own::run(|| plan.before().map(Kept::new));
                    (plan, before)
                });
                let Ok((plan, before)) = taken.await else {
                    return GoAnswer::refusal(500, "frag's profile task failed");
                };
                // Dropped here when the caller goes: the slot is freed, the snapshot freed as frag's.
                tokio::time::sleep(std::time::Duration::from_nanos(end.saturating_sub(now_ns()))).await;
                (plan, before)
            }
        };
        let turn = if plan.symbolize {
            match turn().await {
                Some(turn) => Some(turn),
                None => return busy(),
            }
        } else {
            None
        };
        blocking(move || plan.answer(before.and_then(Kept::take), turn.as_ref())).await
    }

    pub(super) async fn symbol_answer(addresses: Vec<u8>) -> GoAnswer {
        if let Some(answer) = without_names(&addresses) {
            return answer;
        }
        match turn().await {
            Some(turn) => blocking(move || own::handed_over(|| names(&addresses, &turn))).await,
            None => busy(),
        }
    }

    /// A `/debug/pprof/symbol` body, read up to the bytes [`Serving::symbol_addresses`](crate::profile::serving::Serving::symbol_addresses) addresses
    /// take: 413 for a longer one, 400 for one that breaks off.
    pub(super) async fn read_symbol_body<B>(body: B) -> Result<Vec<u8>, GoAnswer>
    where
        B: http_body::Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let cap = serving().symbol_addresses.saturating_mul(ADDRESS_BYTES);
        match http_body_util::Limited::new(body, cap).collect().await {
            Ok(collected) => Ok(collected.to_bytes().to_vec()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_long(&format!("a body over {cap} bytes"))),
            Err(e) => Err(GoAnswer::refusal(400, &format!("reading the request's body: {e}"))),
        }
    }
}

/// 405, with the methods allowed.
fn not_allowed(allow: &'static str) -> Response<Vec<u8>> {
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, &format!("{allow} only\n"));
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

fn respond(answer: GoAnswer) -> Response<Vec<u8>> {
    let mut response = Response::new(answer.body);
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(answer.content_type));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Some(value) = answer.content_disposition.and_then(|d| HeaderValue::from_str(&d).ok()) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    if let Some(seconds) = answer.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if answer.status != 200 {
        // As Go's `serveError`: `pprof` prints the body of an answer that has it.
        headers.insert("x-go-pprof", HeaderValue::from_static("1"));
    }
    response
}

fn plain(status: StatusCode, body: &str) -> Response<Vec<u8>> {
    let mut r = Response::new(body.as_bytes().to_vec());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r.headers_mut().insert("x-go-pprof", HeaderValue::from_static("1"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_to_name() -> usize {
        std::hint::black_box(7)
    }

    fn request(method: Method, uri: &str, body: &str) -> Request<String> {
        Request::builder().method(method).uri(uri).body(body.to_owned()).unwrap()
    }

    /// Go's symbol endpoint: `GET` says names are to be had, `POST` names each address found (the
    /// function's own, checked against its name in the binary), skips what is not an address, and
    /// any other method is refused with the two it takes.
    #[test]
    fn the_symbol_endpoint_names_addresses_as_go_does() {
        let f = a_function_to_name as *const () as usize;
        assert_eq!(a_function_to_name(), 7);
        let get = handle(&request(Method::GET, "/debug/pprof/symbol", ""));
        assert_eq!((get.status(), get.body().as_slice()), (StatusCode::OK, b"num_symbols: 1\n".as_slice()));
        let post = handle(&request(Method::POST, "/debug/pprof/symbol", &format!("{f:#x}+0+garbage+{f}")));
        assert_eq!(post.status(), StatusCode::OK);
        let text = String::from_utf8(post.body().clone()).unwrap();
        let named: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(named.len(), 2, "{text}");
        for line in named {
            let demangled = format!("{:#}", backtrace::SymbolName::new(line.split_once(' ').unwrap().1.as_bytes()));
            assert!(line.starts_with(&format!("{f:#x} ")) && demangled.ends_with("a_function_to_name"), "{text}");
        }
        let put = handle(&request(Method::PUT, "/debug/pprof/symbol", ""));
        assert_eq!(put.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(put.headers()[header::ALLOW], "GET, POST");
        let post_heap = handle(&request(Method::POST, "/debug/pprof/heap", ""));
        assert_eq!(post_heap.headers()[header::ALLOW], "GET");
    }

    fn lock() -> std::sync::MutexGuard<'static, ()> {
        super::super::admit::tests::SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn text(response: &Response<Vec<u8>>) -> String {
        String::from_utf8_lossy(response.body()).into_owned()
    }

    /// A delta over the limit, one with `debug`, and in Go's order when both: 400, with Go's words
    /// where Go has them and the limit named where it is ours; `X-Go-Pprof` on every refusal.
    #[test]
    fn deltas_over_the_limit_or_with_debug_are_refused_in_gos_order() {
        let _serial = lock();
        let get = |uri: &str| handle(&request(Method::GET, uri, ""));
        let long = get("/debug/pprof/allocs?seconds=61");
        assert_eq!(long.status(), StatusCode::BAD_REQUEST);
        assert!(text(&long).contains("at most 60 accepted (frag::profile::Serving::max_seconds)"), "{}", text(&long));
        let both = get("/debug/pprof/heap?seconds=61&debug=1");
        assert!(text(&both).starts_with("profile duration exceeds server's limit"), "{}", text(&both));
        let debug = get("/debug/pprof/heap?seconds=1&debug=1");
        assert_eq!(
            (debug.status(), text(&debug).as_str()),
            (StatusCode::BAD_REQUEST, "seconds and debug params are incompatible\n")
        );
        assert_eq!(debug.headers()["x-go-pprof"], "1");
        assert!(debug.headers().get(header::CONTENT_DISPOSITION).is_none());
        let mut off = crate::profile::serving();
        off.delta_waits = 0;
        crate::profile::set_serving(off).unwrap();
        let refused = get("/debug/pprof/heap?seconds=1");
        crate::profile::set_serving(crate::profile::Serving::default()).unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert!(text(&refused).contains("delta profiles are off"), "{}", text(&refused));
    }

    /// While one delta profile waits (the default allows one), another is refused with 429 and a
    /// `Retry-After` no longer than the first's wait; the first still answers its delta.
    #[test]
    fn a_second_delta_waits_its_turn() {
        let _serial = lock();
        let first = std::thread::spawn(|| handle(&request(Method::GET, "/debug/pprof/allocs?seconds=2", "")));
        while super::super::admit::waiting() == 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let second = handle(&request(Method::GET, "/debug/pprof/allocs?seconds=1", ""));
        assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS, "{}", text(&second));
        let retry: u64 = second.headers()[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
        assert!((1..=2).contains(&retry), "Retry-After {retry}");
        assert!(text(&second).contains("1 at a time (frag::profile::Serving::delta_waits)"), "{}", text(&second));
        let first = first.join().unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(first.headers()[header::CONTENT_DISPOSITION], "attachment; filename=\"allocs-delta\"");
        assert_eq!(super::super::admit::waiting(), 0);
    }

    /// More addresses than the limit, or a body longer than they take, is 413 naming the limit;
    /// at the limit, the names come.
    #[test]
    fn a_symbol_request_over_the_limit_is_413() {
        let _serial = lock();
        let mut s = crate::profile::serving();
        s.symbol_addresses = 4;
        crate::profile::set_serving(s).unwrap();
        let f = a_function_to_name as *const () as usize;
        let post = |body: String| handle(&request(Method::POST, "/debug/pprof/symbol", &body));
        let four = post(vec![format!("{f:#x}"); 4].join("+"));
        let five = post(vec![format!("{f:#x}"); 5].join("+"));
        let padded = post(format!("{f:#x}{}", " ".repeat(4 * 24)));
        crate::profile::set_serving(crate::profile::Serving::default()).unwrap();
        assert_eq!(four.status(), StatusCode::OK);
        assert_eq!(text(&four).lines().count(), 5, "{}", text(&four));
        assert_eq!(five.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(text(&five).starts_with("5 addresses: at most 4 addresses (96 bytes)"), "{}", text(&five));
        assert_eq!(padded.status(), StatusCode::PAYLOAD_TOO_LARGE, "{}", text(&padded));
    }

    /// A child forked while a thread of the parent waits out a delta and the parent holds the
    /// symbolizer's turn: the child's own delta is let in and its symbol request named (a child
    /// that inherited the slot and the turn would get 429 and 503).
    #[test]
    fn a_forked_child_starts_with_every_place_free() {
        let _serial = lock();
        let waiter = std::thread::spawn(|| handle(&request(Method::GET, "/debug/pprof/heap?seconds=2", "")));
        while super::super::admit::waiting() == 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let turn = super::super::admit::Turn::try_take().expect("the turn");
        let f = a_function_to_name as *const () as usize;
        // SAFETY: the child only calls frag and `_exit`s; fork is what is under test.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let delta = handle(&request(Method::GET, "/debug/pprof/heap?seconds=1", ""));
            let named = handle(&request(Method::POST, "/debug/pprof/symbol", &format!("{f:#x}")));
            let code = if delta.status() != StatusCode::OK {
                1
            } else if named.status() != StatusCode::OK || text(&named).lines().count() != 2 {
                2
            } else {
                0
            };
            // SAFETY: ends the child without running the parent's atexit handlers or test harness.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: `pid` is this process's child; `status` is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        drop(turn);
        assert_eq!(waiter.join().unwrap().status(), StatusCode::OK);
        assert!(libc::WIFEXITED(status), "the child did not exit: {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "1: the delta refused, 2: the symbols refused");
    }

    /// [`serve`]: a delta whose caller goes (the future dropped mid-wait) frees its place at once,
    /// holding no thread meanwhile; a body longer than the limit is 413 without being read whole.
    #[cfg(feature = "tokio")]
    #[test]
    fn serve_frees_a_dropped_delta_and_refuses_a_long_body() {
        use std::time::Duration;
        let _serial = lock();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let delta = Request::get("/debug/pprof/heap?seconds=30").body(String::new()).unwrap();
            let waited = tokio::time::timeout(Duration::from_millis(300), serve(delta)).await;
            assert!(waited.is_err(), "a 30 s delta answered within 300 ms");
            // The snapshot's task may still be at work under load: it ends, and frees the slot.
            let start = std::time::Instant::now();
            while super::super::admit::waiting() != 0 {
                assert!(start.elapsed() < Duration::from_secs(20), "the dropped delta kept its slot");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let next = serve(Request::get("/debug/pprof/heap?seconds=1").body(String::new()).unwrap()).await;
            assert_eq!(next.status(), StatusCode::OK, "{}", text(&next));
            let cap = crate::profile::serving().symbol_addresses * 24;
            let long = serve(Request::post("/debug/pprof/symbol").body("1+".repeat(cap)).unwrap()).await;
            assert_eq!(long.status(), StatusCode::PAYLOAD_TOO_LARGE, "{}", text(&long));
            assert!(text(&long).starts_with(&format!("a body over {cap} bytes")), "{}", text(&long));
        });
    }
}

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
/// `go tool pprof http://…/debug/pprof/heap` asks to name an unsymbolized profile's addresses.
/// 404 for another path, 405 for another method, 400 for a bad query. Blocks for `?seconds=N` and
/// while symbolizing: run it on a blocking thread.
///
/// Scrape configurations it answers as Go would: Grafana Alloy's `pyroscope.scrape` with its
/// default `profile.memory` target (`/debug/pprof/allocs`, no parameters, `delta = false`), and
/// Parca's default `memory` profile config (`/debug/pprof/allocs`). Both symbolize from the
/// mappings' build IDs, which the default unsymbolized profile keeps.
///
/// # Example
///
/// With axum (mount it at `/debug/pprof/{profile}`, for `GET` and `POST`):
///
/// ```no_run
/// use axum::{Router, body::Body, extract::Request, response::Response, routing::get};
///
/// async fn pprof(request: Request) -> Response {
///     let (parts, body) = request.into_parts();
///     // Only `/debug/pprof/symbol`'s addresses come in a body: a few KiB.
///     let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default().to_vec();
///     let request = axum::http::Request::from_parts(parts, body);
///     let response = tokio::task::spawn_blocking(move || frag::profile::http::handle(&request)).await.unwrap();
///     response.map(Body::from)
/// }
///
/// let app: Router = Router::new().route("/debug/pprof/{profile}", get(pprof).post(pprof));
/// ```
#[must_use]
pub fn handle<B: RequestBody>(request: &Request<B>) -> Response<Vec<u8>> {
    let path = request.uri().path().trim_end_matches('/');
    if path.rsplit('/').next() == Some("symbol") {
        return match *request.method() {
            Method::GET => respond(symbol_answer(request.uri().query().unwrap_or("").as_bytes())),
            Method::POST => respond(symbol_answer(request.body().body_bytes())),
            _ => not_allowed("GET, POST"),
        };
    }
    let Some(endpoint) = Endpoint::from_path(path) else {
        return plain(StatusCode::NOT_FOUND, "not a memory profile: expected .../heap, .../allocs or .../symbol\n");
    };
    if request.method() != Method::GET {
        return not_allowed("GET");
    }
    respond(go_answer_to_query(endpoint, request.uri().query().unwrap_or("")))
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
    response
}

fn plain(status: StatusCode, body: &str) -> Response<Vec<u8>> {
    let mut r = Response::new(body.as_bytes().to_vec());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
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
}

//! Go's memory-profile endpoints on the [`http`] crate's types (feature `http`), for any HTTP stack
//! built on them (axum, hyper, warp, ...).

use ::http::{HeaderValue, Method, Request, Response, StatusCode, header};

use super::go::{Endpoint, go_answer_to_query};

/// Answers `GET .../debug/pprof/heap` and `GET .../debug/pprof/allocs` as Go's `net/http/pprof`
/// does (see [`go_answer`](super::go_answer) for the profile and [`GoQuery`](super::GoQuery) for the
/// parameters):
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
/// With axum (mount it at `/debug/pprof/{profile}`):
///
/// ```no_run
/// use axum::{Router, body::Body, extract::Request, response::Response, routing::get};
///
/// async fn pprof(request: Request) -> Response {
///     let (parts, _body) = request.into_parts();
///     let request = axum::http::Request::from_parts(parts, ());
///     let response = tokio::task::spawn_blocking(move || frag::profile::http::handle(&request)).await.unwrap();
///     response.map(Body::from)
/// }
///
/// let app: Router = Router::new().route("/debug/pprof/{profile}", get(pprof));
/// ```
#[must_use]
pub fn handle<B>(request: &Request<B>) -> Response<Vec<u8>> {
    let Some(endpoint) = Endpoint::from_path(request.uri().path()) else {
        return plain(StatusCode::NOT_FOUND, "not a memory profile: expected .../heap or .../allocs\n");
    };
    if request.method() != Method::GET {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    let answer = go_answer_to_query(endpoint, request.uri().query().unwrap_or(""));
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

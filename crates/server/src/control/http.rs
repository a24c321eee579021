//! The HTTP API (axum): the participant API, WHIP/WHEP, rooms, stats, health
//! and the demo pages. Every error is JSON `{"code","message"}` with a
//! meaningful status (see docs/api.md).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde::Deserialize;

use super::{ApiError, Flavor, Shared, assets, lock, renegotiate};

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::json!({"code": self.code, "message": self.message});
        let mut res = (status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/watch/{room}", get(watch))
        .route("/assets/{file}", get(asset))
        .route("/healthz", get(healthz))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/rooms", get(rooms))
        .route("/api/v1/rooms/{room}", get(room))
        // One join and one leave handler serve all three dialects; the
        // flavor travels as a request extension.
        .merge(
            Router::new()
                .route("/api/v1/rooms/{room}/participants", post(join))
                .route(
                    "/api/v1/rooms/{room}/participants/{id}",
                    patch(patch_participant).delete(leave),
                )
                .layer(Extension(Flavor::Participant)),
        )
        .merge(
            Router::new()
                .route("/whip/{room}", post(join))
                .route("/whip/{room}/{id}", patch(trickle).delete(leave))
                .layer(Extension(Flavor::Whip)),
        )
        .merge(
            Router::new()
                .route("/whep/{room}", post(join))
                .route("/whep/{room}/{id}", patch(trickle).delete(leave))
                .layer(Extension(Flavor::Whep)),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(cors))
        .with_state(state)
}

/// The Prometheus listener (`--metrics`): `/metrics` only.
pub fn metrics_router(state: Shared) -> Router {
    Router::new()
        .route("/metrics", get(prometheus))
        .fallback(not_found)
        .with_state(state)
}

async fn prometheus(State(state): State<Shared>) -> Response {
    let snapshot = lock(&state).metrics_snapshot();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        super::metrics::render(snapshot),
    )
        .into_response()
}

/// WHIP/WHEP players and other origins' pages call this API from browsers.
async fn cors(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Location, ETag, Retry-After"),
    );
    res
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such resource")
}

async fn method_not_allowed(method: axum::http::Method) -> Response {
    if method == axum::http::Method::OPTIONS {
        // CORS preflight.
        let mut res = StatusCode::NO_CONTENT.into_response();
        let h = res.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PATCH, DELETE, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("Content-Type, If-Match, Authorization"),
        );
        return res;
    }
    ApiError::new(
        405,
        "method_not_allowed",
        format!("{method} is not allowed here"),
    )
    .into_response()
}

async fn index() -> Html<&'static str> {
    Html(assets::INDEX)
}

async fn watch(Path(_room): Path<String>) -> Html<&'static str> {
    Html(assets::WATCH)
}

async fn asset(Path(file): Path<String>) -> Response {
    match assets::FILES.iter().find(|a| a.path == file) {
        Some(a) => ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response(),
        None => ApiError::not_found(format!("no asset {file}")).into_response(),
    }
}

async fn healthz(State(state): State<Shared>) -> Response {
    let shards = lock(&state).shard_count();
    axum::Json(serde_json::json!({"status": "ok", "shards": shards})).into_response()
}

async fn stats(State(state): State<Shared>) -> Response {
    axum::Json(lock(&state).stats_json()).into_response()
}

async fn rooms(State(state): State<Shared>) -> Response {
    axum::Json(serde_json::json!({"rooms": lock(&state).rooms_json()})).into_response()
}

async fn room(State(state): State<Shared>, Path(room): Path<String>) -> Response {
    match lock(&state).room_json(&room) {
        Some(members) => {
            axum::Json(serde_json::json!({"room": room, "participants": members})).into_response()
        }
        None => ApiError::not_found(format!("no room {room}")).into_response(),
    }
}

#[derive(Deserialize)]
struct JoinQuery {
    name: Option<String>,
}

/// The SDP body of a request: `application/sdp`, UTF-8, non-empty.
fn sdp_body(headers: &HeaderMap, body: &Bytes) -> Result<String, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.to_ascii_lowercase().starts_with("application/sdp") {
        return Err(ApiError::new(
            415,
            "unsupported_media_type",
            format!("expected Content-Type: application/sdp, got {ct:?}"),
        ));
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::new(400, "bad_offer", "the SDP offer is not UTF-8"))?;
    Ok(text.to_string())
}

fn created(location: String, etag: String, answer: String) -> Response {
    let mut res = (StatusCode::CREATED, answer).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        h.insert(header::LOCATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    res
}

/// POST of an SDP offer: joins `room` as a participant of `flavor`.
async fn join(
    State(state): State<Shared>,
    Extension(flavor): Extension<Flavor>,
    Path(room): Path<String>,
    Query(q): Query<JoinQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let sdp = sdp_body(&headers, &body)?;
    let joined = lock(&state).join(&room, q.name.as_deref(), &sdp, flavor)?;
    let location = match flavor {
        Flavor::Participant => format!("/api/v1/rooms/{room}/participants/{}", joined.id),
        Flavor::Whip => format!("/whip/{room}/{}", joined.id),
        Flavor::Whep => format!("/whep/{room}/{}", joined.id),
    };
    Ok(created(location, joined.etag, joined.answer))
}

/// DELETE of a session's Location.
async fn leave(
    State(state): State<Shared>,
    Extension(flavor): Extension<Flavor>,
    Path((room, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    lock(&state).leave_in(&room, &id, flavor)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn patch_participant(
    State(state): State<Shared>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let if_match = headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok());
    // Check the resource and precondition before the body's type.
    lock(&state).begin_renegotiate(&room, &id, if_match)?;
    let sdp = sdp_body(&headers, &body)?;
    let (answer, etag) = renegotiate(&state, &room, &id, if_match, sdp).await?;
    let mut res = (StatusCode::OK, answer).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    Ok(res)
}

/// WHIP/WHEP PATCH (RFC 9725 §4.3): trickled candidates are accepted and not
/// needed (the server is ICE-lite and learns the client's address from its
/// connectivity checks).
async fn trickle(headers: HeaderMap, body: Bytes) -> Result<StatusCode, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/trickle-ice-sdpfrag") {
        return Err(ApiError::new(
            415,
            "unsupported_media_type",
            "PATCH takes application/trickle-ice-sdpfrag",
        ));
    }
    let _ = body;
    Ok(StatusCode::NO_CONTENT)
}

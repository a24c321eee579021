//! The HTTP API (axum): the participant API, WHIP/WHEP, rooms, stats, the
//! cluster view and drain, health and the demo pages. Every error is JSON `{"code","message"}` with a
//! meaningful status (see docs/api.md). Who may call what: [`super::auth`].
//!
//! Owns the mapping between HTTP and the control thread: it parses requests
//! (paths, headers, bounded bodies), calls the control state, and turns
//! [`RoomError`]s into statuses ([`ApiError`]), and a join refused for
//! capacity (or any join while the node drains) into a 307 to the node
//! [`super::cluster`] names, when there is one. Must not: decide admission,
//! placement or room state ([`super::rooms`]), shape the JSON documents
//! ([`super::views`]), or hold the state lock across an await.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde::Deserialize;

use super::auth::{Access, Claims, Needs, sdp_needs};
use super::turn::IceServers;
use super::{Flavor, RoomError, Shared, assets, lock, renegotiate, sdpfrag, turn, views};
use crate::recorder::RecError;
use corelay_core::{OfferError, ParticipantId, ShardId};

/// Seconds a refused client is asked to wait before retrying.
const RETRY_AFTER_SECS: u32 = 5;

/// Response header of a join: the participant's public id.
const PARTICIPANT_ID: header::HeaderName = header::HeaderName::from_static("participant-id");

/// An API error: HTTP status, stable code, human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }
}

impl From<RoomError> for ApiError {
    fn from(e: RoomError) -> Self {
        let status = match &e {
            RoomError::BadRoomName => StatusCode::BAD_REQUEST,
            RoomError::RoomFull { .. } | RoomError::RenegotiationInProgress => StatusCode::CONFLICT,
            RoomError::TooManyRooms { .. }
            | RoomError::NoCapacity { .. }
            | RoomError::PlacementUnsettled
            | RoomError::ShardStopped
            | RoomError::ShardSilent => StatusCode::SERVICE_UNAVAILABLE,
            RoomError::UnknownResource { .. }
            | RoomError::UnknownParticipant(_)
            | RoomError::LeftMeanwhile => StatusCode::NOT_FOUND,
            RoomError::PreconditionRequired => StatusCode::PRECONDITION_REQUIRED,
            RoomError::EtagMismatch { .. } => StatusCode::PRECONDITION_FAILED,
            RoomError::NoRandomness | RoomError::NoShard => StatusCode::INTERNAL_SERVER_ERROR,
            RoomError::Offer(o) => match o {
                OfferError::UnknownParticipant(_) => StatusCode::NOT_FOUND,
                OfferError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                OfferError::RenegotiationFailed | OfferError::NoRandomness => {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
                OfferError::Bad(_)
                | OfferError::TooManyLines { .. }
                | OfferError::CodecMismatch(_) => StatusCode::BAD_REQUEST,
            },
        };
        // Admission refusals are temporary: the client may retry later. A
        // stopped shard is not (its participants are gone).
        let retry_after = matches!(
            e,
            RoomError::TooManyRooms { .. }
                | RoomError::NoCapacity { .. }
                | RoomError::PlacementUnsettled
        )
        .then_some(RETRY_AFTER_SECS);
        ApiError {
            retry_after,
            ..ApiError::new(status, e.code(), e.to_string())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.code, "message": self.message});
        let mut res = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"corelay\""),
            );
        }
        res
    }
}

/// The API router. `access`: authentication (`--auth-secret`) and CORS
/// (`--cors-origin`); `Access::default()` is open, same-origin only.
pub fn router(state: Shared, access: Arc<Access>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/watch/{room}", get(watch))
        .route("/assets/{file}", get(asset))
        .route("/healthz", get(healthz))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/cluster", get(cluster_view))
        .route("/api/v1/cluster/drain", post(cluster_drain))
        .route("/api/v1/ice-servers", get(ice_servers))
        .route("/api/v1/rooms", get(rooms))
        .route("/api/v1/rooms/{room}", get(room))
        .route(
            "/api/v1/rooms/{room}/participants/{id}/diagnosis",
            get(diagnosis),
        )
        .route(
            "/api/v1/rooms/{room}/recordings",
            get(list_recordings).post(start_recording),
        )
        .route(
            "/api/v1/rooms/{room}/recordings/{id}",
            get(one_recording).delete(stop_recording),
        )
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
                .route("/whip/{room}", post(join).options(endpoint_options))
                .route("/whip/{room}/{id}", patch(trickle).delete(leave))
                .layer(Extension(Flavor::Whip)),
        )
        .merge(
            Router::new()
                .route("/whep/{room}", post(join).options(endpoint_options))
                .route("/whep/{room}/{id}", patch(trickle).delete(leave))
                .layer(Extension(Flavor::Whep)),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(Extension(access.clone()))
        .layer(axum::middleware::from_fn_with_state(access, cors))
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

/// CORS: pages of the `--cors-origin` origins (WHIP/WHEP players, other
/// apps) may call this API from browsers; other origins get no CORS headers,
/// so browsers keep their pages out. The server's own pages are same-origin.
async fn cors(State(access): State<Arc<Access>>, req: Request, next: Next) -> Response {
    let allow = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| access.cors_allow(o));
    let preflight = req.method() == Method::OPTIONS;
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    if let Some(origin) = allow {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        if preflight {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST, PATCH, DELETE, OPTIONS"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("Content-Type, If-Match, Authorization"),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        } else {
            h.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(
                    "Location, ETag, Retry-After, Link, Participant-Id, Corelay-Nodes",
                ),
            );
        }
    }
    res
}

/// With authentication on: 401 without a valid token, else 403 unless the
/// token is the participant's own or an admin's. Returns the claims.
fn authorize_owner(
    state: &Shared,
    access: &Access,
    headers: &HeaderMap,
    room: &str,
    id: &str,
    flavor: Flavor,
) -> Result<Option<Claims>, ApiError> {
    let Some(claims) = access.verify(headers)? else {
        return Ok(None);
    };
    if !claims.admin {
        let (_, identity) = lock(state).owner(room, id, flavor)?;
        claims.may_manage(room, &identity)?;
    }
    Ok(Some(claims))
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such resource")
}

async fn method_not_allowed(method: axum::http::Method) -> Response {
    if method == Method::OPTIONS {
        // CORS preflight: the cors layer adds the Allow-* headers for
        // allowed origins only.
        return StatusCode::NO_CONTENT.into_response();
    }
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
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

/// 200 while every shard runs; 503 naming the shards that stopped (they
/// take no new participants) so that a load balancer or supervisor sees it:
/// `{"status":"degraded","shards":N,"failed":[1]}`.
async fn healthz(State(state): State<Shared>) -> Response {
    let (shards, failed) = {
        let st = lock(&state);
        (st.shard_count(), st.failed_shards())
    };
    if failed.is_empty() {
        return axum::Json(serde_json::json!({"status": "ok", "shards": shards})).into_response();
    }
    // Which shards, not why: the reason (a panic message) is in the log.
    let failed: Vec<ShardId> = failed.into_iter().map(|(shard, _)| shard).collect();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serde_json::json!({"status": "degraded", "shards": shards, "failed": failed})),
    )
        .into_response()
}

/// With authentication on: 401 without a valid token, 403 unless admin.
fn admin_only(access: &Access, headers: &HeaderMap) -> Result<(), ApiError> {
    match access.verify(headers)? {
        Some(c) => c.must_be_admin(),
        None => Ok(()),
    }
}

async fn stats(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    Ok(axum::Json(views::stats(&lock(&state))).into_response())
}

/// This node's view of its cluster (admin): 404 `not_a_cluster` without
/// `--cluster`.
async fn cluster_view(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    let view = views::cluster(&lock(&state)).ok_or_else(not_a_cluster)?;
    Ok(axum::Json(view).into_response())
}

/// Takes this node out of placement (admin): it announces itself draining
/// at once, and redirects every new join to another node. Its participants
/// whose room another node can take get a `bye` with reason
/// `node_draining` (they join again, and are sent there); the others'
/// calls stay. 404 `not_a_cluster` without `--cluster`.
async fn cluster_drain(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    let mut st = lock(&state);
    let node = st.cluster_mut().ok_or_else(not_a_cluster)?;
    node.start_draining();
    let node_id = node.node_id.clone();
    let moved = st.drain_members();
    let body = serde_json::json!({"node_id": node_id, "draining": true, "moved": moved});
    Ok(axum::Json(body).into_response())
}

fn not_a_cluster() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_a_cluster",
        "this node runs without --cluster",
    )
}

async fn rooms(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    let rooms = views::rooms(&lock(&state));
    Ok(axum::Json(serde_json::json!({"rooms": rooms})).into_response())
}

async fn room(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // An admin, or a token for this room.
    if let Some(c) = access.verify(&headers)? {
        c.may_join(&room)?;
    }
    let found = views::room(&lock(&state), &room);
    Ok(match found {
        Some((codec, members)) => axum::Json(
            serde_json::json!({"room": room, "video_codec": codec, "participants": members}),
        )
        .into_response(),
        None => ApiError::not_found(format!("no room {room}")).into_response(),
    })
}

impl From<RecError> for ApiError {
    fn from(e: RecError) -> Self {
        match e {
            RecError::Unavailable(why) => ApiError::new(
                StatusCode::CONFLICT,
                "recording_unavailable",
                format!("recording is unavailable: {why}"),
            ),
            RecError::AlreadyRecording(id) => ApiError::new(
                StatusCode::CONFLICT,
                "already_recording",
                format!("the room is already being recorded ({id})"),
            ),
            RecError::TooMany(n) => ApiError {
                retry_after: Some(RETRY_AFTER_SECS),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_recordings",
                    format!("{n} recordings run already (--max-recordings)"),
                )
            },
            RecError::NotFound => ApiError::not_found("no such recording"),
        }
    }
}

fn recording_room(room: &str) -> Result<(), ApiError> {
    if super::valid_room_name(room) {
        Ok(())
    } else {
        Err(RoomError::BadRoomName.into())
    }
}

/// `POST /api/v1/rooms/{room}/recordings` (admin): records every track
/// published in the room, each into its own WebM file (docs/api.md,
/// "Recording"). 201 with the recording's status and its `Location`.
async fn start_recording(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    recording_room(&room)?;
    let status = lock(&state).start_recording(&room)?;
    let location = format!("/api/v1/rooms/{room}/recordings/{}", status.id);
    let mut res = (StatusCode::CREATED, axum::Json(status)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    Ok(res)
}

/// `GET /api/v1/rooms/{room}/recordings` (admin): the room's recordings,
/// running and stopped, with their files, sizes, durations, gaps, errors.
async fn list_recordings(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    recording_room(&room)?;
    let list = lock(&state).recordings(&room);
    Ok(axum::Json(serde_json::json!({"room": room, "recordings": list})).into_response())
}

async fn one_recording(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    let found = lock(&state)
        .recordings(&room)
        .into_iter()
        .find(|r| r.id == id);
    match found {
        Some(r) => Ok(axum::Json(r).into_response()),
        None => Err(RecError::NotFound.into()),
    }
}

/// `DELETE /api/v1/rooms/{room}/recordings/{id}` (admin): stops it; answers
/// once its files are finalized, with its last status.
async fn stop_recording(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&access, &headers)?;
    let stopping = lock(&state).stop_recording(&room, &id)?;
    let done = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || stopping.finish()),
    )
    .await;
    match done {
        Ok(Ok(Some(status))) => Ok(axum::Json(status).into_response()),
        _ => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "recording_stop_failed",
            "the recording was stopped but its files could not be finished in time",
        )),
    }
}

/// `GET /api/v1/rooms/{room}/participants/{id}/diagnosis` (`id`: the
/// public participant id): the live verdict on each of its receive slots,
/// with the evidence and the last 60 s (docs/api.md). Where tokens are
/// checked, only its own token (same identity and room) or an admin token
/// may read it; a stranger learns nothing, not even whether it exists.
async fn diagnosis(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let claims = access.verify(&headers)?;
    let found = id
        .parse::<ParticipantId>()
        .ok()
        .and_then(|pid| lock(&state).diagnosis(pid))
        .filter(|(r, ..)| *r == room);
    match (&claims, &found) {
        (Some(c), Some((_, identity, _))) => c.may_manage(&room, identity)?,
        (Some(c), None) => c.must_be_admin()?,
        (None, _) => {}
    }
    let Some((_, _, slots)) = found else {
        return Err(ApiError::not_found(format!(
            "no participant {id} in room {room}"
        )));
    };
    Ok(
        axum::Json(serde_json::json!({"participant": id, "room": room, "slots": slots}))
            .into_response(),
    )
}

#[derive(Deserialize)]
struct JoinQuery {
    name: Option<String>,
    /// `follow=0`: a join this node sends elsewhere is answered 409
    /// `elsewhere` with the `location` in the body, not a 307 (a page's
    /// `fetch` cannot read a redirect to another origin).
    follow: Option<String>,
}

/// What a request body may be: at most `max_bytes`, sent within `timeout`.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// The request's media type (`Content-Type` without parameters, lowercase)
/// must be exactly `want`: 415 otherwise.
fn expect_type(headers: &HeaderMap, want: &str) -> Result<(), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media_type = ct.split(';').next().unwrap_or("").trim();
    if media_type.eq_ignore_ascii_case(want) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("expected Content-Type: {want}"),
    ))
}

/// Reads a request body within `limits`: 413 when it is (or says it will
/// be) larger, 408 when the client takes too long to send it.
async fn read_body(
    limits: &BodyLimits,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the request body is larger than {} bytes (--max-sdp-bytes)",
                limits.max_bytes
            ),
        )
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > limits.max_bytes as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(limits.timeout, axum::body::to_bytes(body, limits.max_bytes)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(too_large()),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body did not arrive in time",
        )),
    }
}

/// The SDP body of a request: exactly `application/sdp`, bounded, UTF-8.
async fn sdp_body(
    limits: &BodyLimits,
    headers: &HeaderMap,
    body: Body,
) -> Result<String, ApiError> {
    expect_type(headers, "application/sdp")?;
    let bytes = read_body(limits, headers, body).await?;
    String::from_utf8(bytes.into()).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_offer",
            "the SDP offer is not UTF-8",
        )
    })
}

fn created(location: String, id: ParticipantId, etag: String, answer: String) -> Response {
    let mut res = (StatusCode::CREATED, answer).into_response();
    let h = res.headers_mut();
    // The public id (rosters, slot events); the Location is the secret one.
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        h.insert(PARTICIPANT_ID, v);
    }
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

/// The admission refusals that are about this node's capacity, not the
/// client's request: a cluster node sends these joins elsewhere.
fn capacity_refusal(e: &RoomError) -> bool {
    matches!(
        e,
        RoomError::NoCapacity { .. }
            | RoomError::TooManyRooms { .. }
            | RoomError::PlacementUnsettled
    )
}

/// `refusal` as a `307 Temporary Redirect` to another node of the cluster
/// that has room (the same path and query on its base URL, the refusal's
/// JSON as the body), or as it is when this node is alone or no other has
/// room.
fn redirect_or(state: &Shared, room: &str, uri: &Uri, refusal: ApiError, follow: bool) -> Response {
    let target = lock(state)
        .cluster()
        .and_then(|node| node.redirect_target(room));
    let Some(base) = target else {
        return refusal.into_response();
    };
    let path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
    let location = super::cluster::location(&base, path);
    let Ok(value) = HeaderValue::from_str(&location) else {
        return refusal.into_response();
    };
    tracing::info!(room, code = refusal.code, to = %location, "join redirected to another node");
    if !follow {
        let body = serde_json::json!({
            "code": "elsewhere",
            "message": format!("{}; join through {base}", refusal.message),
            "location": location,
            "node": base,
        });
        return (StatusCode::CONFLICT, axum::Json(body)).into_response();
    }
    let body = serde_json::json!({"code": refusal.code, "message": refusal.message});
    let mut res = (StatusCode::TEMPORARY_REDIRECT, axum::Json(body)).into_response();
    res.headers_mut().insert(header::LOCATION, value);
    res
}

/// POST of an SDP offer: joins `room` as a participant of `flavor`. A join
/// this node refuses for capacity, or any join while it drains, is
/// redirected to another node of its cluster when one has room.
#[allow(clippy::too_many_arguments, reason = "axum extractors")]
async fn join(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Extension(ice): Extension<Arc<IceServers>>,
    Extension(flavor): Extension<Flavor>,
    Path(room): Path<String>,
    Query(q): Query<JoinQuery>,
    Extension(limits): Extension<BodyLimits>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let claims = access.verify(&headers)?;
    if let Some(c) = &claims {
        c.may_join(&room)?;
    }
    let sdp = sdp_body(&limits, &headers, body).await?;
    if let Some(c) = &claims {
        // What the endpoint is for, and whatever else the offer asks for.
        let needs = match flavor {
            Flavor::Participant => Needs::default(),
            Flavor::Whip => Needs::PUBLISH,
            Flavor::Whep => Needs::SUBSCRIBE,
        };
        c.may(needs.and(sdp_needs(&sdp)))?;
    }
    let name = claims
        .as_ref()
        .and_then(|c| c.name.as_deref())
        .or(q.name.as_deref());
    let identity = claims.as_ref().map(|c| c.sub.as_str());
    let follow = q.follow.as_deref() != Some("0");
    let draining = lock(&state).cluster().is_some_and(|n| n.draining());
    if draining {
        let refusal = ApiError {
            retry_after: Some(RETRY_AFTER_SECS),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "node_draining",
                "this node is draining and takes no new participants",
            )
        };
        return Ok(redirect_or(&state, &room, &uri, refusal, follow));
    }
    let publish_data = claims.as_ref().is_none_or(|c| c.publish_data);
    let joined = match super::join(&state, &room, name, identity, &sdp, flavor, publish_data).await
    {
        Ok(joined) => joined,
        Err(e) if capacity_refusal(&e) => {
            return Ok(redirect_or(&state, &room, &uri, e.into(), follow));
        }
        Err(e) => return Err(e.into()),
    };
    let location = match flavor {
        Flavor::Participant => format!("/api/v1/rooms/{room}/participants/{}", joined.resource),
        Flavor::Whip => format!("/whip/{room}/{}", joined.resource),
        Flavor::Whep => format!("/whep/{room}/{}", joined.resource),
    };
    let mut res = created(location, joined.id, joined.etag, joined.answer);
    // A cluster node names the others a client may join through if this
    // one goes away (the demo page tries them in turn).
    let others = lock(&state)
        .cluster()
        .map(|n| n.other_http_addrs())
        .unwrap_or_default();
    if !others.is_empty()
        && let Ok(v) = HeaderValue::from_str(&others.join(", "))
    {
        res.headers_mut().insert(CORELAY_NODES, v);
    }
    if flavor != Flavor::Participant {
        // The token's identity, else the name, else the participant's id.
        let who = identity
            .or(name)
            .map_or_else(|| joined.id.to_string(), str::to_owned);
        add_ice_links(&mut res, &ice, &who);
    }
    Ok(res)
}

/// RFC 9725 §4.6: one `Link: <turn:…>; rel="ice-server"; …` header per
/// TURN URL, with credentials minted for `identity` (none without
/// `--turn-url`). They are secret to the client: not cacheable.
fn add_ice_links(res: &mut Response, ice: &IceServers, identity: &str) {
    let Some(minted) = ice.mint(identity) else {
        return;
    };
    let h = res.headers_mut();
    for link in turn::link_headers(&minted) {
        if let Ok(v) = HeaderValue::from_str(&link) {
            h.append(header::LINK, v);
        }
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// OPTIONS of a WHIP/WHEP endpoint: 204 with the ICE servers as `Link`
/// headers (RFC 9725 §4.6) for a caller that may join the room (any caller
/// without authentication; with it, a token for the room). A CORS preflight
/// carries no token: it gets 204 without them.
async fn endpoint_options(
    Extension(access): Extension<Arc<Access>>,
    Extension(ice): Extension<Arc<IceServers>>,
    Path(room): Path<String>,
    Query(q): Query<JoinQuery>,
    headers: HeaderMap,
) -> Response {
    let mut res = StatusCode::NO_CONTENT.into_response();
    res.headers_mut().insert(
        header::HeaderName::from_static("accept-post"),
        HeaderValue::from_static("application/sdp"),
    );
    let identity = match access.verify(&headers) {
        Ok(None) => Some(q.name.unwrap_or_else(|| "guest".into())),
        Ok(Some(c)) if c.grants_room(&room) => Some(c.sub),
        _ => None,
    };
    if let Some(identity) = identity {
        add_ice_links(&mut res, &ice, &identity);
    }
    res
}

#[derive(Deserialize)]
struct IceServersQuery {
    room: Option<String>,
    name: Option<String>,
}

/// `GET /api/v1/ice-servers[?room=R]`: `{"iceServers":[{urls,username,credential}]}`
/// for `RTCPeerConnection`, credentials minted for the token's identity
/// (without authentication: `?name=`, else "guest"); an empty list without
/// `--turn-url`. Authorized like a join: with authentication a valid token
/// (401), that grants `room` when one is named (403).
async fn ice_servers(
    Extension(access): Extension<Arc<Access>>,
    Extension(ice): Extension<Arc<IceServers>>,
    Query(q): Query<IceServersQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let claims = access.verify(&headers)?;
    if let (Some(c), Some(room)) = (&claims, &q.room) {
        c.may_join(room)?;
    }
    let identity = claims
        .map(|c| c.sub)
        .or(q.name)
        .unwrap_or_else(|| "guest".into());
    let body = turn::json(ice.mint(&identity).as_ref());
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response())
}

/// The other nodes' HTTP base URLs (a join's answer in a cluster).
const CORELAY_NODES: header::HeaderName = header::HeaderName::from_static("corelay-nodes");

/// DELETE of a session's Location.
async fn leave(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Extension(flavor): Extension<Flavor>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_owner(&state, &access, &headers, &room, &id, flavor)?;
    lock(&state).leave_in(&room, &id, flavor)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn patch_participant(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Path((room, id)): Path<(String, String)>,
    Extension(limits): Extension<BodyLimits>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let claims = authorize_owner(&state, &access, &headers, &room, &id, Flavor::Participant)?;
    let if_match = headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok());
    // Check the resource and precondition before the body's type.
    lock(&state).check_patch(&room, &id, if_match)?;
    let sdp = sdp_body(&limits, &headers, body).await?;
    if let Some(c) = &claims {
        // A renegotiation may not add what the token does not allow.
        c.may(sdp_needs(&sdp))?;
    }
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

/// WHIP/WHEP PATCH (RFC 9725 §4.3) of an `application/trickle-ice-sdpfrag`
/// ([`sdpfrag`]), bounded like an offer:
/// - new `ice-ufrag`/`ice-pwd`: an ICE restart (§4.3.3). It needs
///   `If-Match: *` or the current ETag (428 without, 412 for another);
///   200 with the server's new credentials and candidates as a fragment and
///   a new ETag. Media goes on over the old path until the client's checks
///   with the new credentials move it.
/// - candidates only (or the credentials in force): 204 without an ETag
///   (§4.3.2). The server is ICE-lite and learns the client's addresses
///   from its connectivity checks, so the candidates are checked, not
///   used. An `If-Match` other than `*` must be the current ETag (412).
/// - a malformed fragment: 400 `bad_sdpfrag`.
#[allow(clippy::too_many_arguments, reason = "axum extractors")]
async fn trickle(
    State(state): State<Shared>,
    Extension(access): Extension<Arc<Access>>,
    Extension(flavor): Extension<Flavor>,
    Path((room, id)): Path<(String, String)>,
    Extension(limits): Extension<BodyLimits>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    authorize_owner(&state, &access, &headers, &room, &id, flavor)?;
    // Only for a session that exists (404 otherwise, with or without auth).
    let (client_ice, etag, max_mlines) = lock(&state).session_ice(&room, &id, flavor)?;
    expect_type(&headers, "application/trickle-ice-sdpfrag")?;
    let bytes = read_body(&limits, &headers, body).await?;
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_sdpfrag", m);
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("the fragment is not UTF-8".into()))?;
    let frag = sdpfrag::parse(text, max_mlines).map_err(|e| bad(e.0))?;
    // An If-Match that is not text matches nothing.
    let if_match = headers
        .get(header::IF_MATCH)
        .map(|v| v.to_str().map_or("", str::trim));
    let restart = frag
        .ice
        .as_ref()
        .filter(|ice| client_ice.as_ref() != Some(*ice));
    let Some(ice) = restart else {
        return match if_match {
            Some(v) if v != "*" && v != etag => {
                Err(RoomError::EtagMismatch { current: etag }.into())
            }
            _ => Ok(StatusCode::NO_CONTENT.into_response()),
        };
    };
    let if_match = match if_match {
        None => {
            return Err(ApiError::new(
                StatusCode::PRECONDITION_REQUIRED,
                "precondition_required",
                "an ICE restart needs If-Match: * or the session's current ETag (RFC 9725 §4.3.3)",
            ));
        }
        Some("*") => etag,
        Some(v) => v.to_owned(),
    };
    let (answer, etag) = super::ice_restart(&state, &room, &id, flavor, &if_match, ice).await?;
    let Some(fragment) = sdpfrag::answer_fragment(&answer) else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "renegotiation_failed",
            "the ICE restart's answer has no ICE credentials",
        ));
    };
    tracing::info!(room, ?flavor, "ICE restart by fragment");
    let mut res = (StatusCode::OK, fragment).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/trickle-ice-sdpfrag"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    Ok(res)
}

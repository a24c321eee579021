//! The cluster directory: which nodes exist, where their relay sockets and
//! HTTP APIs are, how loaded they are and which rooms they hold members of,
//! kept in a NATS JetStream KV bucket.
//!
//! **What it owns.** One key per node in the bucket [`BUCKET`] (created with
//! a max age of [`TTL`] and a history of 1 when absent): this node's own key,
//! which [`Directory::announce`] writes (the heartbeat, every [`HEARTBEAT`])
//! and [`Directory::leave`] deletes; and a local view of every node's
//! record, fed by a watch of the bucket, with a change feed
//! ([`Directory::next_change`], [`Directory::try_next_change`]).
//!
//! **What it must not touch.** It is never on the packet path: only the
//! control thread uses it, inside its tokio runtime; a shard must never
//! wait on it, lock it or call it (design rule 1). It writes no key but
//! its own node's. It decides nothing: placement, redirects and evictions
//! are the caller's, from the view and the changes.
//!
//! **Expiry.** Debian's nats-server 2.9 removes a key whose age passes the
//! bucket's max age without any event on a watch (tested in
//! `tests/directory.rs`: `max_age_expiry_sends_no_watch_event_on_2_9`;
//! delete markers for max age came with 2.11's `SubjectDeleteMarkerTTL`).
//! So the view expires a node itself, [`TTL`] after the last put it saw of
//! it, and the bucket's max age only keeps the bucket from growing. A delete
//! (a node that leaves, drains or shuts down cleanly) removes at once.
//!
//! **A lost engine.** While the connection to NATS is down the view is kept
//! as it was and nothing expires (this node cannot tell a dead peer from a
//! dead link; the calls in progress go on). When the connection is back,
//! the bucket is opened again (created again if the server lost it), this
//! node's last record is put again, and a fresh watch replays the last
//! record of every key; every node in the view counts as just seen, so one
//! that does not show up within [`TTL`] is then removed. The view is a map
//! by node id: nothing is duplicated by a replay.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_nats::connection::State as ConnectionState;
use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

/// The KV bucket holding the directory.
pub const BUCKET: &str = "corelay-nodes";
/// How often a node should announce itself.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long after its last announcement a node leaves the view (and the
/// bucket's max age).
pub const TTL: Duration = Duration::from_secs(3);

/// One node, as it announces itself (the value of its key, as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node's `--node-id`, also its key in the bucket.
    pub node_id: String,
    /// Chosen once per process, its start time in Unix milliseconds: a node
    /// that restarts under the same id comes back with another epoch (and
    /// other relay keys: `relay::Sealer::new`).
    pub epoch: u64,
    /// Where its relay socket listens.
    pub relay_addr: SocketAddr,
    /// Where clients reach its HTTP API: what a redirect's `Location` is
    /// built from (`http://10.0.0.2:8080`).
    pub http_addr: String,
    /// Participants on the node now.
    pub participants: u32,
    /// How many more its admission control would take.
    pub capacity_left: u32,
    /// Draining: out of placement, its participants leaving.
    #[serde(default)]
    pub draining: bool,
    /// The rooms it holds members of.
    #[serde(default)]
    pub rooms: Vec<String>,
    /// Its shards: shard `i`'s relay socket is at `relay_addr`'s port + `i`.
    #[serde(default = "one")]
    pub shards: u32,
}

fn one() -> u32 {
    1
}

impl NodeRecord {
    /// The share of its capacity in use, 0 to 1.
    pub fn load(&self) -> f64 {
        let total = f64::from(self.participants) + f64::from(self.capacity_left);
        if total == 0.0 {
            1.0
        } else {
            f64::from(self.participants) / total
        }
    }
}

/// Why a node left the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftReason {
    /// No announcement for [`TTL`]: killed, hung or cut off.
    Expired,
    /// Its key was deleted: it left on purpose ([`Directory::leave`]).
    Deleted,
    /// It announced another epoch: it restarted, and what the old process
    /// held is gone.
    Restarted,
}

/// A change of the view. Changes are about the other nodes, never this
/// one; [`Change::Disconnected`] and [`Change::Reconnected`] are about the
/// link to NATS.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A node appeared (or came back in a new epoch).
    NodeJoined(NodeRecord),
    /// A node's record changed (load, rooms, draining, …). Heartbeats that
    /// change nothing make no change.
    NodeUpdated(NodeRecord),
    /// A node left the view.
    NodeLeft {
        node_id: String,
        epoch: u64,
        reason: LeftReason,
    },
    /// The link to NATS is down: the view is frozen until it is back.
    Disconnected,
    /// The link to NATS is back and the view is being rebuilt.
    Reconnected,
    /// The caller fell behind and the feed dropped changes: read
    /// [`Directory::nodes`] again.
    Resync,
}

/// The directory's settings; [`Config::default`] is the cluster's.
#[derive(Debug, Clone)]
pub struct Config {
    /// The bucket's name.
    pub bucket: String,
    /// How long a node stays in the view after its last announcement (and
    /// the bucket's max age).
    pub ttl: Duration,
    /// How long one request to NATS may take.
    pub request_timeout: Duration,
    /// How many changes wait in the feed before it gives up and asks for a
    /// [`Change::Resync`].
    pub change_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            bucket: BUCKET.to_owned(),
            ttl: TTL,
            request_timeout: Duration::from_secs(2),
            change_capacity: 4096,
        }
    }
}

/// What went wrong talking to the directory.
#[derive(Debug)]
pub enum DirectoryError {
    /// The node id cannot be a KV key (letters, digits, `-`, `_`, `=`, `.`
    /// and `/`, not starting or ending with `.`).
    InvalidNodeId(String),
    /// A record for another node than this directory's.
    WrongNode { expected: String, got: String },
    /// The first connection to NATS failed.
    Connect(String),
    /// The bucket cannot be opened or created.
    Bucket(String),
    /// No link to NATS now (the view is kept; try again).
    NotConnected,
    /// NATS did not answer in time.
    Timeout,
    /// NATS refused or failed the request.
    Nats(String),
    /// The record cannot be encoded.
    Encode(String),
}

impl fmt::Display for DirectoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidNodeId(id) => write!(f, "node id {id:?} cannot be a directory key"),
            Self::WrongNode { expected, got } => {
                write!(
                    f,
                    "a record for node {got:?} given to node {expected:?}'s directory"
                )
            }
            Self::Connect(err) => write!(f, "cannot connect to NATS: {err}"),
            Self::Bucket(err) => write!(f, "cannot open the directory bucket: {err}"),
            Self::NotConnected => f.write_str("not connected to NATS"),
            Self::Timeout => f.write_str("NATS did not answer in time"),
            Self::Nats(err) => write!(f, "NATS request failed: {err}"),
            Self::Encode(err) => write!(f, "cannot encode the node record: {err}"),
        }
    }
}

impl std::error::Error for DirectoryError {}

/// Whether `node_id` can be a node's `--node-id` (a directory key: letters,
/// digits, `-`, `_`, `=`, `.` and `/`, not starting or ending with `.`):
/// for checking flags before anything connects.
pub fn valid_node_id(node_id: &str) -> bool {
    valid_key(node_id)
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with('.')
        && !key.ends_with('.')
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b))
}

/// A node in the view and when this node last heard of it.
#[derive(Debug, Clone)]
struct Tracked {
    record: NodeRecord,
    /// The KV revision of the record; 0 after a reconnect, when any
    /// revision is taken (a server that lost its store counts from 1 again).
    revision: u64,
    last_seen: Instant,
}

/// The view and the change feed, without I/O: what the watch and the clock
/// do to it.
#[derive(Debug)]
struct View {
    local: String,
    nodes: BTreeMap<String, Tracked>,
    changes: VecDeque<Change>,
    capacity: usize,
    /// The feed overflowed and a `Resync` is queued.
    lagged: bool,
}

impl View {
    fn new(local: String, capacity: usize) -> Self {
        Self {
            local,
            nodes: BTreeMap::new(),
            changes: VecDeque::new(),
            capacity: capacity.max(1),
            lagged: false,
        }
    }

    fn push(&mut self, change: Change) {
        if self.lagged {
            return;
        }
        if self.changes.len() >= self.capacity {
            self.changes.clear();
            self.changes.push_back(Change::Resync);
            self.lagged = true;
            return;
        }
        self.changes.push_back(change);
    }

    fn pop(&mut self) -> Option<Change> {
        let change = self.changes.pop_front();
        if self.changes.is_empty() {
            self.lagged = false;
        }
        change
    }

    fn push_about(&mut self, node_id: &str, change: Change) {
        if node_id != self.local {
            self.push(change);
        }
    }

    /// A put of `key` at `revision`.
    fn put(&mut self, key: &str, revision: u64, value: &[u8], now: Instant) {
        let record: NodeRecord = match serde_json::from_slice(value) {
            Ok(record) => record,
            Err(err) => {
                tracing::warn!(key, %err, "directory: an undecodable node record, ignored");
                return;
            }
        };
        if record.node_id != key {
            tracing::warn!(key, node_id = %record.node_id, "directory: a record under another node's key, ignored");
            return;
        }
        match self.nodes.get_mut(key) {
            Some(known) if revision <= known.revision => {
                // Replayed by a new watch: what the view already has, or
                // older. Not a sign of life.
            }
            Some(known) if known.record.epoch != record.epoch => {
                let old_epoch = known.record.epoch;
                *known = Tracked {
                    record: record.clone(),
                    revision,
                    last_seen: now,
                };
                self.push_about(
                    key,
                    Change::NodeLeft {
                        node_id: key.to_owned(),
                        epoch: old_epoch,
                        reason: LeftReason::Restarted,
                    },
                );
                self.push_about(key, Change::NodeJoined(record));
            }
            Some(known) => {
                known.revision = revision;
                known.last_seen = now;
                if known.record != record {
                    known.record = record.clone();
                    self.push_about(key, Change::NodeUpdated(record));
                }
            }
            None => {
                self.nodes.insert(
                    key.to_owned(),
                    Tracked {
                        record: record.clone(),
                        revision,
                        last_seen: now,
                    },
                );
                self.push_about(key, Change::NodeJoined(record));
            }
        }
    }

    /// A delete or purge of `key` at `revision`.
    fn remove(&mut self, key: &str, revision: u64) {
        let Some(known) = self.nodes.get(key) else {
            return;
        };
        if revision <= known.revision {
            return;
        }
        let epoch = known.record.epoch;
        self.nodes.remove(key);
        self.push_about(
            key,
            Change::NodeLeft {
                node_id: key.to_owned(),
                epoch,
                reason: LeftReason::Deleted,
            },
        );
    }

    /// Removes the nodes not heard of for `ttl`.
    fn expire(&mut self, now: Instant, ttl: Duration) {
        let gone: Vec<(String, u64)> = self
            .nodes
            .iter()
            .filter(|(_, node)| now.saturating_duration_since(node.last_seen) > ttl)
            .map(|(id, node)| (id.clone(), node.record.epoch))
            .collect();
        for (node_id, epoch) in gone {
            self.nodes.remove(&node_id);
            self.push_about(
                &node_id.clone(),
                Change::NodeLeft {
                    node_id,
                    epoch,
                    reason: LeftReason::Expired,
                },
            );
        }
    }

    /// After a reconnect: every node counts as just seen, and the next
    /// record of each is taken whatever its revision.
    fn restart_clock(&mut self, now: Instant) {
        for node in self.nodes.values_mut() {
            node.last_seen = now;
            node.revision = 0;
        }
    }

    fn records(&self) -> impl Iterator<Item = &NodeRecord> {
        self.nodes.values().map(|node| &node.record)
    }
}

#[derive(Debug)]
struct State {
    view: View,
    connected: bool,
    /// What [`Directory::announce`] put last, put again on a reconnect.
    last_record: Option<NodeRecord>,
    /// When a put of this node's record last succeeded.
    last_put_ok: Option<Instant>,
    store: Option<kv::Store>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: go on.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// This node's handle on the cluster directory. Dropping it stops the
/// watch (its key then expires from the others' views within [`TTL`];
/// [`Directory::leave`] removes it at once).
pub struct Directory {
    node_id: String,
    client: async_nats::Client,
    config: Config,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl fmt::Debug for Directory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Directory")
            .field("node_id", &self.node_id)
            .field("bucket", &self.config.bucket)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

impl Drop for Directory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Directory {
    /// Connects to NATS at `url` as node `node_id`, with the cluster's
    /// settings. Fails if NATS cannot be reached now; once connected, a lost
    /// link is retried for ever.
    pub async fn connect(url: &str, node_id: &str) -> Result<Self, DirectoryError> {
        Self::connect_with(url, node_id, Config::default()).await
    }

    /// [`Directory::connect`] with other settings (tests: a shorter TTL).
    pub async fn connect_with(
        url: &str,
        node_id: &str,
        config: Config,
    ) -> Result<Self, DirectoryError> {
        if !valid_key(node_id) {
            return Err(DirectoryError::InvalidNodeId(node_id.to_owned()));
        }
        let (events_tx, events) = mpsc::unbounded_channel();
        let client = async_nats::ConnectOptions::new()
            .name(format!("corelay node {node_id}"))
            .connection_timeout(config.request_timeout)
            .ping_interval(Duration::from_secs(2))
            // Retry quickly: the directory must be whole again within
            // seconds of NATS coming back.
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((100 * attempts as u64).clamp(100, 1000))
            })
            .event_callback(move |event| {
                let events_tx = events_tx.clone();
                async move {
                    let _ = events_tx.send(event);
                }
            })
            .connect(url)
            .await
            .map_err(|err| DirectoryError::Connect(err.to_string()))?;
        let js = jetstream::new(client.clone());
        // JetStream may still be starting (a server just started, or
        // recovering its store): try for twice the request timeout.
        let deadline = Instant::now() + config.request_timeout * 2;
        let store = loop {
            let err = match tokio::time::timeout(config.request_timeout, open_bucket(&js, &config))
                .await
            {
                Ok(Ok(store)) => break store,
                Ok(Err(err)) => err,
                Err(_) => DirectoryError::Bucket("timed out".to_owned()),
            };
            if Instant::now() >= deadline {
                return Err(err);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                view: View::new(node_id.to_owned(), config.change_capacity),
                connected: true,
                last_record: None,
                last_put_ok: None,
                store: Some(store.clone()),
            }),
            changed: Notify::new(),
        });
        let task = tokio::spawn(run(
            Arc::clone(&shared),
            client.clone(),
            js,
            store,
            config.clone(),
            events,
        ));
        Ok(Self {
            node_id: node_id.to_owned(),
            client: client.clone(),
            config,
            shared,
            task,
        })
    }

    /// The connection to NATS, for the cluster's subjects
    /// ([`crate::members`]).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Puts this node's record: the heartbeat, every [`HEARTBEAT`]. The
    /// record is kept and put again when a lost link comes back.
    pub async fn announce(&self, record: &NodeRecord) -> Result<(), DirectoryError> {
        if record.node_id != self.node_id {
            return Err(DirectoryError::WrongNode {
                expected: self.node_id.clone(),
                got: record.node_id.clone(),
            });
        }
        let value =
            serde_json::to_vec(record).map_err(|err| DirectoryError::Encode(err.to_string()))?;
        let store = {
            let mut state = self.shared.lock();
            state.last_record = Some(record.clone());
            if !state.connected {
                return Err(DirectoryError::NotConnected);
            }
            state.store.clone().ok_or(DirectoryError::NotConnected)?
        };
        put(&store, &self.node_id, value, self.config.request_timeout).await?;
        self.shared.lock().last_put_ok = Some(Instant::now());
        Ok(())
    }

    /// Deletes this node's key (drain, clean shutdown): the others remove it
    /// at once ([`LeftReason::Deleted`]). Announce again to come back.
    pub async fn leave(&self) -> Result<(), DirectoryError> {
        let store = {
            let mut state = self.shared.lock();
            state.last_record = None;
            state.store.clone().ok_or(DirectoryError::NotConnected)?
        };
        match tokio::time::timeout(self.config.request_timeout, store.delete(&self.node_id)).await {
            Err(_) => Err(DirectoryError::Timeout),
            Ok(Err(err)) => Err(DirectoryError::Nats(err.to_string())),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Whether the link to NATS is up.
    pub fn is_connected(&self) -> bool {
        self.shared.lock().connected
    }

    /// Every node in the view, this one included once its announcement has
    /// come back through the watch, by node id.
    pub fn nodes(&self) -> Vec<NodeRecord> {
        self.shared.lock().view.records().cloned().collect()
    }

    /// Every node in the view, as [`Directory::nodes`], each with the time
    /// since this node last heard of it (a put seen through the watch; the
    /// clock restarts for all when a lost link comes back).
    pub fn nodes_seen(&self) -> Vec<(NodeRecord, Duration)> {
        let now = Instant::now();
        self.shared
            .lock()
            .view
            .nodes
            .values()
            .map(|node| {
                (
                    node.record.clone(),
                    now.saturating_duration_since(node.last_seen),
                )
            })
            .collect()
    }

    /// The other nodes in the view, by node id.
    pub fn peers(&self) -> Vec<NodeRecord> {
        self.shared
            .lock()
            .view
            .records()
            .filter(|record| record.node_id != self.node_id)
            .cloned()
            .collect()
    }

    /// One node's record.
    pub fn node(&self, node_id: &str) -> Option<NodeRecord> {
        self.shared
            .lock()
            .view
            .nodes
            .get(node_id)
            .map(|node| node.record.clone())
    }

    /// Where to send a join this node refuses (a 307): the node with room
    /// ([`NodeRecord::capacity_left`] > 0, not draining, not in `exclude`)
    /// with the smallest [`NodeRecord::load`]; ties go to the most room,
    /// then the smallest id.
    pub fn least_loaded(&self, exclude: &[&str]) -> Option<NodeRecord> {
        least_loaded(self.shared.lock().view.records(), exclude).cloned()
    }

    /// The next change, if one is waiting.
    pub fn try_next_change(&self) -> Option<Change> {
        self.shared.lock().view.pop()
    }

    /// Waits for the next change. Meant for one consumer.
    pub async fn next_change(&self) -> Change {
        loop {
            let notified = self.shared.changed.notified();
            if let Some(change) = self.try_next_change() {
                return change;
            }
            notified.await;
        }
    }
}

/// See [`Directory::least_loaded`].
pub fn least_loaded<'a>(
    records: impl IntoIterator<Item = &'a NodeRecord>,
    exclude: &[&str],
) -> Option<&'a NodeRecord> {
    records
        .into_iter()
        .filter(|r| r.capacity_left > 0 && !r.draining && !exclude.contains(&r.node_id.as_str()))
        .min_by(|a, b| {
            a.load()
                .total_cmp(&b.load())
                .then(b.capacity_left.cmp(&a.capacity_left))
                .then(a.node_id.cmp(&b.node_id))
        })
}

async fn open_bucket(
    js: &jetstream::Context,
    config: &Config,
) -> Result<kv::Store, DirectoryError> {
    if let Ok(store) = js.get_key_value(config.bucket.as_str()).await {
        return Ok(store);
    }
    // Absent (or the server lost it): create the bucket's stream as
    // async-nats's `create_key_value` would, without its account query,
    // whose answer from nats-server 2.9 (no `reserved_memory`) async-nats
    // 0.52 cannot read. Two nodes creating it at once is fine: JetStream
    // takes a stream created again with the same settings.
    let stream = jetstream::stream::Config {
        name: format!("KV_{}", config.bucket),
        description: Some("corelay cluster directory: one key per node".to_owned()),
        subjects: vec![format!("$KV.{}.>", config.bucket)],
        max_messages_per_subject: 1,
        max_age: config.ttl,
        // File storage: a restarted NATS keeps the bucket and its settings.
        storage: jetstream::stream::StorageType::File,
        num_replicas: 1,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        allow_direct: true,
        discard: jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    };
    js.create_stream(stream)
        .await
        .map_err(|err| DirectoryError::Bucket(err.to_string()))?;
    js.get_key_value(config.bucket.as_str())
        .await
        .map_err(|err| DirectoryError::Bucket(err.to_string()))
}

async fn put(
    store: &kv::Store,
    key: &str,
    value: Vec<u8>,
    timeout: Duration,
) -> Result<(), DirectoryError> {
    match tokio::time::timeout(timeout, store.put(key, value.into())).await {
        Err(_) => Err(DirectoryError::Timeout),
        Ok(Err(err)) => Err(DirectoryError::Nats(err.to_string())),
        Ok(Ok(_revision)) => Ok(()),
    }
}

/// How often the view expires nodes and checks its watch.
const TICK: Duration = Duration::from_millis(100);

/// Why a watch session ended.
enum Ended {
    /// The link to NATS went down.
    Disconnected,
    /// The watch ended or stalled while the link looked up.
    Watch,
    /// The client is closed for good.
    Closed,
}

/// The directory's task: keeps the bucket open and watched, and the view
/// expired, across lost links.
async fn run(
    shared: Arc<Shared>,
    client: async_nats::Client,
    js: jetstream::Context,
    store: kv::Store,
    config: Config,
    mut events: mpsc::UnboundedReceiver<async_nats::Event>,
) {
    let mut store = Some(store);
    loop {
        // Wait for the link, then open the bucket.
        let store_now = match store.take() {
            Some(store) => store,
            None => loop {
                while let Ok(event) = events.try_recv() {
                    if matches!(event, async_nats::Event::Closed) {
                        return;
                    }
                }
                if client.connection_state() == ConnectionState::Connected {
                    match tokio::time::timeout(config.request_timeout, open_bucket(&js, &config))
                        .await
                    {
                        Ok(Ok(store)) => break store,
                        Ok(Err(err)) => tracing::warn!(%err, "directory: bucket not open yet"),
                        Err(_) => tracing::warn!("directory: opening the bucket timed out"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            },
        };
        let reconnected = !shared.lock().connected;
        if reconnected {
            // Everyone counts as just seen from now; their announcements
            // come back within a heartbeat or two, or they expire.
            let record = {
                let mut state = shared.lock();
                state.store = Some(store_now.clone());
                state.connected = true;
                state.view.restart_clock(Instant::now());
                state.view.push(Change::Reconnected);
                state.last_record.clone()
            };
            shared.changed.notify_one();
            tracing::info!("directory: NATS is back, rebuilding the view");
            if let Some(record) = record {
                match serde_json::to_vec(&record) {
                    Ok(value) => {
                        match put(&store_now, &record.node_id, value, config.request_timeout).await
                        {
                            Ok(()) => shared.lock().last_put_ok = Some(Instant::now()),
                            Err(err) => {
                                tracing::warn!(%err, "directory: announcing again failed");
                            }
                        }
                    }
                    Err(err) => tracing::warn!(%err, "directory: cannot encode the record"),
                }
            }
        }
        let watch =
            match tokio::time::timeout(config.request_timeout, store_now.watch_with_history(">"))
                .await
            {
                Ok(Ok(watch)) => watch,
                Ok(Err(err)) => {
                    tracing::warn!(%err, "directory: cannot watch the bucket");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(_) => {
                    tracing::warn!("directory: watching the bucket timed out");
                    continue;
                }
            };
        match watch_session(&shared, watch, &config, &mut events).await {
            Ended::Closed => return,
            Ended::Disconnected => {
                {
                    let mut state = shared.lock();
                    state.connected = false;
                    state.view.push(Change::Disconnected);
                }
                shared.changed.notify_one();
                tracing::warn!("directory: lost NATS; the view is kept until it is back");
            }
            Ended::Watch => {
                // Same link: a new watch replays what the view has, which
                // the revisions recognise.
                tokio::time::sleep(Duration::from_millis(100)).await;
                store = Some(store_now);
            }
        }
    }
}

/// Applies one watch's entries and expires the view until the watch or the
/// link ends.
async fn watch_session(
    shared: &Shared,
    mut watch: kv::Watch,
    config: &Config,
    events: &mut mpsc::UnboundedReceiver<async_nats::Event>,
) -> Ended {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_entry = Instant::now();
    loop {
        tokio::select! {
            entry = watch.next() => {
                let entry = match entry {
                    Some(Ok(entry)) => entry,
                    Some(Err(err)) => {
                        tracing::warn!(%err, "directory: the watch failed");
                        return Ended::Watch;
                    }
                    None => return Ended::Watch,
                };
                let now = Instant::now();
                last_entry = now;
                {
                    let mut state = shared.lock();
                    match entry.operation {
                        kv::Operation::Put => state.view.put(&entry.key, entry.revision, &entry.value, now),
                        kv::Operation::Delete | kv::Operation::Purge => {
                            state.view.remove(&entry.key, entry.revision);
                        }
                    }
                }
                shared.changed.notify_one();
            }
            event = events.recv() => match event {
                Some(async_nats::Event::Disconnected) => return Ended::Disconnected,
                Some(async_nats::Event::Closed) | None => return Ended::Closed,
                Some(event) => tracing::debug!(%event, "directory: NATS event"),
            },
            _ = tick.tick() => {
                let now = Instant::now();
                let (stalled, waiting) = {
                    let mut state = shared.lock();
                    state.view.expire(now, config.ttl);
                    // Our own puts succeed but nothing comes back: the
                    // watch is dead while the link is not.
                    let stalled = state.last_put_ok.is_some_and(|ok| now.saturating_duration_since(ok) < HEARTBEAT * 2)
                        && now.saturating_duration_since(last_entry) > config.ttl;
                    (stalled, !state.view.changes.is_empty())
                };
                if waiting {
                    shared.changed.notify_one();
                }
                if stalled {
                    tracing::warn!("directory: the watch stalled; watching again");
                    return Ended::Watch;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, epoch: u64, participants: u32, capacity_left: u32) -> NodeRecord {
        NodeRecord {
            node_id: id.to_owned(),
            epoch,
            relay_addr: "127.0.0.1:7000".parse().unwrap(),
            http_addr: format!("http://{id}:8080"),
            participants,
            capacity_left,
            draining: false,
            rooms: vec!["r".to_owned()],
            shards: 1,
        }
    }

    fn json(record: &NodeRecord) -> Vec<u8> {
        serde_json::to_vec(record).unwrap()
    }

    fn drain(view: &mut View) -> Vec<Change> {
        std::iter::from_fn(|| view.pop()).collect()
    }

    #[test]
    fn joins_updates_and_silent_heartbeats() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 16);
        let b = record("b", 1, 0, 10);
        view.put("me", 1, &json(&record("me", 1, 0, 10)), t0);
        view.put("b", 2, &json(&b), t0);
        assert_eq!(drain(&mut view), vec![Change::NodeJoined(b.clone())]);
        view.put("b", 3, &json(&b), t0);
        assert_eq!(drain(&mut view), vec![]);
        let b2 = record("b", 1, 5, 5);
        view.put("b", 4, &json(&b2), t0);
        assert_eq!(drain(&mut view), vec![Change::NodeUpdated(b2)]);
        assert_eq!(view.nodes.len(), 2);
    }

    #[test]
    fn undecodable_or_misplaced_records_are_ignored() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 16);
        view.put("b", 1, b"{not json", t0);
        view.put("b", 2, &json(&record("c", 1, 0, 1)), t0);
        assert!(view.nodes.is_empty());
        assert!(drain(&mut view).is_empty());
    }

    #[test]
    fn expiry_and_delete_remove_with_a_reason() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 16);
        view.put("b", 1, &json(&record("b", 1, 0, 1)), t0);
        view.put("c", 2, &json(&record("c", 9, 0, 1)), t0);
        view.put(
            "c",
            3,
            &json(&record("c", 9, 0, 1)),
            t0 + Duration::from_secs(2),
        );
        drain(&mut view);
        view.expire(t0 + Duration::from_millis(3100), TTL);
        assert_eq!(
            drain(&mut view),
            vec![Change::NodeLeft {
                node_id: "b".into(),
                epoch: 1,
                reason: LeftReason::Expired
            }]
        );
        // A stale delete (older revision) changes nothing; a newer one removes.
        view.remove("c", 3);
        assert!(view.nodes.contains_key("c"));
        view.remove("c", 4);
        assert_eq!(
            drain(&mut view),
            vec![Change::NodeLeft {
                node_id: "c".into(),
                epoch: 9,
                reason: LeftReason::Deleted
            }]
        );
        assert!(view.nodes.is_empty());
    }

    #[test]
    fn a_replayed_record_is_no_sign_of_life() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 16);
        view.put("b", 5, &json(&record("b", 1, 0, 1)), t0);
        // A new watch replays revision 5 two seconds later.
        view.put(
            "b",
            5,
            &json(&record("b", 1, 0, 1)),
            t0 + Duration::from_secs(2),
        );
        view.expire(t0 + Duration::from_millis(3100), TTL);
        assert!(view.nodes.is_empty());
    }

    #[test]
    fn a_new_epoch_is_a_restart() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 16);
        view.put("b", 1, &json(&record("b", 1, 0, 1)), t0);
        drain(&mut view);
        let again = record("b", 2, 0, 1);
        view.put("b", 2, &json(&again), t0);
        assert_eq!(
            drain(&mut view),
            vec![
                Change::NodeLeft {
                    node_id: "b".into(),
                    epoch: 1,
                    reason: LeftReason::Restarted
                },
                Change::NodeJoined(again)
            ]
        );
    }

    #[test]
    fn after_a_reconnect_any_revision_counts_and_the_absent_expire() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 16);
        view.put("b", 100, &json(&record("b", 1, 0, 1)), t0);
        view.put("c", 101, &json(&record("c", 1, 0, 1)), t0);
        drain(&mut view);
        // Ten seconds without NATS: nothing expires meanwhile (the task
        // does not call expire while disconnected); then the clock restarts.
        let back = t0 + Duration::from_secs(10);
        view.restart_clock(back);
        view.expire(back + Duration::from_secs(1), TTL);
        assert_eq!(view.nodes.len(), 2);
        // A server that lost its store counts revisions from 1 again.
        view.put(
            "b",
            1,
            &json(&record("b", 1, 0, 1)),
            back + Duration::from_secs(1),
        );
        view.expire(back + Duration::from_millis(3100), TTL);
        assert_eq!(
            drain(&mut view),
            vec![Change::NodeLeft {
                node_id: "c".into(),
                epoch: 1,
                reason: LeftReason::Expired
            }]
        );
        assert_eq!(view.nodes.len(), 1);
    }

    #[test]
    fn no_changes_about_this_node() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 16);
        view.put("me", 1, &json(&record("me", 1, 0, 1)), t0);
        view.put("me", 2, &json(&record("me", 1, 3, 1)), t0);
        view.expire(t0 + Duration::from_secs(4), TTL);
        assert!(drain(&mut view).is_empty());
    }

    #[test]
    fn an_overflowing_feed_asks_for_a_resync() {
        let t0 = Instant::now();
        let mut view = View::new("me".into(), 4);
        for i in 0..10u64 {
            let id = format!("n{i}");
            view.put(&id, i + 1, &json(&record(&id, 1, 0, 1)), t0);
        }
        assert_eq!(drain(&mut view), vec![Change::Resync]);
        let id = "late";
        view.put(id, 99, &json(&record(id, 1, 0, 1)), t0);
        assert_eq!(
            drain(&mut view),
            vec![Change::NodeJoined(record(id, 1, 0, 1))]
        );
    }

    #[test]
    fn least_loaded_picks_the_emptiest_node_with_room() {
        let mut full = record("full", 1, 10, 0);
        full.participants = 0;
        let mut draining = record("draining", 1, 0, 100);
        draining.draining = true;
        let nodes = [
            full,
            draining,
            record("half", 1, 50, 50),
            record("tenth", 1, 10, 90),
            record("tenth-small", 1, 1, 9),
            record("me", 1, 0, 100),
        ];
        let pick = |exclude: &[&str]| least_loaded(&nodes, exclude).map(|r| r.node_id.clone());
        assert_eq!(pick(&[]).as_deref(), Some("me"));
        assert_eq!(pick(&["me"]).as_deref(), Some("tenth"));
        assert_eq!(pick(&["me", "tenth"]).as_deref(), Some("tenth-small"));
        assert_eq!(pick(&["me", "tenth", "tenth-small", "half"]), None);
    }

    #[test]
    fn node_ids_must_be_keys() {
        for good in ["a", "node-1", "eu_west.2", "A=B/c"] {
            assert!(valid_key(good), "{good}");
        }
        for bad in ["", ".a", "a.", "a b", "a*", "a>", "é"] {
            assert!(!valid_key(bad), "{bad}");
        }
    }

    #[test]
    fn a_record_reads_without_its_optional_fields() {
        let text = r#"{"node_id":"b","epoch":1,"relay_addr":"10.0.0.2:7000","http_addr":"http://10.0.0.2:8080","participants":3,"capacity_left":7}"#;
        let record: NodeRecord = serde_json::from_str(text).unwrap();
        assert!(!record.draining);
        assert!(record.rooms.is_empty());
        assert!((record.load() - 0.3).abs() < 1e-9);
    }
}

//! Prometheus exposition: the shards' figures (copied out as values every
//! 250 ms) rendered by the control thread with `prometheus-client` at scrape
//! time. Nothing on the packet path knows this module exists (docs/design.md rule 5).

use std::fmt::Write as _;

use corelay_core::metrics::LatencyHistogram;
use corelay_plane::ShardReport;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Everything one scrape shows, owned.
#[derive(Debug, Default)]
pub struct MetricsSnapshot {
    pub shards: Vec<(ShardReport, usize)>,
    /// Subscriber-seconds per verdict, per shard (in `shards`' order).
    pub verdicts: Vec<Vec<(&'static str, u64)>>,
    pub rooms: usize,
    pub admission_refusals: u64,
    /// Shards whose thread stopped.
    pub failed: Vec<corelay_core::ShardId>,
    /// This node's view of its cluster; None without `--cluster`.
    pub cluster: Option<ClusterFigures>,
    /// The relay link to each other node (`--cluster`).
    pub links: Vec<super::cluster::LinkOut>,
    /// Whether the shared UDP port's eBPF steering is on.
    pub port_steering: bool,
}

/// The cluster's figures in a scrape (`--cluster` only).
#[derive(Debug, Default, Clone, Copy)]
pub struct ClusterFigures {
    /// Nodes in the directory's view, this one included once its own
    /// announcement came back.
    pub nodes: usize,
    /// Whether the link to NATS is up.
    pub connected: bool,
    /// Whether this node drains.
    pub draining: bool,
}

impl Collector for MetricsSnapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = |enc: &mut DescriptorEncoder,
                     name: &str,
                     help: &str,
                     f: &dyn Fn(&ShardReport, usize) -> f64|
         -> Result<(), std::fmt::Error> {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (r, parts) in &self.shards {
                let shard = r.shard.to_string();
                m.encode_family(&[("shard", shard.as_str())])?
                    .encode_gauge(&f(r, *parts))?;
            }
            Ok(())
        };
        let counter = |enc: &mut DescriptorEncoder,
                       name: &str,
                       help: &str,
                       f: &dyn Fn(&ShardReport) -> u64|
         -> Result<(), std::fmt::Error> {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (r, _) in &self.shards {
                let shard = r.shard.to_string();
                m.encode_family(&[("shard", shard.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(&f(r), None)?;
            }
            Ok(())
        };
        let histogram = |enc: &mut DescriptorEncoder,
                         name: &str,
                         help: &str,
                         f: &dyn Fn(&ShardReport) -> &LatencyHistogram|
         -> Result<(), std::fmt::Error> {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for (r, _) in &self.shards {
                let shard = r.shard.to_string();
                let h = f(r);
                m.encode_family(&[("shard", shard.as_str())])?
                    .encode_histogram::<NoLabelSet>(
                        h.sum_us as f64 / 1e6,
                        h.count,
                        &h.buckets_seconds(),
                        None,
                    )?;
            }
            Ok(())
        };

        {
            let mut m = enc.encode_descriptor(
                "corelay_rooms",
                "Rooms with at least one participant.",
                None,
                MetricType::Gauge,
            )?;
            m.encode_gauge(&(self.rooms as i64))?;
        }
        {
            let mut m = enc.encode_descriptor(
                "corelay_port_steering",
                "1 while the shared UDP port's eBPF program steers datagrams to their shards, else 0 (a port per shard, one shard, or no eBPF: what reaches the wrong shard is counted in corelay_packets_handed_over).",
                None,
                MetricType::Gauge,
            )?;
            m.encode_gauge(&i64::from(self.port_steering))?;
        }
        {
            let mut m = enc.encode_descriptor(
                "corelay_admission_refusals",
                "Joins refused by admission control (503).",
                None,
                MetricType::Counter,
            )?;
            m.encode_counter::<NoLabelSet, _, u64>(&self.admission_refusals, None)?;
        }
        if let Some(c) = &self.cluster {
            let figures = [
                (
                    "corelay_cluster_nodes",
                    "Nodes in this node's view of the cluster directory (itself included).",
                    c.nodes as i64,
                ),
                (
                    "corelay_cluster_connected",
                    "1 while the cluster directory's link to NATS is up, else 0.",
                    i64::from(c.connected),
                ),
                (
                    "corelay_cluster_draining",
                    "1 while this node drains (out of placement), else 0.",
                    i64::from(c.draining),
                ),
            ];
            for (name, help, value) in figures {
                let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
                m.encode_gauge(&value)?;
            }
            type Figure = fn(&super::cluster::LinkOut) -> u64;
            let counters: [(&str, &str, Figure); 4] = [
                (
                    "corelay_relay_link_tx_packets",
                    "Relay datagrams sent to the node.",
                    |l| l.tx_packets,
                ),
                (
                    "corelay_relay_link_rx_packets",
                    "Relay datagrams received from the node.",
                    |l| l.rx_packets,
                ),
                (
                    "corelay_relay_link_lost",
                    "The node's relay datagrams found missing here (gaps in its sequence).",
                    |l| l.lost,
                ),
                (
                    "corelay_relay_link_resent",
                    "Relay datagrams sent again to the node because it asked.",
                    |l| l.resent,
                ),
            ];
            for (name, help, f) in counters {
                let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
                for l in &self.links {
                    m.encode_family(&[("node", l.node_id.as_str())])?
                        .encode_counter::<NoLabelSet, _, u64>(&f(l), None)?;
                }
            }
            let mut m = enc.encode_descriptor(
                "corelay_relay_link_rtt_seconds",
                "The worst round trip of the last relay pings to the node.",
                None,
                MetricType::Gauge,
            )?;
            for l in &self.links {
                m.encode_family(&[("node", l.node_id.as_str())])?
                    .encode_gauge(&(l.rtt_ms / 1000.0))?;
            }
        }
        gauge(
            &mut enc,
            "corelay_shard_up",
            "1 while the shard's thread runs, 0 after it failed (see /healthz).",
            &|r, _| {
                if self.failed.contains(&r.shard) {
                    0.0
                } else {
                    1.0
                }
            },
        )?;
        gauge(
            &mut enc,
            "corelay_participants",
            "Participants placed on the shard.",
            &|_, p| p as f64,
        )?;
        gauge(
            &mut enc,
            "corelay_shard_rooms",
            "Rooms with members on the shard.",
            &|r, _| r.rooms as f64,
        )?;
        gauge(
            &mut enc,
            "corelay_shard_busy_ratio",
            "Fraction of the last 250 ms the shard spent working.",
            &|r, _| r.busy,
        )?;
        counter(
            &mut enc,
            "corelay_loop_iterations",
            "Event-loop wake-ups.",
            &|r| r.loop_iterations,
        )?;
        let c = &counter;
        c(
            &mut enc,
            "corelay_packets_in",
            "Datagrams read from the shard's socket.",
            &|r| r.counters.rx_packets,
        )?;
        c(
            &mut enc,
            "corelay_bytes_in",
            "Bytes read from the shard's socket.",
            &|r| r.counters.rx_bytes,
        )?;
        c(
            &mut enc,
            "corelay_packets_out",
            "Datagrams handed to the kernel.",
            &|r| r.counters.tx_packets,
        )?;
        c(
            &mut enc,
            "corelay_bytes_out",
            "Bytes handed to the kernel.",
            &|r| r.counters.tx_bytes,
        )?;
        c(
            &mut enc,
            "corelay_udp_messages_out",
            "UDP messages the kernel took: fewer than datagrams where GSO sent runs as one.",
            &|r| r.counters.tx_messages,
        )?;
        c(
            &mut enc,
            "corelay_packets_forwarded",
            "RTP packets written to a subscriber's slot.",
            &|r| r.counters.forwarded,
        )?;
        c(
            &mut enc,
            "corelay_recording_packets",
            "Publishers' packets handed to a recording's queue.",
            &|r| r.counters.recording_queued,
        )?;
        {
            let mut m = enc.encode_descriptor(
                "corelay_packets_dropped",
                "Packets dropped, by reason.",
                None,
                MetricType::Counter,
            )?;
            for (r, _) in &self.shards {
                let shard = r.shard.to_string();
                let c = &r.counters;
                for (reason, v) in [
                    ("malformed", c.dropped_malformed),
                    ("unknown_source", c.dropped_unknown_source),
                    ("waiting_keyframe", c.dropped_waiting_keyframe),
                    ("stale", c.dropped_stale),
                    ("muted", c.dropped_muted),
                    ("no_codec", c.dropped_no_codec),
                    ("send_buffer_full", c.dropped_send),
                    ("cross_shard_queue_full", c.cross_shard_dropped),
                    ("by_stack", c.dropped_by_stack),
                    ("address_limit", c.dropped_addr_limit),
                    ("unknown_stream", c.dropped_unknown_stream),
                    ("relay_unknown_source", c.relay_dropped_unknown),
                    ("relay_bad", c.relay_dropped_bad),
                    ("relay_replayed", c.relay_dropped_replayed),
                    ("relay_send", c.relay_dropped_send),
                    ("recording_queue_full", c.recording_dropped),
                ] {
                    m.encode_family(&[("shard", shard.as_str()), ("reason", reason)])?
                        .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "corelay_subscriber_seconds",
                "Seconds of subscribers' slots in each verdict (good, publisher_uplink, subscriber_downlink, server, idle).",
                None,
                MetricType::Counter,
            )?;
            for ((r, _), verdicts) in self.shards.iter().zip(&self.verdicts) {
                let shard = r.shard.to_string();
                for (verdict, v) in verdicts {
                    m.encode_family(&[("shard", shard.as_str()), ("verdict", verdict)])?
                        .encode_counter::<NoLabelSet, _, u64>(v, None)?;
                }
            }
        }
        c(
            &mut enc,
            "corelay_packets_handed_over",
            "Datagrams this shard's socket got for another shard's participant (--port-layout shared), handed over to it.",
            &|r| r.counters.handed_over,
        )?;
        c(
            &mut enc,
            "corelay_packets_handed_in",
            "Datagrams another shard handed over to this one (--port-layout shared).",
            &|r| r.counters.handed_in,
        )?;
        c(
            &mut enc,
            "corelay_cross_shard_out",
            "Media packets sent to a peer shard (one hop).",
            &|r| r.counters.cross_shard_out,
        )?;
        c(
            &mut enc,
            "corelay_cross_shard_in",
            "Media packets received from a peer shard.",
            &|r| r.counters.cross_shard_in,
        )?;
        c(
            &mut enc,
            "corelay_relay_tx_packets",
            "Relay datagrams sent to other nodes' shards (--cluster).",
            &|r| r.counters.relay_tx_packets,
        )?;
        c(
            &mut enc,
            "corelay_relay_tx_bytes",
            "Bytes of relay datagrams sent to other nodes' shards, sealed.",
            &|r| r.counters.relay_tx_bytes,
        )?;
        c(
            &mut enc,
            "corelay_relay_rx_packets",
            "Relay datagrams from other nodes' shards, opened and read.",
            &|r| r.counters.relay_rx_packets,
        )?;
        c(
            &mut enc,
            "corelay_relay_rx_bytes",
            "Bytes of relay datagrams from other nodes' shards.",
            &|r| r.counters.relay_rx_bytes,
        )?;
        c(
            &mut enc,
            "corelay_nacks_received",
            "NACKs from subscribers, answered from the send buffer.",
            &|r| r.counters.nacks_received,
        )?;
        c(
            &mut enc,
            "corelay_nacks_sent",
            "NACKs sent to publishers.",
            &|r| r.counters.nacks_sent,
        )?;
        c(
            &mut enc,
            "corelay_keyframe_requests_received",
            "PLI/FIR received from subscribers.",
            &|r| r.counters.keyframe_requests_received,
        )?;
        c(
            &mut enc,
            "corelay_keyframe_requests_sent",
            "Keyframe requests (PLI) sent to publishers.",
            &|r| r.counters.keyframe_requests_sent,
        )?;
        c(
            &mut enc,
            "corelay_layer_switches",
            "Slots that moved to another simulcast layer of their source.",
            &|r| r.counters.layer_switches,
        )?;
        c(
            &mut enc,
            "corelay_layer_pauses",
            "Slots whose video the layer allocation paused.",
            &|r| r.counters.layer_pauses,
        )?;
        c(
            &mut enc,
            "corelay_received_direct",
            "Publishers' RTP packets the shard authenticated and decrypted itself, past str0m.",
            &|r| r.counters.received_direct,
        )?;
        c(
            &mut enc,
            "corelay_forwarded_direct",
            "Forwarded RTP packets the shard wrote and encrypted itself, past str0m.",
            &|r| r.counters.forwarded_direct,
        )?;
        c(
            &mut enc,
            "corelay_resent_direct",
            "NACKed packets of the shard's own egress resent on the RTX stream.",
            &|r| r.counters.resent_direct,
        )?;
        c(
            &mut enc,
            "corelay_temporal_skipped",
            "Packets of temporal layers a slot left out (a frame-rate down-switch).",
            &|r| r.counters.temporal_skipped,
        )?;
        c(
            &mut enc,
            "corelay_spatial_skipped",
            "SVC packets of spatial layers above the one a slot shows, left out.",
            &|r| r.counters.spatial_skipped,
        )?;
        c(
            &mut enc,
            "corelay_dynacast_notices",
            "Notices to simulcast publishers of the layers subscribers take.",
            &|r| r.counters.dynacast_notices,
        )?;
        c(
            &mut enc,
            "corelay_participants_added",
            "Participants that joined the shard.",
            &|r| r.counters.participants_added,
        )?;
        c(
            &mut enc,
            "corelay_participants_removed",
            "Participants that left the shard.",
            &|r| r.counters.participants_removed,
        )?;
        c(
            &mut enc,
            "corelay_rtc_errors",
            "Errors reported by str0m.",
            &|r| r.counters.rtc_errors,
        )?;
        c(
            &mut enc,
            "corelay_participant_panics",
            "Panics caught while handling one participant (it was evicted; the shard went on).",
            &|r| r.counters.participant_panics,
        )?;
        c(
            &mut enc,
            "corelay_connect_timeouts",
            "Participants removed because ICE and DTLS were not up within --connect-timeout.",
            &|r| r.counters.connect_timeouts,
        )?;
        c(
            &mut enc,
            "corelay_ice_downs",
            "Connected participants whose ICE went down (consent failed); each gets --reconnect-grace to come back.",
            &|r| r.counters.ice_downs,
        )?;
        c(
            &mut enc,
            "corelay_reconnects",
            "Participants whose ICE came back up within --reconnect-grace (their call went on unchanged).",
            &|r| r.counters.reconnects,
        )?;
        c(
            &mut enc,
            "corelay_requests_dropped",
            "Data-channel requests over a participant's rate or size limit.",
            &|r| r.counters.dropped_requests,
        )?;
        c(
            &mut enc,
            "corelay_channels_refused",
            "Data channels a participant opened over the limit of 4 at a time or with a label and protocol over 1 KiB: reset, never kept.",
            &|r| r.counters.refused_channels,
        )?;
        let h = &histogram;
        h(
            &mut enc,
            "corelay_socket_dwell_seconds",
            "Time a datagram waited in the socket queue: kernel receive (SO_TIMESTAMPNS) to read.",
            &|r| &r.dwell,
        )?;
        h(
            &mut enc,
            "corelay_forward_latency_seconds",
            "Kernel receive of a media packet to the return of the sendmmsg carrying its copies, same shard.",
            &|r| &r.forward_local,
        )?;
        h(
            &mut enc,
            "corelay_forward_cross_shard_latency_seconds",
            "As corelay_forward_latency_seconds, for packets that crossed from a peer shard.",
            &|r| &r.forward_cross,
        )?;
        h(
            &mut enc,
            "corelay_peer_hop_seconds",
            "The cross-shard hop: a peer shard's media packet, from its receive on the publisher's shard to this shard's handling (each drained batch at its oldest's age).",
            &|r| &r.peer_hop,
        )?;
        h(
            &mut enc,
            "corelay_loop_iteration_seconds",
            "Work per event-loop wake-up.",
            &|r| &r.iteration,
        )?;
        Ok(())
    }
}

/// Renders the Prometheus text exposition format.
pub fn render(snapshot: MetricsSnapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
        let _ = writeln!(out, "# encoding failed");
    }
    out
}

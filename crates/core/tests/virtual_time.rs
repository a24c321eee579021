//! The engine without sockets or clocks: two str0m clients (full ICE,
//! controlling) and one shard's `Engine` exchange datagrams in memory under a
//! virtual clock. Five simulated seconds run in milliseconds, deterministically.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelay_core::offer::accept_offer;
use corelay_core::room::{MemberInfo, RoomUpdate};
use corelay_core::{Engine, ParticipantId, RoomId, RtcSettings, VideoCodec};
use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind, Mid};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, ExtensionMap, RtpWrite, SeqNo};
use str0m::{Candidate, Event, Input, Output, Rtc};

const SERVER: &str = "127.0.0.1:3478";

struct Client {
    addr: SocketAddr,
    rtc: Rtc,
    send_mid: Mid,
    slot_mid: Mid,
    connected: bool,
    received: Vec<(Mid, u64, Vec<u8>)>,
    inbox: VecDeque<Vec<u8>>,
    /// The first STUN binding request it sent (to replay from elsewhere).
    first_stun: Option<Vec<u8>>,
}

fn client(addr: &str, now: Instant) -> (Client, String, str0m::change::SdpPendingOffer) {
    let addr: SocketAddr = addr.parse().unwrap();
    let cfg = Rtc::builder()
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_opus(true, false)
        .enable_h264(true);
    let mut exts = ExtensionMap::standard();
    exts.set(9, Extension::AbsoluteCaptureTime);
    let mut rtc = cfg.set_extension_map(exts).build(now);
    rtc.add_local_candidate(Candidate::host(addr, "udp").unwrap());
    let mut api = rtc.sdp_api();
    let send_mid = api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
    let slot_mid = api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    let (offer, pending) = api.apply().unwrap();
    (
        Client {
            addr,
            rtc,
            send_mid,
            slot_mid,
            connected: false,
            received: Vec::new(),
            inbox: VecDeque::new(),
            first_stun: None,
        },
        offer.to_sdp_string(),
        pending,
    )
}

#[test]
fn two_clients_exchange_video_under_virtual_time() {
    let start = Instant::now();
    let settings = RtcSettings {
        video_codec: VideoCodec::H264,
        ..Default::default()
    };
    let server: SocketAddr = SERVER.parse().unwrap();
    let mut engine = Engine::new(corelay_core::ShardId(0), settings.clone());
    let room = RoomId(1);

    let mut clients = join_clients(&mut engine, &settings, start, room);

    let mut now = start;
    let mut frame = 0u64;
    let mut next_frame = start;
    let end = start + Duration::from_secs(5);
    while now < end {
        // Clients: feed what arrived, publish on schedule, drain.
        for c in clients.iter_mut() {
            step_client(c, now, &mut engine, server);
        }
        if clients.iter().all(|c| c.connected) && now >= next_frame {
            next_frame = now + Duration::from_millis(33);
            for (i, c) in clients.iter_mut().enumerate() {
                let pt = c.rtc.media(c.send_mid).unwrap().remote_pts()[0];
                let mut api = c.rtc.direct_api();
                let tx = api.stream_tx_by_mid(c.send_mid, None).unwrap();
                // IDR on the first frame, then delta frames.
                let nal = if frame == 0 { 0x65 } else { 0x41 };
                let payload = vec![nal, i as u8, (frame & 0xff) as u8, 7, 7, 7];
                tx.write_rtp(
                    RtpWrite::new(
                        pt,
                        SeqNo::from(100 + frame),
                        (frame * 3000) as u32,
                        now,
                        payload,
                    )
                    .marker(true),
                );
                drain(c, now, &mut engine, server);
            }
            frame += 1;
        }
        // The engine: timers, then hand its datagrams to the clients.
        engine.handle_timeout(now);
        deliver(&mut engine, &mut clients, server);
        now += Duration::from_millis(1);
    }

    for (i, c) in clients.iter().enumerate() {
        let other = 1 - i as u8;
        let got: Vec<_> = c
            .received
            .iter()
            .filter(|(m, _, _)| *m == c.slot_mid)
            .collect();
        assert!(got.len() > 100, "client {i} got {} packets", got.len());
        // Every packet is the other client's, intact, in order, with continuous numbering.
        for w in got.windows(2) {
            assert_eq!(w[1].1, w[0].1 + 1, "sequence jumped");
        }
        assert!(
            got.iter()
                .all(|(_, _, p)| p[1] == other && p[3..] == [7, 7, 7])
        );
        assert_eq!(got[0].2[0], 0x65, "the slot must start with the keyframe");
    }
    assert!(engine.counters().forwarded > 200);
    assert_eq!(engine.counters().dropped_malformed, 0);
}

/// Two clients (ids 1 and 2) offer, the engine adopts both in `room`, and
/// they apply its answers; nobody has sent a datagram yet.
fn join_clients(
    engine: &mut Engine,
    settings: &RtcSettings,
    start: Instant,
    room: RoomId,
) -> Vec<Client> {
    let server: SocketAddr = SERVER.parse().unwrap();
    let mut clients = Vec::new();
    let mut members = Vec::new();
    for (i, addr) in ["127.0.0.1:5001", "127.0.0.1:5002"].iter().enumerate() {
        let (mut c, offer, pending) = client(addr, start);
        let acc = accept_offer(settings, start, &offer, server).unwrap();
        let answer = SdpAnswer::from_sdp_string(&acc.answer).unwrap();
        c.rtc.sdp_api().accept_answer(pending, answer).unwrap();
        let id = ParticipantId(i as u64 + 1);
        members.push(MemberInfo {
            id,
            name: format!("c{i}"),
            shard: corelay_core::ShardId(0),
            tracks: acc.tracks.clone(),
        });
        let roster = RoomUpdate {
            room,
            name: "v".into(),
            members: members.clone(),
        };
        engine.add_participant(start, id, room, format!("c{i}"), acc, roster);
        clients.push(c);
    }
    clients
}

/// One client's turn: what arrived, then its timers, each drained into the engine.
fn step_client(c: &mut Client, now: Instant, engine: &mut Engine, server: SocketAddr) {
    while let Some(d) = c.inbox.pop_front() {
        let input = Input::Receive(
            now,
            Receive {
                proto: Protocol::Udp,
                source: server,
                destination: c.addr,
                contents: d.as_slice().try_into().unwrap(),
            },
        );
        c.rtc.handle_input(input).unwrap();
        drain(c, now, engine, server);
    }
    c.rtc.handle_input(Input::Timeout(now)).unwrap();
    drain(c, now, engine, server);
}

/// The engine's datagrams, into the inboxes of the clients they are for.
fn deliver(engine: &mut Engine, clients: &mut [Client], server: SocketAddr) {
    for t in engine.outputs().transmits.drain(..) {
        assert_eq!(t.source, server);
        if let Some(c) = clients.iter_mut().find(|c| c.addr == t.destination) {
            c.inbox.push_back(t.contents.to_vec());
        }
    }
}

fn drain(c: &mut Client, now: Instant, engine: &mut Engine, server: SocketAddr) {
    loop {
        match c.rtc.poll_output().unwrap() {
            Output::Timeout(_) => break,
            Output::Transmit(t) => {
                if c.first_stun.is_none() && t.contents.first().is_some_and(|b| *b < 4) {
                    c.first_stun = Some(t.contents.to_vec());
                }
                engine.handle_datagram(now, None, c.addr, server, &t.contents);
            }
            Output::Event(Event::Connected) => c.connected = true,
            Output::Event(Event::RtpPacket(p)) => {
                let mid = c
                    .rtc
                    .direct_api()
                    .stream_rx(&p.header.ssrc)
                    .map(|s| s.mid())
                    .unwrap();
                c.received.push((mid, *p.seq_no, p.payload.to_vec()));
            }
            Output::Event(_) => {}
        }
    }
}

/// Two limits in virtual time: a participant that never connects is removed at
/// its connect deadline (and one that connects is not), and a connected
/// participant's ICE credentials cannot register more source addresses than
/// allowed: a replayed binding request from new ports is dropped and counted.
#[test]
fn connect_deadline_and_source_address_limit() {
    let start = Instant::now();
    let mut settings = RtcSettings::default();
    settings.participant.max_addrs = 3;
    settings.participant.connect_timeout = Duration::from_secs(2);
    let server: SocketAddr = SERVER.parse().unwrap();
    let mut engine = Engine::new(corelay_core::ShardId(0), settings.clone());
    let room = RoomId(1);
    // Participant 1 connects; participant 2 never sends a thing.
    let mut c = join_clients(&mut engine, &settings, start, room).swap_remove(0);
    let mut now = start;
    while now < start + Duration::from_secs(3) {
        step_client(&mut c, now, &mut engine, server);
        engine.handle_timeout(now);
        deliver(&mut engine, std::slice::from_mut(&mut c), server);
        now += Duration::from_millis(5);
    }
    assert!(c.connected);
    assert_eq!(engine.counters().connect_timeouts, 1);
    assert_eq!(engine.participant_count(), 1, "the connected one stays");
    assert!(engine.outputs().control.iter().any(|e| matches!(
        e,
        corelay_core::ShardEvent::Left { id, reason: corelay_core::LeaveReason::ConnectTimeout } if *id == ParticipantId(2)
    )));

    // The participant's own (valid) binding request, replayed from ten new
    // ports: two more addresses are allowed (3 in all), eight are refused.
    let request = c
        .first_stun
        .clone()
        .expect("the client sent a binding request");
    for port in 0..10u16 {
        let from = SocketAddr::new(c.addr.ip(), 6000 + port);
        engine.handle_datagram(now, None, from, server, &request);
    }
    assert_eq!(engine.counters().dropped_addr_limit, 8);
}

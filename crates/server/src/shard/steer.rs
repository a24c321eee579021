//! Steering on a shared UDP port (`--port-layout shared`, the default): an
//! SK_REUSEPORT eBPF program (`crates/server/bpf/steer.bpf.c`) attached to
//! the reuseport group of the shards' sockets picks, per datagram, the
//! socket of the shard that owns its flow: a STUN binding request by the
//! shard its server ufrag names ([`corelay_core::offer::ufrag_shard`]),
//! anything else by its source address in a flow map that the owning shard
//! writes when ICE proves the address its participant's and clears when the
//! participant leaves (the engine's `Outputs::flows`). What the program
//! cannot place (an unknown source that is not STUN) goes by the kernel's
//! hash, and the engine hands it over as without steering.
//!
//! The object is compiled once (`scripts/build-steer-bpf`) and checked in:
//! building corelay needs no clang.
//!
//! Owns the loaded program and the maps' handles. Must not: write the flow
//! map per packet (only on a new address or a leave).

use std::fmt;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use aya::maps::{HashMap, Map, MapData, ReusePortSockArray};
use aya::programs::{ProgramError, SkReuseport};
use aya::{Ebpf, EbpfLoader};

/// The compiled program (scripts/build-steer-bpf).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../bpf/steer.bpf.o");

/// Shards the socket array holds (`STEER_SHARDS` in the C source: what two
/// ICE characters name).
pub const MAX_SHARDS: usize = corelay_core::offer::UFRAG_SHARDS;

/// Mirror of `struct flow_key` in steer.bpf.c: an IPv4 source as its
/// v4-mapped IPv6 address, the port in network order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FlowKey {
    addr: [u8; 16],
    port: [u8; 2],
    pad: u16,
}

const _: () = assert!(std::mem::size_of::<FlowKey>() == 20);

// SAFETY: a plain C struct of bytes, no padding (checked above).
unsafe impl aya::Pod for FlowKey {}

impl FlowKey {
    fn of(addr: SocketAddr) -> Self {
        let ip = match addr {
            SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
            SocketAddr::V6(a) => *a.ip(),
        };
        FlowKey {
            addr: ip.octets(),
            port: addr.port().to_be_bytes(),
            pad: 0,
        }
    }
}

/// Why steering is off.
#[derive(Debug)]
pub struct SteerError(String);

impl fmt::Display for SteerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SteerError {}

/// `e` and its sources, joined: aya's messages leave the errno in the source.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let c_s = c.to_string();
        if !s.contains(&c_s) {
            s.push_str(": ");
            s.push_str(&c_s);
        }
        cur = c.source();
    }
    s
}

fn privilege_hint() -> &'static str {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        ""
    } else {
        " (not running as root: give the binary CAP_BPF and CAP_NET_ADMIN, \
         e.g. `setcap cap_bpf,cap_net_admin+ep corelay`)"
    }
}

fn program_error(what: &str, e: &ProgramError) -> SteerError {
    let detail = match e {
        ProgramError::LoadError { io_error, .. } => chain(io_error),
        e => chain(e),
    };
    SteerError(format!("{what}: {detail}{}", privilege_hint()))
}

/// The program, loaded into the kernel and not yet attached.
pub struct Steering {
    ebpf: Ebpf,
}

impl Steering {
    /// Loads the program and creates its maps. `fail`: the tests' forced
    /// failure (`--test-steer-fail`).
    pub fn load(fail: bool) -> Result<Self, SteerError> {
        if fail {
            return Err(SteerError("forced by --test-steer-fail".into()));
        }
        let mut ebpf = EbpfLoader::new().load(OBJECT).map_err(|e| {
            SteerError(format!(
                "cannot load the eBPF object: {}{}",
                chain(&e),
                privilege_hint()
            ))
        })?;
        let prog: &mut SkReuseport = ebpf
            .program_mut("steer")
            .ok_or_else(|| SteerError("the eBPF object has no `steer` program".into()))?
            .try_into()
            .map_err(|e: ProgramError| program_error("not an sk_reuseport program", &e))?;
        prog.load()
            .map_err(|e| program_error("the kernel refused the sk_reuseport program", &e))?;
        Ok(Steering { ebpf })
    }

    /// Puts shard i's socket at index i of the socket array, attaches the
    /// program to their reuseport group, and returns each shard's writer
    /// of the flow map (in `sockets`' order).
    pub fn attach(mut self, sockets: &[&UdpSocket]) -> Result<Vec<FlowWriter>, SteerError> {
        if sockets.len() > MAX_SHARDS {
            return Err(SteerError(format!(
                "{} shards: the socket array holds {MAX_SHARDS}",
                sockets.len()
            )));
        }
        let map = self
            .ebpf
            .map_mut("STEER_SOCKS")
            .ok_or_else(|| SteerError("the eBPF object has no STEER_SOCKS map".into()))?;
        let mut socks = ReusePortSockArray::try_from(map)
            .map_err(|e| SteerError(format!("STEER_SOCKS: {}", chain(&e))))?;
        for (i, s) in sockets.iter().enumerate() {
            socks.set(i as u32, *s, 0).map_err(|e| {
                SteerError(format!(
                    "cannot put shard {i}'s socket in the socket array: {}",
                    chain(&e)
                ))
            })?;
        }
        let Some(Map::LruHashMap(flows)) = self.ebpf.take_map("STEER_FLOWS") else {
            return Err(SteerError(
                "the eBPF object has no STEER_FLOWS LRU hash map".into(),
            ));
        };
        let mut writers = Vec::with_capacity(sockets.len());
        for i in 0..sockets.len() {
            let fd = flows
                .fd()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| SteerError(format!("cannot duplicate the flow map's fd: {e}")))?;
            let data = MapData::from_fd(fd)
                .map_err(|e| SteerError(format!("STEER_FLOWS: {}", chain(&e))))?;
            let map = HashMap::try_from(Map::LruHashMap(data))
                .map_err(|e| SteerError(format!("STEER_FLOWS: {}", chain(&e))))?;
            writers.push(FlowWriter {
                map,
                shard: i as u32,
                failed: false,
            });
        }
        drop(flows);
        let prog: &SkReuseport = self
            .ebpf
            .program("steer")
            .ok_or_else(|| SteerError("the eBPF object has no `steer` program".into()))?
            .try_into()
            .map_err(|e: ProgramError| program_error("not an sk_reuseport program", &e))?;
        if let Some(first) = sockets.first() {
            prog.attach(*first).map_err(|e| {
                program_error("cannot attach the program to the reuseport group", &e)
            })?;
        }
        // The group holds the program, the program its maps: the loader's
        // handles may go.
        Ok(writers)
    }
}

/// A shard's handle on the flow map: the addresses ICE proved to be its
/// participants' go to it.
pub struct FlowWriter {
    map: HashMap<MapData, FlowKey, u32>,
    shard: u32,
    /// A write failed already (logged once).
    failed: bool,
}

impl FlowWriter {
    /// `addr` is now a participant's here (`claim`), or was one that left.
    /// A leave clears the entry only if it is still this shard's (another
    /// shard may have claimed the address since).
    pub fn apply(&mut self, addr: SocketAddr, claim: bool) {
        let key = FlowKey::of(addr);
        let result = if claim {
            self.map.insert(key, self.shard, 0)
        } else if self.map.get(&key, 0).ok() == Some(self.shard) {
            self.map.remove(&key)
        } else {
            Ok(())
        };
        if let Err(e) = result
            && !std::mem::replace(&mut self.failed, true)
        {
            tracing::warn!(
                shard = self.shard,
                "cannot write the shared port's flow map ({}); its datagrams go by the kernel's hash and are handed over",
                chain(&e)
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn flow_keys_map_ipv4_into_ipv6() {
        let v4: SocketAddr = "10.1.2.3:4660".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:10.1.2.3]:4660".parse().unwrap();
        assert_eq!(FlowKey::of(v4), FlowKey::of(mapped));
        let k = FlowKey::of(v4);
        assert_eq!(&k.addr[10..], &[0xff, 0xff, 10, 1, 2, 3]);
        assert_eq!(k.port, [0x12, 0x34]);
    }

    /// The checked-in object is what scripts/build-steer-bpf makes of the C
    /// source beside it, where the clang that built it is here (the
    /// comparison needs the same clang: another's output differs).
    #[test]
    fn the_object_is_its_source() {
        const CLANG: &str = "Debian clang version 14.0.6";
        let version = std::process::Command::new("clang")
            .arg("--version")
            .output();
        let Ok(version) = version else {
            eprintln!("no clang: the object is not rebuilt");
            return;
        };
        if !String::from_utf8_lossy(&version.stdout).starts_with(CLANG) {
            eprintln!("not {CLANG}: the object is not rebuilt");
            return;
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = std::env::temp_dir().join(format!("steer-{}.bpf.o", std::process::id()));
        let status = std::process::Command::new(root.join("scripts/build-steer-bpf"))
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "scripts/build-steer-bpf: {status}");
        let built = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert!(
            built == OBJECT,
            "crates/server/bpf/steer.bpf.o is not what scripts/build-steer-bpf makes of steer.bpf.c: rebuild it and commit both"
        );
    }
}

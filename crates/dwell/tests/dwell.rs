//! End-to-end tests of the corelay-dwell binary.
//!
//! Without the `bpf` feature: the binary must say so and exit 2.
//!
//! With it: the tracer runs against plain UDP receivers on 127.0.0.1 that
//! sleep known times between reads (recvmsg and recvmmsg), and its per-socket
//! histogram and mean must agree with the receivers' own SO_TIMESTAMPNS
//! measurement (read time minus kernel receive time). Where BPF cannot load
//! (not root, no BTF...), the test prints `SKIPPED: reason` on the real
//! stderr; with CORELAY_DWELL_REQUIRE_BPF=1 it fails instead.

use std::process::Command;

#[cfg(feature = "bpf")]
mod common;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_corelay-dwell")
}

#[cfg(not(feature = "bpf"))]
#[test]
fn without_bpf_feature_the_binary_says_so_and_exits_2() {
    let out = Command::new(bin())
        .args(["--ports", "3478-3500", "--duration", "1s"])
        .output()
        .expect("run corelay-dwell");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("built without BPF support"), "{err}");
}

#[test]
fn bad_arguments_are_refused_without_panicking() {
    for args in [
        &["--ports", "9-1"][..],
        &["--interval", "0s"],
        &["--interval", "soon"],
        &["--pid", "-3"],
        &["--prometheus", "not-an-address"],
    ] {
        let out = Command::new(bin())
            .args(args)
            .output()
            .expect("run corelay-dwell");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}

#[cfg(feature = "bpf")]
mod traced {
    use super::bin;
    use super::common::{say, skip, start};
    use corelay_dwell::model::{NBUCKETS, bucket_index};
    use serde_json::Value;
    use std::io::{Read, Write};
    use std::mem;
    use std::net::{TcpStream, UdpSocket};
    use std::os::fd::AsRawFd;
    use std::process::Command;
    use std::thread;
    use std::time::{Duration, Instant};

    /// The tracing tests run one at a time: a flood in one would disturb
    /// the timing another checks.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn realtime_ns() -> i128 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid pointer to one timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    }

    /// What the receiver measured itself: read time minus SO_TIMESTAMPNS.
    #[derive(Default, Debug)]
    struct AppDwell {
        count: u64,
        sum_ns: i128,
        buckets: [u64; NBUCKETS],
    }

    impl AppDwell {
        fn add(&mut self, dwell_ns: i128) {
            self.count += 1;
            self.sum_ns += dwell_ns;
            self.buckets[bucket_index(dwell_ns.max(0) as u64)] += 1;
        }
        fn mean_us(&self) -> f64 {
            self.sum_ns as f64 / self.count.max(1) as f64 / 1000.0
        }
    }

    fn receiver() -> UdpSocket {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with a valid int option on our socket.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
        s
    }

    const CMSG_SPACE: usize = 64;

    /// Kernel receive time from the SCM_TIMESTAMPNS control message.
    fn cmsg_timestamp(hdr: &libc::msghdr) -> Option<i128> {
        // SAFETY: walks the control buffer the kernel filled, within
        // msg_controllen, with the libc CMSG_* helpers.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    return Some(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec));
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
        None
    }

    /// One recvmsg; returns false on EAGAIN.
    fn read_one(sock: &UdpSocket, flags: libc::c_int, app: &mut AppDwell) -> bool {
        let mut buf = [0u8; 2048];
        let mut ctrl = [0u64; CMSG_SPACE / 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: zeroed msghdr then filled with valid buffers that outlive
        // the call.
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = ctrl.as_mut_ptr().cast();
        hdr.msg_controllen = CMSG_SPACE as _;
        // SAFETY: as above.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, flags) };
        let now = realtime_ns();
        if n < 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "recvmsg: {e}");
            return false;
        }
        let ts = cmsg_timestamp(&hdr).expect("SCM_TIMESTAMPNS missing");
        app.add(now - ts);
        true
    }

    /// One recvmmsg of up to 8 datagrams; returns how many were read.
    fn read_batch(sock: &UdpSocket, app: &mut AppDwell) -> usize {
        const N: usize = 8;
        let mut bufs = [[0u8; 2048]; N];
        let mut ctrls = [[0u64; CMSG_SPACE / 8]; N];
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: zeroed mmsghdrs filled with buffers that outlive the call.
        let mut msgs: Vec<libc::mmsghdr> = (0..N).map(|_| unsafe { mem::zeroed() }).collect();
        for i in 0..N {
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = ctrls[i].as_mut_ptr().cast();
            msgs[i].msg_hdr.msg_controllen = CMSG_SPACE as _;
        }
        // SAFETY: as above.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                N as _,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let now = realtime_ns();
        if n < 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "recvmmsg: {e}");
            return 0;
        }
        for m in &msgs[..n as usize] {
            let ts = cmsg_timestamp(&m.msg_hdr).expect("SCM_TIMESTAMPNS missing");
            app.add(now - ts);
        }
        n as usize
    }

    fn sleep_exact(d: Duration) {
        let until = Instant::now() + d;
        thread::sleep(d);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    /// Receiver that reads each datagram as soon as it is sent.
    fn fast_phase(rx: &UdpSocket, tx: &UdpSocket, n: usize) -> AppDwell {
        let mut app = AppDwell::default();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let to = rx.local_addr().unwrap();
        for i in 0..n {
            tx.send_to(&(i as u32).to_be_bytes(), to).unwrap();
            assert!(read_one(rx, 0, &mut app), "fast datagram {i} lost");
        }
        app
    }

    /// Receiver that sleeps `sleep` between drains while `burst` datagrams
    /// wait in its queue; drains with recvmsg or recvmmsg.
    fn sleepy_phase(
        rx: &UdpSocket,
        tx: &UdpSocket,
        rounds: usize,
        burst: usize,
        sleep: Duration,
        mmsg: bool,
    ) -> AppDwell {
        let mut app = AppDwell::default();
        let to = rx.local_addr().unwrap();
        for _ in 0..rounds {
            for i in 0..burst {
                tx.send_to(&(i as u32).to_be_bytes(), to).unwrap();
            }
            sleep_exact(sleep);
            let mut got = 0;
            let mut tries = 0;
            while got < burst && tries < 1000 {
                tries += 1;
                if mmsg {
                    got += read_batch(rx, &mut app);
                } else if read_one(rx, libc::MSG_DONTWAIT, &mut app) {
                    got += 1;
                }
            }
            assert_eq!(got, burst, "datagrams lost on loopback");
        }
        app
    }

    fn buckets_of(v: &Value) -> Vec<u64> {
        v.as_array()
            .expect("buckets")
            .iter()
            .map(|b| b.as_u64().expect("bucket"))
            .collect()
    }

    fn http_get(addr: &str, path: &str) -> String {
        let mut s = TcpStream::connect(addr).expect("connect to --prometheus");
        write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    struct Case {
        name: &'static str,
        sock: UdpSocket,
        app: AppDwell,
    }

    #[test]
    fn tracer_agrees_with_so_timestampns_on_sleepy_receivers() {
        let _serial = serial();
        let fast = receiver();
        let slow = receiver();
        let batch = receiver();
        let ignored = receiver();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let ports: Vec<u16> = [&fast, &slow, &batch, &ignored]
            .iter()
            .map(|s| s.local_addr().unwrap().port())
            .collect();
        let lo = *ports.iter().min().unwrap();
        let hi = *ports.iter().max().unwrap();
        let range = format!("{lo}-{hi}");

        // Everything on our ports, read by us.
        let mut all = match start(&[
            "--ports",
            &range,
            "--interval",
            "200ms",
            "--json",
            "--prometheus",
            "127.0.0.1:0",
        ]) {
            Ok(t) => t,
            Err(reason) => return skip(&reason),
        };
        // Same ports, but only reads by another process (pid 1): nothing of
        // ours may show up.
        let mut other_pid = start(&[
            "--ports",
            &range,
            "--pid",
            "1",
            "--interval",
            "200ms",
            "--json",
        ])
        .expect("second tracer should load where the first did");

        let mut cases = vec![
            Case {
                name: "fast recvmsg",
                app: fast_phase(&fast, &tx, 200),
                sock: fast,
            },
            Case {
                name: "sleepy recvmsg 3 ms",
                app: sleepy_phase(&slow, &tx, 12, 10, Duration::from_millis(3), false),
                sock: slow,
            },
            Case {
                name: "sleepy recvmmsg 7+20 ms",
                app: {
                    let mut a = sleepy_phase(&batch, &tx, 6, 12, Duration::from_millis(7), true);
                    let b = sleepy_phase(&batch, &tx, 6, 12, Duration::from_millis(20), true);
                    a.count += b.count;
                    a.sum_ns += b.sum_ns;
                    for i in 0..NBUCKETS {
                        a.buckets[i] += b.buckets[i];
                    }
                    a
                },
                sock: batch,
            },
        ];
        // A socket that receives but is never read: queued, oldest age.
        let to = ignored.local_addr().unwrap();
        for _ in 0..5 {
            tx.send_to(b"x", to).unwrap();
        }
        thread::sleep(Duration::from_millis(500));

        let prom_addr = all
            .stderr
            .iter()
            .find_map(|l| l.split("http://").nth(1))
            .and_then(|r| r.strip_suffix("/metrics"))
            .map(str::to_string)
            .expect("tracer announces its Prometheus address");
        let prom = http_get(&prom_addr, "/metrics");

        all.stop();
        other_pid.stop();

        let mut report = String::from("corelay-dwell agreement with SO_TIMESTAMPNS:\n");
        for c in &mut cases {
            let port = c.sock.local_addr().unwrap().port();
            let s = all
                .last_for(port)
                .unwrap_or_else(|| panic!("{}: port {port} missing from tracer output", c.name));
            let total = &s["total"];
            let count = total["count"].as_u64().unwrap();
            let mean = total["mean_us"].as_f64().unwrap();
            let tb = buckets_of(&total["buckets"]);
            let diff_us = mean - c.app.mean_us();
            report.push_str(&format!(
                "  {:<24} n={:<4} tracer mean {:>9.1} us, receiver mean {:>9.1} us, \
                 diff {:>+7.1} us/packet\n    tracer   buckets {:?}\n    receiver buckets {:?}\n",
                c.name,
                count,
                mean,
                c.app.mean_us(),
                diff_us,
                tb,
                c.app.buckets
            ));
            assert_eq!(
                count, c.app.count,
                "{}: tracer counted {count} reads",
                c.name
            );
            assert_eq!(
                all.interval_count_sum(port),
                count,
                "{}: intervals add up to the total",
                c.name
            );
            assert_eq!(total["unknown"].as_u64(), Some(0), "{}", c.name);
            assert_eq!(total["unmatched"].as_u64(), Some(0), "{}", c.name);
            assert_eq!(
                s["pid"].as_u64(),
                Some(u64::from(std::process::id())),
                "{}",
                c.name
            );
            // Tens of microseconds per packet on average.
            assert!(
                diff_us.abs() < 50.0,
                "{}: tracer mean {mean:.1} us vs receiver {:.1} us",
                c.name,
                c.app.mean_us()
            );
            // Same histogram, but for packets within a few µs of an edge.
            let moved: u64 = tb
                .iter()
                .zip(c.app.buckets.iter())
                .map(|(a, b)| a.abs_diff(*b))
                .sum();
            assert!(
                moved <= 2 + count / 20,
                "{}: histograms differ by {moved}: tracer {tb:?} receiver {:?}",
                c.name,
                c.app.buckets
            );
            // Prometheus exposes the same cumulative count.
            let needle = format!("corelay_dwell_seconds_count{{port=\"{port}\"");
            let line = prom
                .lines()
                .find(|l| l.starts_with(&needle))
                .unwrap_or_else(|| panic!("{}: no {needle} in /metrics:\n{prom}", c.name));
            assert!(line.ends_with(&format!(" {count}")), "{line}");
        }

        // The buckets reflect the sleeps.
        let bk = |port: u16| buckets_of(&all.last_for(port).unwrap()["total"]["buckets"]);
        let fast_b = bk(cases[0].sock.local_addr().unwrap().port());
        let slow_b = bk(cases[1].sock.local_addr().unwrap().port());
        let batch_b = bk(cases[2].sock.local_addr().unwrap().port());
        // Fast reads: under 100 us apart from scheduling hiccups.
        assert!(fast_b[..3].iter().sum::<u64>() >= 180, "fast: {fast_b:?}");
        // 3 ms sleeps: 1-5 ms bucket (a loaded machine may oversleep).
        assert!(slow_b[5] + slow_b[6] >= 110, "slow: {slow_b:?}");
        assert!(slow_b[5] >= 90, "slow: {slow_b:?}");
        assert_eq!(slow_b[..5].iter().sum::<u64>(), 0, "slow: {slow_b:?}");
        // 7 ms then 20 ms sleeps: 5-10 ms and 10-50 ms buckets.
        assert_eq!(batch_b[..6].iter().sum::<u64>(), 0, "batch: {batch_b:?}");
        assert!(batch_b[6] >= 60, "batch: {batch_b:?}");
        assert!(batch_b[7] >= 72, "batch: {batch_b:?}");

        // The unread socket: 5 queued, oldest about 0.5 s old, no reads.
        let ig = all
            .last_for(to.port())
            .expect("unread socket shows up (queued datagrams)");
        assert_eq!(ig["queued"].as_u64(), Some(5), "{ig}");
        assert_eq!(ig["total"]["count"].as_u64(), Some(0), "{ig}");
        let age = ig["oldest_queued_age_us"].as_f64().expect("oldest age");
        assert!(age > 300_000.0, "{ig}");

        // The pid filter: none of our reads were counted.
        for c in &cases {
            let port = c.sock.local_addr().unwrap().port();
            let counted = other_pid
                .last_for(port)
                .and_then(|s| s["total"]["count"].as_u64())
                .unwrap_or(0);
            assert_eq!(counted, 0, "--pid 1 counted reads of {}", c.name);
        }
        say(&report);
    }

    /// A sender thread floods a receiver whose queue is small, so the kernel
    /// drops datagrams while enqueues and reads race on two CPUs. The FIFO
    /// must stay in step with the real queue: every read is matched, and the
    /// mean still agrees with SO_TIMESTAMPNS.
    #[test]
    fn concurrent_flood_with_drops_stays_in_sync() {
        let _serial = serial();
        let rx = receiver();
        let small: libc::c_int = 65536;
        // SAFETY: setsockopt with a valid int option on our socket.
        unsafe {
            libc::setsockopt(
                rx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&small as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        let to = rx.local_addr().unwrap();
        let port = to.port().to_string();
        let mut tracer = match start(&["--ports", &port, "--interval", "200ms", "--json"]) {
            Ok(t) => t,
            Err(reason) => return skip(&reason),
        };
        const SENT: usize = 20_000;
        let sender = thread::spawn(move || {
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let payload = [7u8; 200];
            for i in 0..SENT {
                let _ = tx.send_to(&payload, to);
                if i % 64 == 63 {
                    thread::sleep(Duration::from_micros(300));
                }
            }
        });
        let mut app = AppDwell::default();
        let mut idle_since: Option<Instant> = None;
        let mut batches = 0u64;
        loop {
            let n = read_batch(&rx, &mut app);
            if n > 0 {
                idle_since = None;
                batches += 1;
                // A slow consumer now and then: the queue fills and drops.
                if batches.is_multiple_of(16) {
                    thread::sleep(Duration::from_millis(2));
                }
            } else {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if sender.is_finished() && since.elapsed() > Duration::from_millis(100) {
                    break;
                }
                thread::sleep(Duration::from_micros(100));
            }
        }
        sender.join().unwrap();
        thread::sleep(Duration::from_millis(300));
        tracer.stop();

        let s = tracer
            .last_for(to.port())
            .expect("flooded socket in tracer output");
        let t = &s["total"];
        let count = t["count"].as_u64().unwrap();
        let unknown = t["unknown"].as_u64().unwrap() + t["unmatched"].as_u64().unwrap();
        let mean = t["mean_us"].as_f64().unwrap();
        let dropped = SENT as u64 - app.count;
        say(&format!(
            "corelay-dwell flood: sent {SENT}, read {}, dropped by the kernel {dropped}; \
             tracer matched {count}, unmatched {} unknown {}, trimmed {}; \
             tracer mean {mean:.1} us, receiver mean {:.1} us, diff {:+.1} us/packet",
            app.count,
            t["unmatched"],
            t["unknown"],
            t["trimmed"],
            app.mean_us(),
            mean - app.mean_us()
        ));
        // On a mismatch the tracer's own counters tell where a read went:
        // `reads` below the receiver's count, the tracepoint never ran for
        // it; equal, it was lost after (`fifo_fail`, `stats_full`).
        assert_eq!(
            count + unknown,
            app.count,
            "every read is seen once; tracer counters {}",
            tracer.events_total().unwrap_or(&Value::Null)
        );
        assert!(unknown <= app.count / 100, "{unknown} reads unmatched");
        assert!(
            (mean - app.mean_us()).abs() < 50.0,
            "tracer mean {mean:.1} us vs receiver {:.1} us",
            app.mean_us()
        );
    }

    /// More separately queued datagrams than the FIFO has runs (512): the
    /// newest are folded into one run at their mean time, and the mean dwell
    /// must still agree with SO_TIMESTAMPNS.
    #[test]
    fn deep_queue_beyond_fifo_runs_keeps_the_mean() {
        let _serial = serial();
        let rx = receiver();
        let big: libc::c_int = 8 << 20;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: setsockopt with a valid int option on our socket.
            let rc = unsafe {
                libc::setsockopt(
                    rx.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&big as *const libc::c_int).cast(),
                    mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
        let to = rx.local_addr().unwrap();
        let port = to.port().to_string();
        let mut tracer = match start(&["--ports", &port, "--interval", "200ms", "--json"]) {
            Ok(t) => t,
            Err(reason) => return skip(&reason),
        };
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        const N: usize = 1500;
        for i in 0..N {
            tx.send_to(&(i as u32).to_be_bytes(), to).unwrap();
            sleep_exact(Duration::from_micros(5));
        }
        sleep_exact(Duration::from_millis(5));
        let mut app = AppDwell::default();
        while (app.count as usize) < N {
            assert!(
                read_batch(&rx, &mut app) > 0,
                "datagrams lost: read {}",
                app.count
            );
        }
        thread::sleep(Duration::from_millis(300));
        tracer.stop();
        let t = &tracer.last_for(to.port()).expect("socket in output")["total"];
        let count = t["count"].as_u64().unwrap();
        let folded = t["overflow"].as_u64().unwrap();
        let mean = t["mean_us"].as_f64().unwrap();
        say(&format!(
            "corelay-dwell deep queue: {N} datagrams queued one by one, {folded} folded into the \
             last FIFO run; tracer mean {mean:.1} us, receiver mean {:.1} us, diff {:+.1} us/packet",
            app.mean_us(),
            mean - app.mean_us()
        ));
        assert_eq!(count, N as u64);
        assert!(folded > 0 && folded < N as u64, "folded {folded}");
        assert!(
            (mean - app.mean_us()).abs() < 50.0,
            "tracer mean {mean:.1} us vs receiver {:.1} us",
            app.mean_us()
        );
    }

    #[test]
    fn prometheus_bind_failure_is_a_clear_error() {
        let _serial = serial();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let out = Command::new(bin())
            .args(["--ports", "9", "--duration", "1s", "--prometheus", &addr])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(corelay_dwell::EXIT_BPF_UNAVAILABLE.into()) {
            return skip(&err);
        }
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("cannot listen"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }

    #[test]
    fn table_output_and_duration_stop() {
        let _serial = serial();
        let out = Command::new(bin())
            .args(["--ports", "9", "--interval", "300ms", "--duration", "1s"])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(corelay_dwell::EXIT_BPF_UNAVAILABLE.into()) {
            return skip(&err);
        }
        assert!(out.status.success(), "{err}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.matches("PORT").count() >= 3, "{text}");
        assert!(text.contains("no traced socket was read"), "{text}");
    }
}

//! Why the DTLS sessions are made on the shards (see `Session`): two
//! threads on one core under SCHED_RR, one a priority above the other (as a
//! shard rises above corelay's control thread), both making OpenSSL
//! contexts. OpenSSL's global locks are glibc rwlocks, whose writers spin
//! while another writer holds the lock but has not yet said so; when the
//! higher thread preempts the lower one in that window it spins for good.
//!
//! Run (root, or CAP_SYS_NICE): `cargo run --release -p corelay-dtls
//! --example rt_inversion` (it pins itself to CPU 0). It prints both
//! threads' counts each second and exits 3 at the first second in which
//! neither made progress; 0 after 20 s without. On a 2-vCPU host it wedged
//! within 1 to 3 s in every try; `perf top` then shows the higher thread at
//! 100 % in `pthread_rwlock_wrlock`, as in the corelay shard that wedged.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use openssl::ssl::{SslContextBuilder, SslMethod};

static LOW: AtomicU64 = AtomicU64::new(0);
static HIGH: AtomicU64 = AtomicU64::new(0);

/// SCHED_RR at `priority` for the calling thread; false if refused.
fn real_time(priority: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: reads one sched_param we own; changes the calling thread only.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) == 0 }
}

fn make_contexts(priority: i32, pause: Option<Duration>, count: &'static AtomicU64) {
    if !corelay_thread::pin_to_cpu(0) || !real_time(priority) {
        eprintln!("SKIPPED: cannot pin to CPU 0 or take SCHED_RR (needs CAP_SYS_NICE)");
        std::process::exit(0);
    }
    loop {
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
        let _ = SslContextBuilder::new(SslMethod::dtls()).map(|b| b.build());
        count.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() {
    // The control thread: busy making contexts (a join each, before).
    std::thread::spawn(|| make_contexts(10, None, &LOW));
    // The shard: woken every 50 µs (a datagram), then OpenSSL work.
    std::thread::spawn(|| make_contexts(11, Some(Duration::from_micros(50)), &HIGH));
    let start = Instant::now();
    let (mut low, mut high) = (0, 0);
    while start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_secs(1));
        let (l, h) = (LOW.load(Ordering::Relaxed), HIGH.load(Ordering::Relaxed));
        println!(
            "{:>5.1} s  lower {l:>7} (+{})  higher {h:>7} (+{})",
            start.elapsed().as_secs_f64(),
            l - low,
            h - high
        );
        if l == low && h == high {
            println!("wedged: neither thread made progress for a second");
            std::process::exit(3);
        }
        (low, high) = (l, h);
    }
    println!("no wedge in 20 s");
}

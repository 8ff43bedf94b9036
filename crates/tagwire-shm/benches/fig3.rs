//! DSI Figure 3 reproduction: time to transfer one packet (produce + consume),
//! 4 KiB … 1 MiB, in four modes:
//! - `static`: statically mapped shared memory, well synchronised (one thread
//!   loans, publishes, consumes, releases: no system call);
//! - `blocking`: producer and consumer threads on a one-slot ring with
//!   `Overload::Block`, so both sides sleep on the futex for every packet;
//! - `reclaim`: every packet's memory is returned to the OS after it is
//!   consumed (`Producer::retract` frees its chunk, `Region::trim_free_chunks`
//!   punches it out: DSI's memory flush) and the next packet's pages fault
//!   in again as it is written (DSI's dynamic mapping);
//! - `2-thread static`: producer and consumer threads, the consumer busy-polling
//!   a 16-slot ring (`Block`, so nothing is lost; futex waits counted);
//! - `copy`: the packet is copied into the data area (`publish_copy`), the
//!   copying transfer DSI measured for comparison.
//!
//! Run: `cargo bench -p tagwire-shm --bench fig3` (pin with `taskset -c 0` for
//! single-core costs). Prints a Markdown table; `FIG3_QUICK=1` shortens it.
//! Times are wall clock (and TSC cycles); on a shared machine they include
//! the time the thread waited for a CPU, so the lines under the table also
//! give the static mode's CPU time per packet (`CLOCK_THREAD_CPUTIME_ID`).

use std::time::{Duration, Instant};

use tagwire_shm::{
    Consumer, ConsumerConfig, Overload, ProducerConfig, Stream, StreamConfig, NO_DEADLINE,
};

use tagwire_shm::cycle_counter as cycles;

const SIZES: [usize; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];

struct Measure {
    ns: f64,
    cycles: f64,
    /// This thread's CPU time per packet: on a loaded machine the wall clock
    /// (and the TSC) also count the time it waited for a CPU.
    cpu_ns: f64,
}

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn measure(n: u64, mut f: impl FnMut(u64)) -> Measure {
    for k in 0..n / 10 + 1 {
        f(k); // warm-up
    }
    let (t0, c0, cpu0) = (Instant::now(), cycles(), thread_cpu_ns());
    for k in 0..n {
        f(k);
    }
    let (cpu1, c1, dt) = (thread_cpu_ns(), cycles(), t0.elapsed());
    Measure {
        ns: dt.as_nanos() as f64 / n as f64,
        cycles: (c1 - c0) as f64 / n as f64,
        cpu_ns: (cpu1 - cpu0) as f64 / n as f64,
    }
}

fn stream(size: usize, slots: u32, producer: ProducerConfig) -> (tagwire_shm::Producer, Consumer) {
    let (p, fd) = Stream::create(StreamConfig {
        slots,
        consumers_max: 1,
        max_packet: size as u64,
        producer,
        ..StreamConfig::default()
    })
    .expect("bench stream");
    (
        p,
        Consumer::attach(fd, ConsumerConfig::default()).expect("bench consumer"),
    )
}

fn static_mode(size: usize, n: u64) -> Measure {
    let (mut p, mut c) = stream(size, 16, ProducerConfig::default());
    measure(n, |k| {
        let mut loan = p.loan(size, 0).expect("loan");
        loan[0] = k as u8;
        loan.publish(k, NO_DEADLINE);
        let s = c.next(0).expect("sample");
        std::hint::black_box(s[0]);
    })
}

fn copy_mode(size: usize, n: u64) -> Measure {
    let (mut p, mut c) = stream(size, 16, ProducerConfig::default());
    let src = vec![0x5au8; size];
    measure(n, |k| {
        p.publish_copy(&src, k, NO_DEADLINE, 0)
            .expect("publish_copy");
        let s = c.next(0).expect("sample");
        std::hint::black_box(s[size - 1]);
    })
}

fn reclaim_mode(size: usize, n: u64) -> Measure {
    let (mut p, mut c) = stream(size, 1, ProducerConfig::default());
    let region = p.region();
    measure(n, |k| {
        let mut loan = p.loan(size, 0).expect("loan");
        // Fault the packet's pages in (one write per page), as a remapped buffer must.
        for b in loan.iter_mut().step_by(4096) {
            *b = k as u8;
        }
        let seq = loan.publish(k, NO_DEADLINE);
        let s = c.next(0).expect("sample");
        std::hint::black_box(s[0]);
        drop(s);
        // The consumed packet's slot would keep its chunk for the next loan:
        // take the packet back so its chunk is free, and return it to the OS.
        p.retract(seq);
        region.trim_free_chunks().expect("trim");
    })
}

fn blocking_mode(size: usize, n: u64) -> (Measure, u64, u64) {
    let cfg = ProducerConfig {
        overload: Overload::Block,
        block_timeout: Duration::from_secs(30),
        ..ProducerConfig::default()
    };
    let (mut p, mut c) = stream(size, 1, cfg);
    let total = n + n / 10 + 1;
    let reader = std::thread::spawn(move || {
        for _ in 0..total {
            let s = c
                .next_blocking(Duration::from_secs(30), || 0)
                .expect("blocking sample");
            std::hint::black_box(s[0]);
        }
        c.stats().futex_waits
    });
    let m = measure(n, |k| {
        let mut loan = p.loan(size, 0).expect("blocking loan");
        loan[0] = k as u8;
        loan.publish(k, NO_DEADLINE);
    });
    let consumer_waits = reader.join().expect("reader thread");
    (m, p.stats().futex_waits, consumer_waits)
}

/// Producer and consumer threads, the consumer busy-polling a 16-slot ring
/// (well synchronised across cores when two CPUs are available).
fn static_threads(size: usize, n: u64) -> (Measure, u64) {
    let cfg = ProducerConfig {
        overload: Overload::Block,
        block_timeout: Duration::from_secs(30),
        ..ProducerConfig::default()
    };
    let (mut p, mut c) = stream(size, 16, cfg);
    let total = n + n / 10 + 1;
    let reader = std::thread::spawn(move || {
        let mut got = 0;
        while got < total {
            if let Ok(s) = c.next(0) {
                std::hint::black_box(s[0]);
                got += 1;
            } else {
                std::hint::spin_loop();
            }
        }
    });
    let m = measure(n, |k| {
        let mut loan = p.loan(size, 0).expect("loan");
        loan[0] = k as u8;
        loan.publish(k, NO_DEADLINE);
    });
    reader.join().expect("reader thread");
    (m, p.stats().futex_waits)
}

fn main() {
    let quick = std::env::var_os("FIG3_QUICK").is_some();
    let scale = if quick { 10 } else { 1 };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("DSI Figure 3: time per packet (produce + consume), {cpus} CPU(s) available to this process");
    println!();
    println!("| size | static ns | static cycles | 2-thread static ns | blocking ns | blocking cycles | reclaim ns | reclaim cycles | copy ns | copy cycles | copy / static |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut waits = Vec::new();
    for size in SIZES {
        let st = static_mode(size, 2_000_000 / scale);
        // Busy-polling two threads on one CPU only measures the scheduler: skipped when pinned.
        let (xs, xw) = if cpus >= 2 {
            static_threads(size, 1_000_000 / scale)
        } else {
            (
                Measure {
                    ns: f64::NAN,
                    cycles: f64::NAN,
                    cpu_ns: f64::NAN,
                },
                0,
            )
        };
        let (bl, pw, cw) = blocking_mode(size, 20_000 / scale);
        let rc = reclaim_mode(size, (4_000_000 / size as u64).clamp(200, 20_000) / scale);
        let cp = copy_mode(
            size,
            (400_000_000 / size as u64).clamp(1_000, 200_000) / scale,
        );
        println!(
            "| {} KiB | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0}x |",
            size >> 10,
            st.ns,
            st.cycles,
            xs.ns,
            bl.ns,
            bl.cycles,
            rc.ns,
            rc.cycles,
            cp.ns,
            cp.cycles,
            cp.ns / st.ns
        );
        waits.push((size, pw, cw, xw, st.cpu_ns));
    }
    println!();
    for (size, pw, cw, xw, cpu) in waits {
        println!(
            "{} KiB: static: {cpu:.0} ns CPU time per packet; blocking: producer futex waits {pw}, consumer {cw}; 2-thread static: producer futex waits {xw}",
            size >> 10
        );
    }
}

//! The pin ledger: a packet pinned in a `PinRow` keeps its chunk (its bytes)
//! while the producer laps the ring; pins handed over to a `PinHolder` (in
//! this process or a child process) are given back when dropped, or when the
//! row is dropped (a holder that crashed); rows are bounded; a late unpin of
//! an old generation changes nothing. Chunk reference counts are read from
//! the memfd itself (the chunk table in `Layout`), so the tests check the
//! ledger's effect on the allocator, not only its own counters.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use proptest::prelude::*;
use tagwire_shm::{
    Consumer, ConsumerConfig, Error, Pin, PinHolder, PinRow, Producer, ProducerConfig, Region,
    RegionConfig, NO_DEADLINE,
};

const ROLE: &str = "TAGWIRE_SHM_CHILD";
const CHUNK_BYTES: u64 = 64;

/// One drop-oldest stream in a region of `chunks` chunks of 64 bytes;
/// `consumers_max` is also the number of pin rows.
fn setup(slots: u32, consumers_max: u32, chunks: u32) -> (Region, Producer, Consumer) {
    let region = Region::create(RegionConfig {
        streams: 1,
        slots,
        consumers_max,
        chunks,
        chunk_bytes: CHUNK_BYTES,
        reserve: false,
        ..RegionConfig::default()
    })
    .expect("region");
    let p = region
        .producer(0, ProducerConfig::default())
        .expect("producer");
    let c = region
        .consumer(0, ConsumerConfig::default())
        .expect("consumer");
    (region, p, c)
}

/// A payload that differs for every sequence number (length too).
fn payload(seq: u64) -> Vec<u8> {
    let len = 16 + (seq % 40) as usize;
    let mut v: Vec<u8> = (0..len)
        .map(|k| (seq as u8).wrapping_mul(37) ^ (k as u8).wrapping_mul(11) ^ 0x5a)
        .collect();
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v
}

fn publish(p: &mut Producer) -> Result<u64, Error> {
    let seq = p.head();
    let r = p.publish_copy(&payload(seq), seq, NO_DEADLINE, 0);
    if let Ok(s) = r {
        assert_eq!(s, seq);
    }
    r
}

/// Reads packet `seq` (checking its bytes) and pins it in `row`; the sample
/// (and its hazard) is gone when this returns, so only the pin protects it.
fn pin_seq(c: &mut Consumer, seq: u64, row: &PinRow) -> Pin {
    let s = c.read_at(seq, 0).expect("read_at a packet in the ring");
    assert_eq!(&*s, &payload(seq)[..], "packet {seq} as published");
    s.pin_to(row).expect("pin")
}

/// Reads the memfd through the file (not the mapping): the shared page cache.
struct Peek {
    file: File,
    region: Region,
}

impl Peek {
    fn new(region: &Region) -> Self {
        let fd: OwnedFd = region.fd().try_clone_to_owned().expect("dup");
        Self {
            file: File::from(fd),
            region: region.clone(),
        }
    }

    fn u64_at(&self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, off).expect("pread");
        u64::from_le_bytes(b)
    }

    /// Chunk `c`'s reference count (descriptors + loan + pins).
    fn refs(&self, c: u32) -> u32 {
        let mut b = [0u8; 4];
        let off = self.region.layout().chunk_table + 64 * c as u64;
        self.file.read_exact_at(&mut b, off).expect("pread");
        u32::from_le_bytes(b)
    }

    fn all_refs(&self) -> Vec<u32> {
        (0..self.region.layout().geometry.chunks)
            .map(|c| self.refs(c))
            .collect()
    }

    /// The chunk stream 0's descriptor of published packet `seq` points at.
    fn chunk_of(&self, seq: u64) -> u32 {
        let l = self.region.layout();
        let slot = (seq % l.geometry.slots as u64) as u32;
        let off = l.slot_offset(0, slot);
        let stamp = self.u64_at(off);
        assert_eq!(stamp >> 8, seq, "descriptor of packet {seq}");
        (self.u64_at(off + 8) / l.geometry.chunk_bytes) as u32
    }
}

// --- child processes (the test binary re-run with TAGWIRE_SHM_CHILD) ---

fn spawn_child(test: &str, role: &str, env: &[(&str, String)]) -> (Child, ChildStdout) {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn child");
    let out = child.stdout.take().expect("child stdout");
    (child, out)
}

/// The child's next "SHM <text>" line (libtest may print "test NAME ... " before it).
fn next_report(lines: &mut impl Iterator<Item = String>) -> String {
    lines
        .take(100)
        .find_map(|l| l.split_once("SHM ").map(|(_, rest)| rest.trim().to_owned()))
        .expect("child reports its state")
}

fn fd_path(region: &Region) -> String {
    format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        region.fd().as_raw_fd()
    )
}

fn child_region() -> Region {
    let path = std::env::var("SHM_FD_PATH").expect("SHM_FD_PATH");
    let f: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open the parent's memfd")
        .into();
    Region::attach(f).expect("attach")
}

fn env_u64(k: &str) -> u64 {
    std::env::var(k)
        .expect("child env")
        .parse()
        .expect("child env number")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn child_role() -> Option<String> {
    std::env::var(ROLE).ok()
}

// --- 1 ---

#[test]
fn pinned_bytes_stay_intact_and_its_chunk_is_never_loaned_while_the_ring_is_lapped() {
    let (slots, chunks) = (4, 4 + 3);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let peek = Peek::new(&region);
    let row = region.pin_row().expect("row");
    let scratch = region.pin_row().expect("scratch row");
    // A consumer that never reads: the producer laps it, dropping the oldest.
    let _idle = region
        .consumer(0, ConsumerConfig::default())
        .expect("idle consumer");
    let first = publish(&mut p).expect("publish");
    let pin = pin_seq(&mut c, first, &row);
    let pinned = pin.chunk();
    assert_eq!(peek.chunk_of(first), pinned);
    assert_eq!(peek.refs(pinned), 2, "the descriptor and the pin");
    for _ in 0..10 * slots {
        let seq = publish(&mut p).expect("a pin of one chunk leaves enough free chunks");
        // Which chunk did the loan get? The descriptor names it; a pin of the
        // new packet must name the same one and read its new bytes.
        let loaned = peek.chunk_of(seq);
        assert_ne!(
            loaned, pinned,
            "packet {seq} was written into the pinned chunk"
        );
        let other = pin_seq(&mut c, seq, &scratch);
        assert_eq!(other.chunk(), loaned);
        drop(other);
        assert_eq!(&*pin, &payload(first)[..], "after publishing {seq}");
    }
    assert_eq!(p.stats().counts.published, 1 + 10 * slots as u64);
    assert!(
        p.stats().counts.dropped >= 9 * slots as u64,
        "the idle consumer was lapped (DropOldest): {:?}",
        p.stats()
    );
    assert!(matches!(c.read_at(first, 0), Err(Error::Expired { .. })));
    assert_eq!(peek.refs(pinned), 1, "only the pin holds it now");
    assert_eq!(row.held(), 1);
    assert_eq!(scratch.held(), 0);

    // Control: without the pin the chunk goes back to the allocator (so the
    // loop above could have caught a pin that protects nothing). With the
    // ring's packets pinned, a loan cannot keep its slot's own chunk and
    // takes a free one, until none is left.
    drop(pin);
    assert_eq!(row.held(), 0);
    assert_eq!(peek.refs(pinned), 0);
    let head = p.head();
    let mut held: Vec<Pin> = (head - slots as u64..head)
        .map(|s| pin_seq(&mut c, s, &scratch))
        .collect();
    let mut loaned = Vec::new();
    loop {
        match publish(&mut p) {
            Ok(s) => {
                loaned.push(peek.chunk_of(s));
                held.push(pin_seq(&mut c, s, &scratch));
            }
            Err(Error::OutOfChunks) => break,
            Err(e) => panic!("publish: {e}"),
        }
        assert!(loaned.len() <= chunks as usize, "more loans than chunks");
    }
    assert!(
        loaned.contains(&pinned),
        "a freed chunk goes back to the allocator: {loaned:?}"
    );
    assert_eq!(held.len(), chunks as usize, "no chunk is lost");
}

// --- 2 ---

#[test]
fn a_pin_handed_over_and_adopted_in_this_process_reads_the_packet_and_gives_it_back_on_drop() {
    let (slots, chunks) = (3, 3 + 2);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let peek = Peek::new(&region);
    let row = region.pin_row().expect("row");
    let seq = publish(&mut p).expect("publish");
    let pin = pin_seq(&mut c, seq, &row);
    let len = pin.len() as u64;
    let chunk = pin.hand_over();
    assert_eq!(row.held(), 1, "a handed-over pin stays recorded");
    for _ in 0..4 * slots {
        publish(&mut p).expect("publish");
    }
    assert_eq!(peek.refs(chunk), 1, "the handed-over pin holds the chunk");

    let holder = region.pin_holder(row.ticket()).expect("holder");
    let adopted = holder.adopt(chunk, len).expect("adopt");
    assert_eq!(&*adopted, &payload(seq)[..]);
    assert_eq!(row.held(), 1, "adopting takes over the pin, adds none");
    drop(adopted);
    assert_eq!(row.held(), 0);
    assert_eq!(peek.refs(chunk), 0);

    // Every chunk is usable again: with every packet pinned, exactly `chunks`
    // packets fit before the allocator runs out.
    let mut pins = Vec::new();
    loop {
        match publish(&mut p) {
            Ok(s) => pins.push(pin_seq(&mut c, s, &row)),
            Err(Error::OutOfChunks) => break,
            Err(e) => panic!("publish: {e}"),
        }
        assert!(pins.len() <= chunks as usize, "more pins than chunks");
    }
    assert_eq!(pins.len(), chunks as usize);
}

#[test]
fn a_pin_adopted_by_a_child_process_reads_the_packet_and_its_drop_gives_the_chunk_back() {
    const TEST: &str =
        "a_pin_adopted_by_a_child_process_reads_the_packet_and_its_drop_gives_the_chunk_back";
    if child_role().as_deref() == Some("adopt-read-drop") {
        let region = child_region();
        let holder = region
            .pin_holder(env_u64("SHM_TICKET") as u32)
            .expect("holder");
        let pin = holder
            .adopt(env_u64("SHM_CHUNK") as u32, env_u64("SHM_LEN"))
            .expect("adopt");
        println!("SHM read {}", hex(&pin));
        drop(pin);
        println!("SHM dropped");
        return;
    }
    let (slots, chunks) = (3, 3 + 2);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let peek = Peek::new(&region);
    let row = region.pin_row().expect("row");
    let seq = publish(&mut p).expect("publish");
    let pin = pin_seq(&mut c, seq, &row);
    let len = pin.len();
    let chunk = pin.hand_over();
    for _ in 0..4 * slots {
        publish(&mut p).expect("publish");
    }
    assert_eq!(peek.refs(chunk), 1);
    let (mut child, out) = spawn_child(
        TEST,
        "adopt-read-drop",
        &[
            ("SHM_FD_PATH", fd_path(&region)),
            ("SHM_TICKET", row.ticket().to_string()),
            ("SHM_CHUNK", chunk.to_string()),
            ("SHM_LEN", len.to_string()),
        ],
    );
    let mut lines = BufReader::new(out).lines().map_while(Result::ok);
    assert_eq!(
        next_report(&mut lines),
        format!("read {}", hex(&payload(seq)))
    );
    assert_eq!(next_report(&mut lines), "dropped");
    assert!(child.wait().expect("wait").success());
    assert_eq!(row.held(), 0, "the child gave its pin back");
    assert_eq!(peek.refs(chunk), 0);
    assert!(!row.holder_alive());
    // Every chunk is usable again, the given-back one included: with the
    // ring's packets pinned, each loan takes a free chunk (not its slot's
    // own one) until none is left.
    let head = p.head();
    let mut held: Vec<Pin> = (head - slots as u64..head)
        .map(|s| pin_seq(&mut c, s, &row))
        .collect();
    let mut seen = std::collections::HashSet::new();
    loop {
        match publish(&mut p) {
            Ok(s) => {
                seen.insert(peek.chunk_of(s));
                held.push(pin_seq(&mut c, s, &row));
            }
            Err(Error::OutOfChunks) => break,
            Err(e) => panic!("publish: {e}"),
        }
        assert!(held.len() <= chunks as usize, "more pins than chunks");
    }
    assert!(
        seen.contains(&chunk),
        "the given-back chunk is loaned again"
    );
    assert_eq!(held.len(), chunks as usize, "no chunk is lost");
}

// --- 3 ---

#[test]
fn held_counts_the_pins_of_a_row_and_a_chunk_pinned_in_two_rows_needs_both_given_back() {
    let (slots, chunks) = (2, 2 + 4);
    let (region, mut p, mut c) = setup(slots, 3, chunks);
    let peek = Peek::new(&region);
    let (a, b) = (
        region.pin_row().expect("row a"),
        region.pin_row().expect("row b"),
    );
    assert_ne!(a.ticket(), b.ticket());
    assert_eq!((a.held(), b.held()), (0, 0));
    let s0 = publish(&mut p).expect("publish");
    let s1 = publish(&mut p).expect("publish");
    let a0 = pin_seq(&mut c, s0, &a);
    let a0_again = a0.pin_to(&a).expect("same chunk twice in one row");
    let a1 = pin_seq(&mut c, s1, &a);
    let b0 = a0.pin_to(&b).expect("pin in the second row");
    assert_eq!(b0.chunk(), a0.chunk());
    assert_eq!(&*b0, &payload(s0)[..]);
    assert_eq!((a.held(), b.held()), (3, 1));
    let ch = a0.chunk();
    assert_eq!(
        peek.refs(ch),
        1 + 3,
        "descriptor + two pins in a + one in b"
    );

    for _ in 0..3 * slots {
        publish(&mut p).expect("publish");
    }
    assert_eq!(
        peek.refs(ch),
        3,
        "the packet left the ring; the pins remain"
    );
    drop(a0);
    drop(a0_again);
    assert_eq!((a.held(), b.held()), (1, 1));
    assert_eq!(peek.refs(ch), 1, "row b still holds it");
    // Lap the ring: the chunk pinned only in row b is still never loaned.
    for _ in 0..3 * chunks {
        let s = publish(&mut p).expect("publish");
        assert_ne!(peek.chunk_of(s), ch, "row b's pin was ignored");
        assert_eq!(&*b0, &payload(s0)[..]);
    }
    drop(b0);
    assert_eq!(b.held(), 0);
    assert_eq!(peek.refs(ch), 0, "both rows gave it back");
    assert_eq!(&*a1, &payload(s1)[..]);
    drop(a1);
    assert_eq!(a.held(), 0);
}

// --- 4 ---

#[test]
fn dropping_a_row_gives_back_pins_a_crashed_holder_never_gave_back() {
    const TEST: &str = "dropping_a_row_gives_back_pins_a_crashed_holder_never_gave_back";
    if child_role().as_deref() == Some("adopt-and-crash") {
        let region = child_region();
        let holder = region
            .pin_holder(env_u64("SHM_TICKET") as u32)
            .expect("holder");
        let chunks: Vec<u32> = std::env::var("SHM_CHUNKS")
            .expect("chunks")
            .split(',')
            .map(|s| s.parse().expect("chunk"))
            .collect();
        let pins: Vec<Pin> = chunks
            .iter()
            .map(|&ch| holder.adopt(ch, 8).expect("adopt"))
            .collect();
        println!("SHM adopted {}", pins.len());
        // Bounded: the parent kills us long before this ends.
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
    let (slots, chunks) = (2, 2 + 3);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let peek = Peek::new(&region);
    let row = region.pin_row().expect("row");
    // Pin and hand over every packet until no chunk is left.
    let mut handed = Vec::new();
    loop {
        match publish(&mut p) {
            Ok(s) => handed.push(pin_seq(&mut c, s, &row).hand_over()),
            Err(Error::OutOfChunks) => break,
            Err(e) => panic!("publish: {e}"),
        }
        assert!(handed.len() <= chunks as usize);
    }
    assert_eq!(handed.len(), chunks as usize);
    assert_eq!(row.held(), chunks);
    let list = handed
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let (mut child, out) = spawn_child(
        TEST,
        "adopt-and-crash",
        &[
            ("SHM_FD_PATH", fd_path(&region)),
            ("SHM_TICKET", row.ticket().to_string()),
            ("SHM_CHUNKS", list),
        ],
    );
    let mut lines = BufReader::new(out).lines().map_while(Result::ok);
    assert_eq!(next_report(&mut lines), format!("adopted {chunks}"));
    assert!(row.holder_alive());
    child.kill().expect("kill");
    child.wait().expect("wait");
    assert!(!row.holder_alive());
    assert_eq!(row.held(), chunks, "a killed holder gives nothing back");
    assert!(matches!(publish(&mut p), Err(Error::OutOfChunks)));
    drop(row);
    // Only the ring's descriptors hold chunks now.
    let refs = peek.all_refs();
    assert_eq!(refs.iter().sum::<u32>(), slots, "{refs:?}");
    assert!(refs.iter().all(|&r| r <= 1), "{refs:?}");
    // The producer can use every chunk again.
    let row = region.pin_row().expect("the row is free again");
    let mut pins = Vec::new();
    loop {
        match publish(&mut p) {
            Ok(s) => pins.push(pin_seq(&mut c, s, &row)),
            Err(Error::OutOfChunks) => break,
            Err(e) => panic!("publish: {e}"),
        }
        assert!(pins.len() <= chunks as usize);
    }
    assert_eq!(pins.len(), chunks as usize);
}

#[test]
fn a_late_drop_of_an_adopted_pin_of_an_old_generation_leaves_the_new_row_alone() {
    let (slots, chunks) = (4, 4 + 2);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let peek = Peek::new(&region);
    let seq = publish(&mut p).expect("publish");
    let row = region.pin_row().expect("row");
    let old_ticket = row.ticket();
    let pin = pin_seq(&mut c, seq, &row);
    let len = pin.len() as u64;
    let chunk = pin.hand_over();
    let old_holder = region.pin_holder(old_ticket).expect("holder");
    let late = old_holder.adopt(chunk, len).expect("adopt");
    assert_eq!(peek.refs(chunk), 2);
    drop(row);
    assert_eq!(peek.refs(chunk), 1, "the row's pin was given back");

    let row = region.pin_row().expect("re-take the row");
    assert_eq!(row.ticket() >> 16, old_ticket >> 16, "the same row");
    assert_ne!(row.ticket(), old_ticket, "a new generation");
    // The same chunk (the packet is still in the ring) pinned in the new row.
    let new = pin_seq(&mut c, seq, &row);
    assert_eq!(new.chunk(), chunk);
    assert_eq!(row.held(), 1);
    assert_eq!(peek.refs(chunk), 2);

    drop(late);
    assert_eq!(row.held(), 1, "the old generation's unpin is a no-op");
    assert_eq!(peek.refs(chunk), 2);
    // The old holder can adopt nothing in the new generation either.
    assert!(matches!(
        old_holder.adopt(chunk, len),
        Err(Error::Unavailable { .. })
    ));
    drop(new);
    assert_eq!(row.held(), 0);
    assert_eq!(peek.refs(chunk), 1, "the descriptor only");
}

#[test]
fn a_row_dropped_with_pins_alive_in_this_process_lives_until_the_last_one_drops() {
    let (region, mut p, mut c) = setup(2, 1, 2 + 2);
    let peek = Peek::new(&region);
    let row = region.pin_row().expect("row");
    let seq = publish(&mut p).expect("publish");
    let pin = pin_seq(&mut c, seq, &row);
    let handed = pin_seq(&mut c, seq, &row).hand_over();
    let ticket = row.ticket();
    drop(row);
    assert_eq!(peek.refs(handed), 3, "descriptor + live pin + handed over");
    assert!(
        matches!(region.pin_row(), Err(Error::Unavailable { .. })),
        "the only row is still in use"
    );
    assert!(
        region.pin_holder(ticket).is_ok(),
        "its holder can still adopt"
    );
    drop(pin);
    assert_eq!(
        peek.refs(handed),
        1,
        "the last pin took every pin of the row with it"
    );
    assert!(region.pin_holder(ticket).is_err());
    assert!(region.pin_row().is_ok());
}

#[test]
fn a_late_drop_right_after_the_generation_wrapped_to_zero_is_a_no_op() {
    let (region, mut p, mut c) = setup(2, 1, 2 + 2);
    let peek = Peek::new(&region);
    // Take and drop the only row until its generation is the last one (0xffff).
    let mut row = region.pin_row().expect("row");
    while row.ticket() & 0xffff != 0xffff {
        drop(row);
        row = region.pin_row().expect("row again");
    }
    let seq = publish(&mut p).expect("publish");
    let pin = pin_seq(&mut c, seq, &row);
    let len = pin.len() as u64;
    let chunk = pin.hand_over();
    let late = region
        .pin_holder(row.ticket())
        .expect("holder")
        .adopt(chunk, len)
        .expect("adopt");
    drop(row);
    let row = region.pin_row().expect("row again");
    assert_eq!(row.ticket() & 0xffff, 0, "the generation wrapped");
    assert_eq!(peek.refs(chunk), 1, "the descriptor only");
    drop(late); // the new row holds no pin of the chunk: its word is 0
    assert_eq!(row.held(), 0);
    assert_eq!(peek.refs(chunk), 1);
}

#[test]
fn an_adopted_pin_dropped_after_its_row_count_reached_zero_is_a_no_op() {
    let (region, mut p, mut c) = setup(2, 1, 2 + 2);
    let peek = Peek::new(&region);
    let row = region.pin_row().expect("row");
    assert_eq!(row.ticket() & 0xffff, 0, "a fresh row: generation 0");
    let seq = publish(&mut p).expect("publish");
    let pin = pin_seq(&mut c, seq, &row);
    let len = pin.len() as u64;
    let chunk = pin.hand_over();
    let holder = region.pin_holder(row.ticket()).expect("holder");
    // A holder that adopts the one pin twice (a duplicated hand-over message).
    let first = holder.adopt(chunk, len).expect("adopt");
    let second = holder.adopt(chunk, len).expect("the count is still 1");
    drop(first);
    assert_eq!(row.held(), 0);
    assert_eq!(peek.refs(chunk), 1, "the descriptor only");
    drop(second); // nothing left to give back: the word is 0
    assert_eq!(row.held(), 0);
    assert_eq!(peek.refs(chunk), 1, "not taken from the descriptor");
}

// --- 5 ---

#[test]
fn pin_holder_refuses_bad_tickets_and_adopt_refuses_bad_chunks_lengths_and_unpinned_chunks() {
    let (region, mut p, mut c) = setup(2, 3, 2 + 3);
    let row = region.pin_row().expect("row");
    let other = region.pin_row().expect("second row");
    let (r, g) = (row.ticket() >> 16, row.ticket() & 0xffff);
    let unavailable = |t: u32| matches!(region.pin_holder(t), Err(Error::Unavailable { .. }));
    assert!(
        unavailable(3 << 16 | g),
        "row out of range (consumers_max 3)"
    );
    assert!(unavailable(0xffff << 16), "row out of range");
    let free_row = (0..3)
        .find(|&i| i != r && i != other.ticket() >> 16)
        .expect("a free row");
    assert!(unavailable(free_row << 16), "a row not in use");
    assert!(unavailable(r << 16 | (g + 1)), "a wrong generation");
    // A ticket of a row dropped and taken again is stale.
    let stale = other.ticket();
    drop(other);
    assert!(unavailable(stale), "a dropped row");
    let retaken = region.pin_row().expect("row again");
    assert_eq!(retaken.ticket() >> 16, stale >> 16);
    assert!(unavailable(stale), "the old generation of a re-taken row");
    assert!(region.pin_holder(retaken.ticket()).is_ok());

    let holder = region.pin_holder(row.ticket()).expect("holder");
    let seq = publish(&mut p).expect("publish");
    let pin = pin_seq(&mut c, seq, &row);
    let ch = pin.chunk();
    let chunks = region.layout().geometry.chunks;
    assert!(matches!(
        holder.adopt(chunks, 1),
        Err(Error::Unavailable { .. })
    ));
    assert!(matches!(
        holder.adopt(u32::MAX, 1),
        Err(Error::Unavailable { .. })
    ));
    assert!(matches!(
        holder.adopt(ch, CHUNK_BYTES + 1),
        Err(Error::PacketTooLarge { .. })
    ));
    let unpinned = (0..chunks).find(|&x| x != ch).expect("another chunk");
    assert!(matches!(
        holder.adopt(unpinned, 1),
        Err(Error::Unavailable { .. })
    ));
    // A chunk pinned in another row only is not this row's to adopt.
    let retaken_holder = region.pin_holder(retaken.ticket()).expect("holder");
    assert!(matches!(
        retaken_holder.adopt(ch, 1),
        Err(Error::Unavailable { .. })
    ));
    // Refusals changed no count.
    assert_eq!((row.held(), retaken.held()), (1, 0));
    // The valid case, at the length limit.
    let len = pin.len();
    assert_eq!(pin.hand_over(), ch);
    let ok = holder.adopt(ch, CHUNK_BYTES).expect("adopt");
    assert_eq!(ok.len(), CHUNK_BYTES as usize);
    assert_eq!(&ok[..len], &payload(seq)[..]);
    drop(ok);
    assert_eq!(row.held(), 0);
    assert!(
        matches!(holder.adopt(ch, 1), Err(Error::Unavailable { .. })),
        "a pin given back cannot be adopted again"
    );
}

// --- 6 ---

#[test]
fn pin_rows_are_bounded_by_consumers_max_and_a_dropped_row_can_be_taken_again() {
    let (region, _p, _c) = setup(2, 3, 2 + 3);
    let rows: Vec<PinRow> = (0..3)
        .map(|_| region.pin_row().expect("a free row"))
        .collect();
    let mut indices: Vec<u32> = rows.iter().map(|r| r.ticket() >> 16).collect();
    indices.sort_unstable();
    assert_eq!(indices, [0, 1, 2]);
    match region.pin_row() {
        Err(Error::Unavailable { index, .. }) => assert_eq!(index, 3),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let mut rows = rows;
    let gone = rows.remove(1);
    let (index, ticket) = (gone.ticket() >> 16, gone.ticket());
    drop(gone);
    let again = region.pin_row().expect("the dropped row is free");
    assert_eq!(again.ticket() >> 16, index);
    assert_ne!(again.ticket(), ticket);
    assert!(matches!(region.pin_row(), Err(Error::Unavailable { .. })));
}

// --- 7 ---

#[test]
fn pins_on_every_spare_chunk_make_loans_fail_with_out_of_chunks_until_one_is_dropped() {
    let (slots, chunks) = (3, 3 + 3);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let peek = Peek::new(&region);
    let row = region.pin_row().expect("row");
    let mut pins = Vec::new();
    for _ in 0..chunks {
        let s = publish(&mut p).expect("a free chunk is left");
        pins.push((s, pin_seq(&mut c, s, &row)));
    }
    assert!(peek.all_refs().iter().all(|&r| r > 0));
    let head = p.head();
    for now in 0..3 {
        assert!(matches!(p.loan(8, now), Err(Error::OutOfChunks)));
        assert!(matches!(
            p.publish_copy(b"x", 0, NO_DEADLINE, now),
            Err(Error::OutOfChunks)
        ));
    }
    assert_eq!(p.head(), head, "a refused loan publishes nothing");
    for (s, pin) in &pins {
        assert_eq!(&**pin, &payload(*s)[..], "pinned packet {s} intact");
    }
    // The newest packets are still readable in the ring (nothing was retracted).
    for s in head - slots as u64..head {
        assert_eq!(&*c.read_at(s, 0).expect("in the ring"), &payload(s)[..]);
    }
    // Unpinning a packet still in the ring frees nothing (its descriptor holds it)...
    let (_, newest) = pins.pop().expect("pins");
    drop(newest);
    assert!(matches!(p.loan(8, 0), Err(Error::OutOfChunks)));
    // ...unpinning one that left the ring does.
    let (_, oldest) = pins.remove(0);
    let freed = oldest.chunk();
    drop(oldest);
    let s = publish(&mut p).expect("a chunk was given back");
    assert_eq!(peek.chunk_of(s), freed);
    for (s, pin) in &pins {
        assert_eq!(&**pin, &payload(*s)[..]);
    }
}

// --- 8 ---

#[test]
fn holder_alive_is_false_without_a_holder_true_with_a_live_one_and_false_once_it_exited() {
    const TEST: &str =
        "holder_alive_is_false_without_a_holder_true_with_a_live_one_and_false_once_it_exited";
    if child_role().as_deref() == Some("holder-until-stdin-closes") {
        let region = child_region();
        let _holder = region
            .pin_holder(env_u64("SHM_TICKET") as u32)
            .expect("holder");
        println!("SHM holder");
        // Exits normally once the parent closes our stdin.
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        return;
    }
    let (region, _p, _c) = setup(2, 2, 2 + 2);
    let row = region.pin_row().expect("row");
    assert!(!row.holder_alive(), "no holder yet");
    let _me = region.pin_holder(row.ticket()).expect("holder");
    assert!(row.holder_alive(), "this process holds it");
    let (mut child, out) = spawn_child(
        TEST,
        "holder-until-stdin-closes",
        &[
            ("SHM_FD_PATH", fd_path(&region)),
            ("SHM_TICKET", row.ticket().to_string()),
        ],
    );
    let mut lines = BufReader::new(out).lines().map_while(Result::ok);
    assert_eq!(next_report(&mut lines), "holder");
    assert!(row.holder_alive(), "the child holds it and lives");
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success());
    assert!(!row.holder_alive(), "the child exited");
    // A new generation of the row has no holder.
    drop(row);
    let row = region.pin_row().expect("row again");
    assert!(!row.holder_alive());
}

// --- 9 ---

#[test]
fn a_loan_keeps_its_slots_chunk_once_read_so_a_region_without_a_spare_chunk_runs() {
    // As many chunks as slots: every loan after the first lap must keep the
    // chunk of the packet its slot held.
    let (slots, chunks) = (3, 3);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let peek = Peek::new(&region);
    for _ in 0..10 * slots {
        let s = publish(&mut p).expect("the slot's own chunk is free once read");
        let sample = c.next(0).expect("the packet");
        assert_eq!(&*sample, &payload(s)[..]);
        if s >= slots as u64 {
            assert_eq!(peek.chunk_of(s), (s % chunks as u64) as u32, "kept");
        }
    }
    assert_eq!(
        peek.all_refs(),
        vec![1; chunks as usize],
        "one per descriptor"
    );
}

#[test]
fn a_loan_whose_slots_chunk_is_still_read_takes_a_free_one_or_fails_leaving_the_ring_alone() {
    let (slots, chunks) = (3, 4);
    let (region, mut p, mut c) = setup(slots, 2, chunks);
    let mut c2 = region.consumer(0, ConsumerConfig::default()).expect("c2");
    let peek = Peek::new(&region);
    for _ in 0..slots {
        publish(&mut p).expect("publish");
    }
    let (a, b) = (peek.chunk_of(0), peek.chunk_of(1));
    // A reader holds the oldest packet while the producer laps it (drop-oldest).
    let h0 = c.read_at(0, 0).expect("packet 0");
    let s = publish(&mut p).expect("the spare chunk");
    assert_ne!(
        peek.chunk_of(s),
        a,
        "packet {s} went into a chunk being read"
    );
    // Another reader holds the packet the next loan's slot has: no chunk is left.
    let h1 = c2.read_at(1, 0).expect("packet 1");
    let head = p.head();
    assert!(matches!(publish(&mut p), Err(Error::OutOfChunks)));
    assert_eq!(p.head(), head, "a refused loan publishes nothing");
    assert_eq!((&*h0, &*h1), (&payload(0)[..], &payload(1)[..]));
    drop((h0, h1));
    for s in head - slots as u64..head {
        assert_eq!(&*c.read_at(s, 0).expect("in the ring"), &payload(s)[..]);
    }
    // Read and let go: the slot keeps its chunk.
    let s = publish(&mut p).expect("publish");
    assert_eq!(peek.chunk_of(s), b);
}

// --- a random sequence of operations against a model of the ledger ---

#[derive(Clone, Debug)]
enum Op {
    Publish,
    /// Pin the packet `back` places behind the newest into row slot `row`.
    Pin {
        row: usize,
        back: usize,
    },
    PinTo {
        pin: usize,
        row: usize,
    },
    HandOver {
        pin: usize,
        adopt: bool,
    },
    DropPin(usize),
    DropRow(usize),
    TakeRow(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Publish),
        4 => (0usize..3, 0usize..8).prop_map(|(row, back)| Op::Pin { row, back }),
        2 => (0usize..16, 0usize..3).prop_map(|(pin, row)| Op::PinTo { pin, row }),
        2 => (0usize..16, any::<bool>()).prop_map(|(pin, adopt)| Op::HandOver { pin, adopt }),
        3 => (0usize..16).prop_map(Op::DropPin),
        1 => (0usize..3).prop_map(Op::DropRow),
        1 => (0usize..3).prop_map(Op::TakeRow),
    ]
}

/// One owner of a row of the region (a `PinRow` and what it recorded).
struct Epoch {
    /// Pins recorded per chunk (the model).
    counts: HashMap<u32, u32>,
    /// The ledger still counts them (the row was not given back yet).
    live: bool,
    /// The `PinRow` handle is still held (in its slot).
    handle: bool,
    /// Daemon-side pins (made through the row, not handed over) alive.
    daemon_pins: usize,
    holder: PinHolder,
}

impl Epoch {
    fn held(&self) -> u32 {
        self.counts.values().sum()
    }
    fn maybe_end(&mut self) {
        if !self.handle && self.daemon_pins == 0 {
            self.live = false;
            self.counts.clear();
        }
    }
}

struct LivePin {
    pin: Pin,
    epoch: usize,
    adopted: bool,
    bytes: Vec<u8>,
}

struct Harness {
    region: Region,
    peek: Peek,
    p: Producer,
    c: Consumer,
    slots: u32,
    /// Row slots: the handle and its epoch.
    rows: Vec<Option<(PinRow, usize)>>,
    epochs: Vec<Epoch>,
    pins: Vec<LivePin>,
}

impl Harness {
    fn take_row(&mut self, slot: usize) -> Result<(), TestCaseError> {
        let in_use = self.epochs.iter().filter(|e| e.live).count();
        match self.region.pin_row() {
            Ok(row) => {
                prop_assert!(in_use < 3, "a fourth row of three");
                prop_assert_eq!(row.held(), 0);
                let holder = self.region.pin_holder(row.ticket()).expect("holder");
                self.epochs.push(Epoch {
                    counts: HashMap::new(),
                    live: true,
                    handle: true,
                    daemon_pins: 0,
                    holder,
                });
                self.rows[slot] = Some((row, self.epochs.len() - 1));
            }
            Err(Error::Unavailable { .. }) => prop_assert_eq!(in_use, 3),
            Err(e) => prop_assert!(false, "pin_row: {}", e),
        }
        Ok(())
    }

    fn drop_pin(&mut self, i: usize) {
        let lp = self.pins.remove(i);
        let ch = lp.pin.chunk();
        drop(lp.pin);
        let e = &mut self.epochs[lp.epoch];
        if e.live {
            let n = e.counts.entry(ch).or_default();
            *n = n.saturating_sub(1);
        }
        if !lp.adopted {
            e.daemon_pins -= 1;
            e.maybe_end();
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Publish => {
                let free = self.peek.all_refs().contains(&0);
                // A full ring's oldest slot keeps its own chunk for the new
                // packet when nothing but its descriptor holds it.
                let head = self.p.head();
                let slots = self.slots as u64;
                let own = (head >= slots).then(|| self.peek.chunk_of(head - slots));
                let reusable = own.is_some_and(|ch| self.peek.refs(ch) == 1);
                match publish(&mut self.p) {
                    Ok(s) => {
                        prop_assert!(
                            free || reusable,
                            "published with no free chunk and the slot's chunk held"
                        );
                        if !free {
                            prop_assert_eq!(
                                Some(self.peek.chunk_of(s)),
                                own,
                                "kept the slot's chunk"
                            );
                        }
                    }
                    Err(Error::OutOfChunks) => prop_assert!(
                        !free && !reusable,
                        "OutOfChunks with a free or reusable chunk"
                    ),
                    Err(e) => prop_assert!(false, "publish: {}", e),
                }
            }
            Op::Pin { row, back } => {
                let head = self.p.head();
                let in_ring = head.min(self.slots as u64);
                let Some((r, epoch)) = &self.rows[row] else {
                    return Ok(());
                };
                if in_ring == 0 {
                    return Ok(());
                }
                let seq = head - 1 - back as u64 % in_ring;
                let pin = pin_seq(&mut self.c, seq, r);
                prop_assert_eq!(pin.chunk(), self.peek.chunk_of(seq));
                let e = &mut self.epochs[*epoch];
                *e.counts.entry(pin.chunk()).or_default() += 1;
                e.daemon_pins += 1;
                self.pins.push(LivePin {
                    pin,
                    epoch: *epoch,
                    adopted: false,
                    bytes: payload(seq),
                });
            }
            Op::PinTo { pin, row } => {
                if self.pins.is_empty() {
                    return Ok(());
                }
                let i = pin % self.pins.len();
                let Some((r, epoch)) = &self.rows[row] else {
                    return Ok(());
                };
                if !self.epochs[self.pins[i].epoch].live {
                    return Ok(()); // its bytes are no longer protected
                }
                let new = self.pins[i].pin.pin_to(r).expect("pin_to");
                let e = &mut self.epochs[*epoch];
                *e.counts.entry(new.chunk()).or_default() += 1;
                e.daemon_pins += 1;
                let bytes = self.pins[i].bytes.clone();
                self.pins.push(LivePin {
                    pin: new,
                    epoch: *epoch,
                    adopted: false,
                    bytes,
                });
            }
            Op::HandOver { pin, adopt } => {
                let Some(i) = (0..self.pins.len())
                    .map(|k| (pin + k) % self.pins.len())
                    .find(|&k| !self.pins[k].adopted)
                else {
                    return Ok(());
                };
                let lp = self.pins.remove(i);
                let len = lp.pin.len() as u64;
                let chunk = lp.pin.hand_over();
                let e = &mut self.epochs[lp.epoch];
                e.daemon_pins -= 1;
                e.maybe_end();
                if adopt {
                    match e.holder.adopt(chunk, len) {
                        Ok(pin) => {
                            prop_assert!(e.live, "adopted a pin of a row given back");
                            self.pins.push(LivePin {
                                pin,
                                epoch: lp.epoch,
                                adopted: true,
                                bytes: lp.bytes,
                            });
                        }
                        Err(Error::Unavailable { .. }) => {
                            prop_assert!(!e.live, "adopt refused in a live row")
                        }
                        Err(e) => prop_assert!(false, "adopt: {}", e),
                    }
                }
            }
            Op::DropPin(i) => {
                if !self.pins.is_empty() {
                    self.drop_pin(i % self.pins.len());
                }
            }
            Op::DropRow(slot) => {
                if let Some((row, epoch)) = self.rows[slot].take() {
                    drop(row);
                    let e = &mut self.epochs[epoch];
                    e.handle = false;
                    e.maybe_end();
                }
            }
            Op::TakeRow(slot) => {
                if self.rows[slot].is_none() {
                    self.take_row(slot)?;
                }
            }
        }
        self.check()
    }

    fn check(&self) -> Result<(), TestCaseError> {
        for (row, epoch) in self.rows.iter().flatten() {
            prop_assert_eq!(row.held(), self.epochs[*epoch].held(), "held()");
        }
        let head = self.p.head();
        let mut expected = vec![0u32; self.region.layout().geometry.chunks as usize];
        for seq in head.saturating_sub(self.slots as u64)..head {
            expected[self.peek.chunk_of(seq) as usize] += 1;
        }
        for e in self.epochs.iter().filter(|e| e.live) {
            for (&ch, &n) in &e.counts {
                expected[ch as usize] += n;
            }
        }
        prop_assert_eq!(self.peek.all_refs(), expected, "chunk reference counts");
        for lp in &self.pins {
            if self.epochs[lp.epoch].live {
                prop_assert_eq!(&*lp.pin, &lp.bytes[..], "a live pin's bytes");
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn random_pin_operations_keep_counts_and_bytes_as_the_model_says(
        slots in 2u32..5,
        spare in 1u32..6,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let (region, p, c) = setup(slots, 3, slots + spare);
        let peek = Peek::new(&region);
        let mut h = Harness {
            region,
            peek,
            p,
            c,
            slots,
            rows: vec![None, None, None],
            epochs: Vec::new(),
            pins: Vec::new(),
        };
        h.take_row(0)?;
        h.take_row(1)?;
        for op in &ops {
            h.step(op)?;
        }
        // Giving everything back frees every chunk outside the ring.
        while !h.pins.is_empty() {
            h.drop_pin(0);
            h.check()?;
        }
        for slot in 0..3 {
            h.step(&Op::DropRow(slot))?;
        }
        let refs = h.peek.all_refs();
        prop_assert_eq!(refs.iter().sum::<u32>(), h.p.head().min(slots as u64) as u32);
    }
}

//! [`ByteLog`]: small byte strings held until released, packed into
//! blocks that count what they still hold — for a reliable sender's window
//! of unacknowledged events (the client library's and the daemon's), where
//! a reference-counted slice per event cost an atomic increment and
//! decrement per event. Releases come mostly in the order of the pushes
//! (acknowledgements are cumulative), so a block is freed once it and the
//! blocks before it hold nothing.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

/// Where a string is in a [`ByteLog`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRef {
    block: u64,
    start: u32,
    len: u32,
}

impl LogRef {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A held string: in a [`ByteLog`], or a buffer of its own (one too long
/// for the log's blocks, or handed over already shared).
#[derive(Debug)]
pub enum Kept {
    /// In the log.
    Log(LogRef),
    /// A buffer of its own.
    Own(Bytes),
}

impl Kept {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Kept::Log(r) => r.len(),
            Kept::Own(b) => b.len(),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes (from `log` if they are there).
    pub fn bytes<'a>(&'a self, log: &'a ByteLog) -> &'a [u8] {
        match self {
            Kept::Log(r) => log.get(r),
            Kept::Own(b) => b,
        }
    }

    /// Its bytes as a buffer of their own (a copy out of `log`, whose
    /// place it gives back): it is not held any more.
    pub fn into_bytes(self, log: &mut ByteLog) -> Bytes {
        match self {
            Kept::Log(r) => {
                let bytes = log.to_bytes(&r);
                log.release(r);
                bytes
            }
            Kept::Own(b) => b,
        }
    }

    /// Gives its place in `log` back: it is not held any more.
    pub fn release(self, log: &mut ByteLog) {
        if let Kept::Log(r) = self {
            log.release(r);
        }
    }
}

/// Byte strings in blocks of a fixed size, each block counting the strings
/// in it not yet released. Memory: the blocks from the oldest string held
/// to the newest, at most about two blocks more than the strings held when
/// they are released in order.
#[derive(Debug)]
pub struct ByteLog {
    /// Each block and how many strings in it are held.
    blocks: VecDeque<(BytesMut, u32)>,
    /// The number of `blocks[0]`.
    first: u64,
    block_size: usize,
}

impl ByteLog {
    /// An empty log of blocks of `block_size` bytes (strings pushed must
    /// be at most that long; callers keep longer ones elsewhere).
    pub fn new(block_size: usize) -> ByteLog {
        ByteLog {
            blocks: VecDeque::new(),
            first: 0,
            block_size: block_size.max(1),
        }
    }

    /// Appends a string of `len` bytes (at most the block size) that
    /// `write` appends to the block it is given; `write`'s error is
    /// returned (and what it appended stays, unreferenced).
    pub fn push_with<E>(
        &mut self,
        len: usize,
        write: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    ) -> Result<LogRef, E> {
        debug_assert!(len <= self.block_size, "{len} over a block");
        if self
            .blocks
            .back()
            .is_none_or(|(b, _)| b.capacity() - b.len() < len)
        {
            self.blocks
                .push_back((BytesMut::with_capacity(self.block_size.max(len)), 0));
            // The block that was being filled may hold nothing already.
            self.trim();
        }
        let block = self.first + self.blocks.len() as u64 - 1;
        let (b, held) = self.blocks.back_mut().expect("a block");
        let start = b.len();
        write(b)?;
        *held += 1;
        Ok(LogRef {
            block,
            start: start as u32,
            len: (b.len() - start) as u32,
        })
    }

    /// Appends `bytes` (at most the block size).
    pub fn push(&mut self, bytes: &[u8]) -> LogRef {
        let r: Result<LogRef, std::convert::Infallible> = self.push_with(bytes.len(), |b| {
            b.extend_from_slice(bytes);
            Ok(())
        });
        match r {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// The string at `r` (held, not released).
    pub fn get(&self, r: &LogRef) -> &[u8] {
        let (b, _) = &self.blocks[(r.block - self.first) as usize];
        &b[r.start as usize..(r.start + r.len) as usize]
    }

    /// The string at `r` as a buffer of its own (a copy).
    pub fn to_bytes(&self, r: &LogRef) -> Bytes {
        Bytes::copy_from_slice(self.get(r))
    }

    /// Releases the string at `r`; frees the blocks at the front that hold
    /// nothing any more (all but the one being filled).
    pub fn release(&mut self, r: LogRef) {
        let i = (r.block - self.first) as usize;
        let Some((_, held)) = self.blocks.get_mut(i) else {
            return;
        };
        *held -= 1;
        if *held == 0 {
            self.trim();
        }
    }

    /// Frees the blocks at the front that hold nothing, all but the last.
    fn trim(&mut self) {
        while self.blocks.len() > 1 && self.blocks.front().is_some_and(|(_, h)| *h == 0) {
            self.blocks.pop_front();
            self.first += 1;
        }
    }

    /// Blocks allocated.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes of the blocks allocated.
    pub fn memory(&self) -> usize {
        self.blocks.iter().map(|(b, _)| b.capacity()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_read_back_and_a_block_goes_once_it_and_those_before_it_are_released() {
        let mut log = ByteLog::new(1000);
        let s = |n: usize| vec![n as u8; 100];
        // Ten strings a block: three blocks and a bit.
        let held: Vec<LogRef> = (0..31).map(|n| log.push(&s(n))).collect();
        assert_eq!(log.blocks(), 4);
        for (n, r) in held.iter().enumerate() {
            assert_eq!(log.get(r), &s(n)[..]);
            assert_eq!(log.to_bytes(r), Bytes::from(s(n)));
        }
        let mut held = held.into_iter();
        let first: Vec<_> = held.by_ref().take(10).collect();
        // The second block emptied first: nothing freed yet.
        for r in held.by_ref().take(10) {
            log.release(r);
        }
        assert_eq!(log.blocks(), 4);
        for r in first {
            log.release(r);
        }
        assert_eq!(log.blocks(), 2);
        for r in held {
            log.release(r);
        }
        // The last block stays, to be filled.
        assert_eq!(log.blocks(), 1);
        let r = log.push(&s(99));
        assert_eq!(log.get(&r), &s(99)[..]);
    }

    #[test]
    fn a_block_emptied_while_it_was_the_last_is_freed_once_another_follows() {
        let mut log = ByteLog::new(100);
        let a = log.push(&[1; 60]);
        log.release(a);
        // The only block holds nothing; the next string needs a new one.
        let b = log.push(&[2; 60]);
        let c = log.push(&[3; 60]);
        log.release(b);
        log.release(c);
        assert_eq!(log.blocks(), 1, "emptied blocks are freed, the last kept");
    }

    #[test]
    fn a_failed_write_leaves_nothing_referenced() {
        let mut log = ByteLog::new(64);
        let r: Result<LogRef, &str> = log.push_with(10, |_| Err("no"));
        assert_eq!(r, Err("no"));
        let ok = log.push(b"abc");
        log.release(ok);
        assert_eq!(log.blocks(), 1);
    }
}

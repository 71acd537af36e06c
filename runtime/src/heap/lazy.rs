//! Local PEs' slices of a host heap mapped at this PE's first access to each, instead of at
//! init (`RSHMEM_LAZY_MAPPING`, on by default on the CPU backend).
//!
//! Mapping every local PE's chunks at init costs every PE one descriptor and one `mmap` per
//! local PE and chunk: O(N) per PE and O(N²) for the host, which dominated start-up at
//! hundreds of PEs. Here each PE keeps its own chunks' memfds open and publishes their
//! descriptor numbers: the first chunk's through the start-up all-gather, later ones in a
//! table in its first chunk ([`super::internal::CHUNK_FDS`]). A PE that first reaches local
//! PE `j` opens `j`'s chunks through `/proc/PID/fd/NUM` (the same user's process, in the same
//! PID namespace: the node checked both), checks that each is the memfd it expects (its name
//! and size, and that the process is still the one that reported the id), and maps them at
//! their place in `j`'s slice. A PE then maps only the PEs it talks to: its barrier partners
//! (O(log N)) and whoever the program reaches.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::node::Liveness;

/// Per local PE, how many bytes of its slice (from its start) are mapped in this process.
#[derive(Debug)]
pub(crate) struct PeerSpans(Box<[AtomicUsize]>);

impl PeerSpans {
    /// True when local PE `j`'s slice is mapped here at least up to offset `end` (exclusive).
    #[inline(always)]
    pub(crate) fn covers(&self, j: usize, end: usize) -> bool {
        self.0[j].load(Ordering::Acquire) >= end
    }

    fn set(&self, j: usize, end: usize) {
        self.0[j].store(end, Ordering::Release);
    }
}

/// The state of a lazily mapped heap.
pub(crate) struct Lazy {
    pub(crate) spans: Arc<PeerSpans>,
    /// This PE's chunks, kept open for the job (local peers open them through /proc).
    mine: Mutex<Vec<OwnedFd>>,
    /// (offset, length) of every chunk, the same on every PE.
    chunks: RwLock<Vec<(usize, usize)>>,
    /// Descriptor number of each local PE's first chunk in its own process.
    first_fd: Vec<i32>,
    /// Process id and start time of each local PE.
    procs: Vec<(u32, u64)>,
    /// Global PE number of each local PE (for names and messages).
    pes: Vec<usize>,
    /// `heap` or `ctrl`: part of the chunks' memfd names.
    label: &'static str,
    /// My global PE number.
    me_pe: usize,
    timeout: Option<Duration>,
    /// One mapper at a time.
    lock: Mutex<()>,
}

/// The memfd name of chunk `c` of PE `pe`'s heap `label`.
pub(crate) fn chunk_name(pe: usize, label: &str, c: usize) -> String {
    format!("rshmem-pe{pe}-{label}-chunk{c}")
}

/// A slot of a chunk-descriptor table (descriptor + 1; 0: not published yet).
fn slot(table: usize, c: usize) -> &'static AtomicU32 {
    // SAFETY: `table` is the aligned CHUNK_FDS table inside a first chunk that stays mapped for
    // the heap's lifetime, and `c < MAX_CHUNKS` (checked by the callers).
    unsafe { &*((table + 4 * c) as *const AtomicU32) }
}

impl Lazy {
    pub(crate) fn new(
        me: usize,
        first_fd: Vec<i32>,
        procs: Vec<(u32, u64)>,
        pes: Vec<usize>,
        label: &'static str,
        timeout: Option<Duration>,
    ) -> Self {
        let spans = PeerSpans((0..pes.len()).map(|_| AtomicUsize::new(0)).collect());
        let me_pe = pes[me];
        Lazy {
            spans: Arc::new(spans),
            mine: Mutex::new(Vec::new()),
            chunks: RwLock::new(Vec::new()),
            first_fd,
            procs,
            pes,
            label,
            me_pe,
            timeout,
            lock: Mutex::new(()),
        }
    }

    /// Records my new chunk `[off, off+len)` (already mapped in my slice at `my_base`), keeps
    /// its descriptor and publishes its number in my table. Called with the heap's growth lock
    /// held, so chunks arrive in order.
    pub(crate) fn add_mine(
        &self,
        call: &'static str,
        me: usize,
        my_base: usize,
        off: usize,
        len: usize,
        fd: OwnedFd,
    ) -> Result<()> {
        let mut chunks = self.chunks.write().map_err(|_| poisoned(call))?;
        let c = chunks.len();
        if c >= super::internal::MAX_CHUNKS {
            return Err(Error::invalid(
                call,
                format!(
                    "the heap would need more than {} chunks (set RSHMEM_LAZY_MAPPING=0)",
                    super::internal::MAX_CHUNKS
                ),
            ));
        }
        let num = u32::try_from(fd.as_raw_fd()).map_err(|_| Error::invalid(call, "bad memfd"))?;
        chunks.push((off, len));
        self.mine.lock().map_err(|_| poisoned(call))?.push(fd);
        // Release: a peer that sees the number finds the chunk sized and in my table order.
        slot(my_base + super::internal::CHUNK_FDS, c).store(num + 1, Ordering::Release);
        self.spans.set(me, off + len);
        Ok(())
    }

    /// Maps every chunk of local PE `j` this PE knows of that is not mapped here yet, so that
    /// `[0, end)` of its slice (at `slice_base`) is; an error naming `call` and the PE when one
    /// cannot be opened (the PE is gone, or /proc refuses).
    #[cold]
    #[inline(never)]
    pub(crate) fn map_peer(
        &self,
        call: &'static str,
        j: usize,
        end: usize,
        slice_base: usize,
        res: &super::host::Reservation,
        live: Option<&Liveness>,
    ) -> Result<()> {
        let _one = self.lock.lock().map_err(|_| poisoned(call))?;
        let chunks = self.chunks.read().map_err(|_| poisoned(call))?.clone();
        for (c, &(off, len)) in chunks.iter().enumerate() {
            if self.spans.covers(j, off + len) {
                continue;
            }
            let num = if c == 0 {
                self.first_fd[j]
            } else {
                self.published(call, j, c, slice_base, live)?
            };
            let fd = self.open(call, j, c, num, len)?;
            super::host::map_chunk(&fd, slice_base + off, len, res)?;
            self.spans.set(j, off + len);
        }
        if self.spans.covers(j, end) {
            Ok(())
        } else {
            Err(Error::invalid(
                call,
                format!(
                    "offset {end:#x} of PE {}'s heap is beyond what the heap has grown to",
                    self.pes[j]
                ),
            ))
        }
    }

    /// The descriptor number local PE `j` published for its chunk `c`, waiting for it (the PE
    /// may not have grown its heap yet in the same collective allocation).
    fn published(
        &self,
        call: &'static str,
        j: usize,
        c: usize,
        slice_base: usize,
        live: Option<&Liveness>,
    ) -> Result<i32> {
        let s = slot(slice_base + super::internal::CHUNK_FDS, c);
        let start = Instant::now();
        loop {
            let v = s.load(Ordering::Acquire);
            if v != 0 {
                return i32::try_from(v - 1).map_err(|_| self.refused(call, j, "a bad descriptor"));
            }
            if live.is_some_and(|l| l.is_lost(self.pes[j])) {
                return Err(self.gone(call, j));
            }
            if let Some(t) = self.timeout.filter(|&t| start.elapsed() > t) {
                return Err(Error::Timeout {
                    call,
                    me: self.me_pe,
                    pe: Some(self.pes[j]),
                    what: format!(
                        "PE {} to grow its {} (did it make the same allocation call?)",
                        self.pes[j], self.label
                    ),
                    waited: t,
                });
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Opens local PE `j`'s chunk `c` (descriptor `num` in its process) and checks that it is
    /// that PE's memfd of `len` bytes.
    fn open(
        &self,
        call: &'static str,
        j: usize,
        c: usize,
        num: i32,
        len: usize,
    ) -> Result<OwnedFd> {
        let (pid, started) = self.procs[j];
        let path = format!("/proc/{pid}/fd/{num}");
        // std opens close-on-exec.
        let fd: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| self.open_failed(call, j, &e, &path))?
            .into();
        let want = chunk_name(self.pes[j], self.label, c);
        let name = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let named = name
            .strip_prefix("/memfd:")
            .map(|n| n.strip_suffix(" (deleted)").unwrap_or(n))
            == Some(want.as_str());
        let size = nix::sys::stat::fstat(&fd).map(|s| s.st_size as usize).ok();
        // Checked after opening: a process that still has the start time the PE reported is
        // that PE, so the descriptor opened was its.
        if crate::node::proc_start_time(pid) != Some(started) {
            return Err(self.gone(call, j));
        }
        if !named || size != Some(len) {
            return Err(self.refused(
                call,
                j,
                &format!("{path} is not its heap chunk {want} of {len} bytes (found {name:?}, {size:?} bytes)"),
            ));
        }
        Ok(fd)
    }

    /// An open that failed: the PE is gone when its process is, or when the descriptor is (a
    /// process that closed its heap is leaving: an exiting one keeps its /proc entry until
    /// reaped, with no descriptors left); else /proc refused.
    fn open_failed(&self, call: &'static str, j: usize, e: &std::io::Error, path: &str) -> Error {
        let (pid, started) = self.procs[j];
        if e.kind() == std::io::ErrorKind::NotFound
            || crate::node::proc_start_time(pid) != Some(started)
        {
            self.gone(call, j)
        } else {
            self.refused(call, j, &format!("opening {path}: {e}"))
        }
    }

    fn gone(&self, call: &'static str, j: usize) -> Error {
        Error::PeerLost {
            call,
            me: self.me_pe,
            pe: self.pes[j],
            reason: format!(
                "its process exited before this PE mapped its {}",
                self.label
            ),
        }
    }

    fn refused(&self, call: &'static str, j: usize, why: &str) -> Error {
        Error::invalid(
            call,
            format!(
                "cannot map PE {}'s {} here: {why} (RSHMEM_LAZY_MAPPING=0 maps every local PE at init instead)",
                self.pes[j], self.label
            ),
        )
    }
}

fn poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "the heap's mapping lock is poisoned (another thread panicked inside rshmem)"
            .into(),
    }
}

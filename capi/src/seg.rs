//! The program's global and static variables as symmetric objects.
//!
//! OpenSHMEM makes the data segment (`.data`, `.bss`) of the program symmetric. At `shmem_init`
//! the writable `PT_LOAD` segment of the main executable is copied into a `memfd` that is then
//! mapped `MAP_SHARED | MAP_FIXED` over the same addresses, so the program sees no change. The PEs
//! exchange (pid, fd, address, length) through the symmetric heap and each maps the others'
//! segments through `/proc/<pid>/fd/<fd>`. A symmetric address in the segment is translated by
//! its offset from the segment start (which differs between PEs under ASLR).
//!
//! Set `RSHMEM_CAPI_DATA_SEGMENT=0` to leave the data segment alone (then only the symmetric
//! heap is symmetric).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::{msg, CResult};

/// This process's data segment, moved onto a memfd (done once per process).
#[derive(Debug, Clone, Copy)]
pub struct Local {
    start: usize,
    len: usize,
    fd: c_int,
}

static LOCAL: OnceLock<Option<Local>> = OnceLock::new();

/// The symmetric data segment: where every PE's copy is mapped in this process.
#[derive(Debug)]
pub struct Segment {
    start: usize,
    len: usize,
    /// Per PE, this process's address of that PE's segment (`None`: not reachable).
    peers: Vec<Option<usize>>,
    me: usize,
}

impl Segment {
    /// If `[addr, addr+len)` starts in the data segment: the address of PE `pe`'s copy, or an
    /// error if the range runs past the segment or the PE's copy is not mapped.
    #[inline]
    pub fn translate(
        &self,
        call: &str,
        addr: usize,
        len: usize,
        pe: usize,
    ) -> Option<CResult<usize>> {
        let off = addr.wrapping_sub(self.start);
        if off >= self.len {
            return None;
        }
        if len <= self.len - off {
            if let Some(Some(base)) = self.peers.get(pe) {
                return Some(Ok(base + off));
            }
        }
        Some(self.translate_err(call, addr, len, pe))
    }

    #[cold]
    fn translate_err(&self, call: &str, addr: usize, len: usize, pe: usize) -> CResult<usize> {
        if len > self.len - (addr - self.start) {
            return msg(format!(
                "{call}: range {addr:#x}+{len} runs past the end of the symmetric data segment"
            ));
        }
        match self.peers.get(pe) {
            None => msg(format!(
                "PE {pe} is out of range: the job has {} PEs (0..{})",
                self.peers.len(),
                self.peers.len()
            )),
            Some(None) => msg(format!(
                "the data segment of PE {pe} is not mapped in this process (see RSHMEM_CAPI_DATA_SEGMENT)"
            )),
            Some(Some(base)) => Ok(base + addr - self.start),
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        for (pe, p) in self.peers.iter().enumerate() {
            if let (Some(base), true) = (p, pe != self.me) {
                // SAFETY: `base` is a mapping of `len` bytes this Segment created and owns.
                unsafe { libc::munmap(*base as *mut c_void, self.len) };
            }
        }
    }
}

struct Found {
    start: usize,
    end: usize,
}

unsafe extern "C" fn phdr_cb(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the callback and `data` is
    // the `Option<Found>` given below.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Option<Found>)) };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers of this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    for ph in phdrs {
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 {
            let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
            let hi = lo + ph.p_memsz as usize;
            let f = out.get_or_insert(Found { start: lo, end: hi });
            f.start = f.start.min(lo);
            f.end = f.end.max(hi);
        }
    }
    // The first object is the main program: stop after it.
    1
}

/// Moves this process's data segment onto a memfd (once per process). Failures leave the
/// segment private and are reported when a remote PE's static variable is used.
pub fn prepare(call: &str) -> Option<Local> {
    *LOCAL.get_or_init(|| {
        if std::env::var("RSHMEM_CAPI_DATA_SEGMENT").is_ok_and(|v| v == "0") {
            return None;
        }
        match remap() {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("rshmem: {call}: global/static variables are not symmetric: {e}");
                None
            }
        }
    })
}

fn remap() -> Result<Local, String> {
    let mut found: Option<Found> = None;
    // SAFETY: the callback only reads the headers and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(phdr_cb), (&mut found as *mut Option<Found>).cast()) };
    let f = found.ok_or("the program has no writable segment")?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let start = f.start & !(page - 1);
    let end = (f.end + page - 1) & !(page - 1);
    let len = end - start;
    // SAFETY: memfd_create with a valid C string.
    let fd = unsafe { libc::memfd_create(c"rshmem-data".as_ptr(), 0) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    let fail = |what: &str| {
        let e = format!("{what}: {}", std::io::Error::last_os_error());
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        Err(e)
    };
    // SAFETY: fd is a fresh memfd.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        return fail("ftruncate");
    }
    let mut done = 0usize;
    while done < len {
        // SAFETY: [start, end) is mapped and readable (the program's writable segment, whose
        // first pages may be read-only after relocation).
        let w = unsafe {
            libc::pwrite(
                fd,
                (start + done) as *const c_void,
                len - done,
                done as libc::off_t,
            )
        };
        if w <= 0 {
            return fail("copying the data segment");
        }
        done += w as usize;
    }
    // SAFETY: replaces the program's own segment pages with a shared mapping of identical
    // contents at the same addresses; nothing writes the segment between the copy and here
    // (called at init, before the runtime starts threads).
    let p = unsafe {
        libc::mmap(
            start as *mut c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return fail("mmap over the data segment");
    }
    Ok(Local { start, len, fd })
}

/// **Collective.** Exchanges the segments of all PEs through the symmetric heap and maps them.
pub fn exchange(
    world: &rshmem::World,
    local: Option<Local>,
) -> CResult<(Option<Segment>, Vec<libc::pid_t>)> {
    let (me, n) = (world.my_pe(), world.n_pes());
    let buf = world.calloc::<u64>(4 * n)?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let entry = match local {
        Some(l) => [pid, l.fd as u64, l.start as u64, l.len as u64],
        None => [pid, 0, 0, 0],
    };
    for pe in 0..n {
        world.put(buf.at(4 * me), &entry, pe)?;
    }
    world.barrier_all()?;
    let mut all = vec![0u64; 4 * n];
    world.get(&mut all, buf.as_ptr(), me)?;
    let mut peers = vec![None; n];
    if let Some(l) = local {
        for pe in 0..n {
            let e = &all[4 * pe..4 * pe + 4];
            if pe == me {
                peers[pe] = Some(l.start);
            } else if e[3] != 0 && e[3] as usize == l.len {
                peers[pe] = map_peer(e[0], e[1], l.len);
            }
        }
    }
    // Everyone has mapped the others before anyone may exit.
    world.barrier_all()?;
    world.free(buf)?;
    let pids = (0..n).map(|pe| all[4 * pe] as libc::pid_t).collect();
    let seg = local.map(|l| Segment {
        start: l.start,
        len: l.len,
        peers,
        me,
    });
    Ok((seg, pids))
}

fn map_peer(pid: u64, fd: u64, len: usize) -> Option<usize> {
    let path = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}")).ok()?;
    // SAFETY: a valid C string.
    let pfd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if pfd < 0 {
        return None;
    }
    // SAFETY: maps the peer's memfd of `len` bytes at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            pfd,
            0,
        )
    };
    // SAFETY: pfd is ours; the mapping stays valid after close.
    unsafe { libc::close(pfd) };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

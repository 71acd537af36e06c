//! The program's global and static variables as symmetric objects.
//!
//! OpenSHMEM makes the data segment (`.data`, `.bss`) of the program symmetric. At `shmem_init`
//! the writable `PT_LOAD` segment of the main executable, **except its RELRO pages**
//! (`PT_GNU_RELRO`: `.dynamic`, `.got`, `.init_array`, `.data.rel.ro`, which the loader made
//! read-only), is copied into a `memfd` (`MFD_CLOEXEC`, so children started by `system` or
//! `exec` do not inherit it) that is then mapped `MAP_SHARED | MAP_FIXED` over the same
//! addresses, so the program sees no change. The RELRO pages keep their private read-only
//! mapping. The PEs exchange (pid, fd, address, length) through the symmetric heap and each maps
//! the others' segments through `/proc/<pid>/fd/<fd>`. A symmetric address in the segment is
//! translated by its offset from the segment start (which differs between PEs under ASLR).
//!
//! Every access is checked against the **variable** it targets: the program's ELF symbol table
//! (`.symtab`, read from `/proc/self/exe`) gives each global and static variable's extent, and a
//! range that runs past the end of its variable, or an address inside no variable (padding, the
//! loader's `.got.plt`), is an error naming the call; so is an address in the RELRO pages. A
//! stripped program has no symbol table: then ranges are checked against the segment only, and
//! the loader's sections (`.dynamic`, `.got`, `.got.plt`, from the section headers) are refused.
//!
//! Set `RSHMEM_CAPI_DATA_SEGMENT=0` to leave the data segment alone (then only the symmetric
//! heap is symmetric).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::{msg, CResult};

/// This process's data segment, moved onto a memfd (done once per process).
#[derive(Debug)]
pub struct Local {
    start: usize,
    len: usize,
    fd: c_int,
    map: Map,
}

static LOCAL: OnceLock<Option<Local>> = OnceLock::new();

/// Variables: (start, end, name), sorted.
type Vars = Vec<(usize, usize, String)>;
/// Loader sections: (start, end, name).
type Loader = Vec<(usize, usize, &'static str)>;

/// What may be accessed inside the writable segment (addresses of this process).
#[derive(Debug, Clone, Default)]
struct Map {
    /// The RELRO range `[lo, hi)` (private, read-only after relocation), if any.
    relro: Option<(usize, usize)>,
    /// The program's variables, sorted, overlapping ones merged: (start, end, name). `None`
    /// when the program has no symbol table (stripped).
    vars: Option<Vars>,
    /// The loader's sections (`.dynamic`, `.got`, `.got.plt`): refused when `vars` is `None`.
    loader: Loader,
}

impl Map {
    /// Checks `[addr, addr+len)` (inside the shared part of the segment) against the program's
    /// variables.
    #[cold]
    fn check_err(&self, call: &str, addr: usize, len: usize) -> CResult<()> {
        if let Some((lo, hi)) = self.relro {
            if addr >= lo && addr < hi {
                return msg(relro_msg(call, addr));
            }
        }
        match &self.vars {
            Some(vars) => {
                let k = vars.partition_point(|v| v.0 <= addr);
                match k.checked_sub(1).map(|k| &vars[k]) {
                    Some((s, e, name)) if addr < *e => {
                        if len > e - addr {
                            return msg(format!(
                                "{call}: range {addr:#x}+{len} runs past the end of the \
                                 symmetric variable `{name}` ({s:#x}, {} bytes)",
                                e - s
                            ));
                        }
                        Ok(())
                    }
                    _ => msg(format!(
                        "{call}: address {addr:#x} is in the program's data segment but in no \
                         variable of its symbol table (not a symmetric object)"
                    )),
                }
            }
            None => {
                for (lo, hi, name) in &self.loader {
                    if addr < *hi && addr.saturating_add(len.max(1)) > *lo {
                        return msg(format!(
                            "{call}: range {addr:#x}+{len} touches the program's {name} \
                             (dynamic loader data), which is not symmetric"
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// True if `[addr, addr+len)` lies inside one variable (the common, fast case).
    #[inline]
    fn fits(&self, addr: usize, len: usize) -> bool {
        match &self.vars {
            Some(vars) => {
                let k = vars.partition_point(|v| v.0 <= addr);
                k > 0 && addr < vars[k - 1].1 && len <= vars[k - 1].1 - addr
            }
            None => self.loader.is_empty() && self.relro.is_none(),
        }
    }
}

fn relro_msg(call: &str, addr: usize) -> String {
    format!(
        "{call}: address {addr:#x} is in the program's relocation read-only data (PT_GNU_RELRO: \
         .dynamic, .got, ...), which each PE keeps private and read-only; it is not symmetric"
    )
}

/// The symmetric data segment: where every PE's copy is mapped in this process.
#[derive(Debug)]
pub struct Segment {
    start: usize,
    len: usize,
    /// Per PE, this process's address of that PE's segment (`None`: not reachable).
    peers: Vec<Option<usize>>,
    me: usize,
    map: Map,
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
            return match self.map.relro {
                Some((lo, hi)) if addr >= lo && addr < hi => Some(msg(relro_msg(call, addr))),
                _ => None,
            };
        }
        if len <= self.len - off && self.map.fits(addr, len) {
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
        self.map.check_err(call, addr, len)?;
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

/// The main program's writable segment, RELRO range and load bias.
#[derive(Default)]
struct Found {
    write: Option<(usize, usize)>,
    relro: Option<(usize, usize)>,
    bias: usize,
}

unsafe extern "C" fn phdr_cb(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the callback and `data` is
    // the `Option<Found>` given below.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Found)) };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers of this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    out.bias = info.dlpi_addr as usize;
    for ph in phdrs {
        let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
        let hi = lo + ph.p_memsz as usize;
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 {
            let w = out.write.get_or_insert((lo, hi));
            *w = (w.0.min(lo), w.1.max(hi));
        } else if ph.p_type == libc::PT_GNU_RELRO {
            out.relro = Some((lo, hi));
        }
    }
    // The first object is the main program: stop after it.
    1
}

/// Moves this process's data segment onto a memfd (once per process). Failures leave the
/// segment private and are reported when a remote PE's static variable is used.
pub fn prepare(call: &str) -> Option<&'static Local> {
    LOCAL
        .get_or_init(|| {
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
        .as_ref()
}

/// The program's variables and loader sections from its ELF file (addresses + `bias`).
/// Unreadable files give no variables (the segment-only checks apply).
fn read_elf(bias: usize) -> (Option<Vars>, Loader) {
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
    // Reads only the headers and tables it needs, not the whole program file.
    let Ok(exe) = std::fs::File::open("/proc/self/exe") else {
        return (None, Vec::new());
    };
    let cache = object::ReadCache::new(exe);
    let Ok(file) = object::File::parse(&cache) else {
        return (None, Vec::new());
    };
    let loader = [".dynamic", ".got", ".got.plt"]
        .into_iter()
        .filter_map(|name| {
            let s = file.section_by_name(name)?;
            let lo = bias.wrapping_add(s.address() as usize);
            Some((lo, lo.wrapping_add(s.size() as usize), name))
        })
        .collect();
    let mut syms: Vec<(usize, usize, String)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Data && s.size() > 0 && !s.is_undefined())
        .map(|s| {
            let lo = bias.wrapping_add(s.address() as usize);
            (
                lo,
                lo.wrapping_add(s.size() as usize),
                s.name().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    if syms.is_empty() {
        return (None, loader);
    }
    syms.sort_by_key(|v| v.0);
    let mut vars: Vars = Vec::with_capacity(syms.len());
    for v in syms {
        match vars.last_mut() {
            Some(last) if v.0 < last.1 => last.1 = last.1.max(v.1),
            _ => vars.push(v),
        }
    }
    (Some(vars), loader)
}

fn remap() -> Result<Local, String> {
    let mut f = Found::default();
    // SAFETY: the callback only reads the headers and writes `f`.
    unsafe { libc::dl_iterate_phdr(Some(phdr_cb), (&mut f as *mut Found).cast()) };
    let (wlo, whi) = f.write.ok_or("the program has no writable segment")?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // The loader made [floor(relro.lo), floor(relro.hi)) read-only: leave those pages alone.
    let mut start = wlo & !(page - 1);
    if let Some((_, rhi)) = f.relro {
        start = start.max(rhi & !(page - 1));
    }
    let end = (whi + page - 1) & !(page - 1);
    if start >= end {
        return Err("the program's writable segment is all RELRO".into());
    }
    let len = end - start;
    let (vars, loader) = read_elf(f.bias);
    let map = Map {
        relro: f.relro,
        vars,
        loader,
    };
    // SAFETY: memfd_create with a valid C string; MFD_CLOEXEC keeps it from child programs.
    let fd = unsafe { libc::memfd_create(c"rshmem-data".as_ptr(), libc::MFD_CLOEXEC) };
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
        // SAFETY: [start, end) is mapped and readable (the program's writable segment past its
        // RELRO pages).
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
    Ok(Local {
        start,
        len,
        fd,
        map,
    })
}

/// **Collective.** Exchanges the segments of all PEs through the symmetric heap and maps them.
pub fn exchange(
    world: &rshmem::World,
    local: Option<&Local>,
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
        map: l.map.clone(),
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

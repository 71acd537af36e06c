//! The program's global and static variables as symmetric objects.
//!
//! OpenSHMEM makes the data segment (`.data`, `.bss`) of the program symmetric. This module
//! finds that segment and what is symmetric in it, and hands it to the runtime as a symmetric
//! region ([`rshmem::RegionMemory`], [`rshmem::World::register_region`]); the runtime does the
//! rest (sharing the pages, mapping the peers' copies, translating and checking every address
//! that RMA, atomics, signals, waits and collectives are given).
//!
//! At `shmem_init`, before the runtime starts threads, the writable `PT_LOAD` segment of the
//! main executable, **except its RELRO pages** (`PT_GNU_RELRO`: `.dynamic`, `.got`,
//! `.init_array`, `.data.rel.ro`, which the loader made read-only), is moved onto shared memory
//! in place ([`rshmem::RegionMemory::share_in_place`]); the RELRO pages keep their private
//! read-only mapping. After the runtime has started, the segment is registered with a layout:
//!
//! * its **variables**, from the program's ELF symbol table (`.symtab`, read from
//!   `/proc/self/exe`): a range that runs past the end of its variable, or an address inside no
//!   variable (padding, the loader's `.got.plt`), is an error naming the call;
//! * the RELRO range, refused with a message naming it; for a stripped program (no symbol
//!   table) also the loader's sections (`.dynamic`, `.got`, `.got.plt`, from the section
//!   headers), and ranges are otherwise checked against the segment only.
//!
//! Like every symmetric region, the data segment of a PE of this host is reached by load/store,
//! that of a PE of another host through the remote transport serving it (TCP or UCX; not
//! verbs), see `rshmem::region`.
//!
//! Set `RSHMEM_CAPI_DATA_SEGMENT=0` to leave the data segment alone (then only the symmetric
//! heap is symmetric).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use rshmem::{RegionLayout, RegionMemory, RegionObject};

/// This process's data segment, moved onto shared memory (done once per process), and what
/// is symmetric in it.
#[derive(Debug)]
pub struct Local {
    mem: RegionMemory,
    layout: RegionLayout,
}

static LOCAL: OnceLock<Option<Local>> = OnceLock::new();

/// Variables: (start, end, name), sorted.
type Vars = Vec<(usize, usize, String)>;
/// Loader sections: (start, end, name).
type Loader = Vec<(usize, usize, &'static str)>;

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

/// Moves this process's data segment onto shared memory (once per process, before the runtime
/// starts threads). Failures leave the segment private: they are printed, and calls on a
/// peer's static variable then fail naming the PE.
pub fn prepare(call: &str) -> Option<&'static Local> {
    LOCAL
        .get_or_init(|| {
            if std::env::var("RSHMEM_CAPI_DATA_SEGMENT").is_ok_and(|v| v == "0") {
                return None;
            }
            match find() {
                Ok(l) => Some(l),
                Err(e) => {
                    crate::report(
                        call,
                        format_args!("global/static variables are not symmetric: {e}"),
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// **Collective.** Registers the data segment (or, where [`prepare`] found none, nothing) as
/// a symmetric region of `world`.
pub fn register(world: &rshmem::World, local: Option<&Local>) -> rshmem::Result<()> {
    let layout = local.map_or_else(RegionLayout::default, |l| l.layout.clone());
    world.register_region(local.map(|l| &l.mem), layout)
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

fn find() -> Result<Local, String> {
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
    let (vars, loader) = read_elf(f.bias);
    let obj = |start, end, name: String| RegionObject { start, end, name };
    let mut refused: Vec<RegionObject> = f
        .relro
        .map(|(lo, hi)| {
            obj(
                lo,
                hi,
                "the program's relocation read-only data (PT_GNU_RELRO: .dynamic, .got, ...), \
                 which each PE keeps private and read-only"
                    .into(),
            )
        })
        .into_iter()
        .collect();
    if vars.is_none() {
        refused.extend(loader.into_iter().map(|(lo, hi, name)| {
            obj(
                lo,
                hi,
                format!("the program's {name} (dynamic loader data)"),
            )
        }));
    }
    let layout = RegionLayout {
        name: "the program's data segment".into(),
        objects: vars.map(|v| v.into_iter().map(|(s, e, n)| obj(s, e, n)).collect()),
        refused,
    };
    // SAFETY: [start, end) is the program's writable segment past its RELRO pages: mapped
    // read-write, private, and (called at init, before the runtime starts threads) written by
    // no other thread.
    let mem = unsafe { RegionMemory::share_in_place(start as *mut u8, end - start) }
        .map_err(|e| e.to_string())?;
    Ok(Local { mem, layout })
}

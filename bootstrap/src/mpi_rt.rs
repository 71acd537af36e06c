//! MPI found at run time: no link to an MPI library, `dlsym`/`dlopen` instead.
//!
//! Two users:
//!
//! * A job started by `mpirun`, `srun` or `mpiexec` with nothing set ([`crate::from_env`] with
//!   no `RSHMEM_BOOTSTRAP_ADDR` and rshmem built without the `mpi` feature): the MPI library is
//!   taken from the process if the program links it, else opened (`RSHMEM_MPI_LIB`, else the
//!   usual sonames: Open MPI's `libmpi.so.40`, MPICH's `libmpi.so.12`, …); MPI is initialized if
//!   the program has not done it, rank 0 of `MPI_COMM_WORLD` makes the TCP rendezvous id
//!   (address and fresh secret) and broadcasts it, and MPI is finalized again if rshmem
//!   initialized it. The PEs then meet through the ordinary [`TcpBootstrap`].
//! * `librshmem`'s `RSHMEM_INIT_WITH_MPI_COMM`: the same broadcast over the program's own
//!   communicator ([`uid_over_comm`]).
//!
//! Both MPI ABIs in use are handled: Open MPI's (handles are pointers to the library's
//! objects: `MPI_COMM_WORLD` is `&ompi_mpi_comm_world`, `MPI_BYTE` `&ompi_mpi_byte`) and the
//! MPICH ABI shared by MPICH, Intel MPI, MVAPICH and Cray MPICH (handles are `int`s with fixed
//! values).

// Without the `mpi` feature `from_env` uses `bootstrap`; with it only `uid_over_comm` is used.
#![cfg_attr(feature = "mpi", allow(dead_code, unused_imports))]

use std::ffi::{c_int, c_void, CStr, CString};
use std::net::{IpAddr, Ipv4Addr, TcpListener, ToSocketAddrs};
use std::time::Duration;

use crate::env::{LaunchInfo, Launcher};
use crate::{Bootstrap, Error, Result, SingletonBootstrap, TcpBootstrap, UniqueId};

/// Bytes of the unique id's text broadcast from rank 0 (NUL-padded).
const LEN: usize = 128;
/// `MPI_BYTE` in the MPICH ABI.
const MPICH_MPI_BYTE: c_int = 0x4c00010d;
/// `MPI_COMM_WORLD` in the MPICH ABI.
const MPICH_COMM_WORLD: c_int = 0x44000000;

/// Libraries tried, in order, when the program does not link MPI itself (`RSHMEM_MPI_LIB`
/// comes first when set).
const SONAMES: &[&str] = &[
    "libmpi.so.40",
    "libmpi.so.12",
    "libmpich.so.12",
    "libmpi.so",
    "libmpich.so",
];

/// The MPI functions rshmem calls, resolved in one library.
struct Mpi {
    /// Where they came from, for messages.
    from: String,
    /// Open MPI's `&ompi_mpi_byte` (then handles are pointers), or null for the MPICH ABI.
    ompi_byte: *mut c_void,
    /// Open MPI's `&ompi_mpi_comm_world` (null for the MPICH ABI).
    ompi_world: *mut c_void,
    rank: *mut c_void,
    size: *mut c_void,
    bcast: *mut c_void,
    initialized: *mut c_void,
    finalized: *mut c_void,
    init: *mut c_void,
    finalize: *mut c_void,
}

/// An MPI communicator of either ABI.
#[derive(Clone, Copy)]
enum Comm {
    Ompi(*mut c_void),
    Mpich(c_int),
}

type OmpiRank = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
type OmpiBcast = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, c_int, *mut c_void) -> c_int;
type MpichRank = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
type MpichBcast = unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, c_int) -> c_int;
type Flag = unsafe extern "C" fn(*mut c_int) -> c_int;
type Init = unsafe extern "C" fn(*mut c_int, *mut *mut *mut i8) -> c_int;
type Finalize = unsafe extern "C" fn() -> c_int;

fn check(what: &str, r: c_int) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Error::Config(format!("{what} returned MPI error {r}")))
    }
}

impl Mpi {
    /// Resolves the functions in `handle` (`RTLD_DEFAULT`: the process) or fails naming the
    /// first one missing.
    fn resolve(handle: *mut c_void, from: String) -> Result<Self> {
        let sym = |name: &CStr| -> Result<*mut c_void> {
            // SAFETY: dlsym with a handle from dlopen (or RTLD_DEFAULT) and a NUL-terminated
            // name only looks the symbol up.
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            if p.is_null() {
                Err(Error::Config(format!(
                    "{} is not in {from}",
                    name.to_string_lossy()
                )))
            } else {
                Ok(p)
            }
        };
        // SAFETY: as in `sym`; these two may be absent (the MPICH ABI).
        let (ompi_byte, ompi_world) = unsafe {
            (
                libc::dlsym(handle, c"ompi_mpi_byte".as_ptr()),
                libc::dlsym(handle, c"ompi_mpi_comm_world".as_ptr()),
            )
        };
        Ok(Mpi {
            ompi_byte,
            ompi_world,
            rank: sym(c"MPI_Comm_rank")?,
            size: sym(c"MPI_Comm_size")?,
            bcast: sym(c"MPI_Bcast")?,
            initialized: sym(c"MPI_Initialized")?,
            finalized: sym(c"MPI_Finalized")?,
            init: sym(c"MPI_Init")?,
            finalize: sym(c"MPI_Finalize")?,
            from,
        })
    }

    /// The MPI of the process (the program links it), else the first library of
    /// `RSHMEM_MPI_LIB` and [`SONAMES`] that opens. The library stays loaded.
    fn load() -> Result<Self> {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
        if !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"MPI_Init".as_ptr()) }.is_null() {
            return Self::resolve(libc::RTLD_DEFAULT, "the program's MPI library".into());
        }
        let explicit = std::env::var("RSHMEM_MPI_LIB")
            .ok()
            .filter(|v| !v.trim().is_empty());
        let names: Vec<String> = explicit
            .iter()
            .cloned()
            .chain(SONAMES.iter().map(|s| s.to_string()))
            .collect();
        let mut tried = Vec::new();
        for name in &names {
            let Ok(c) = CString::new(name.as_str()) else {
                tried.push(format!("{name:?} (contains NUL)"));
                continue;
            };
            // SAFETY: dlopen of a library by name; RTLD_GLOBAL because Open MPI's components
            // (opened by libmpi itself) need libmpi's symbols.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if h.is_null() {
                // SAFETY: dlerror returns NULL or a NUL-terminated message of this thread.
                let e = unsafe { libc::dlerror() };
                let why = if e.is_null() {
                    "not found".to_string()
                } else {
                    // SAFETY: non-null, NUL-terminated (dlerror's contract).
                    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
                };
                tried.push(format!("{name} ({why})"));
                if explicit.as_deref() == Some(name.as_str()) {
                    return Err(Error::Config(format!(
                        "RSHMEM_MPI_LIB={name}: cannot open it: {why}"
                    )));
                }
                continue;
            }
            return Self::resolve(h, name.clone());
        }
        Err(Error::Config(format!(
            "no MPI library found to bootstrap through (tried {}): set RSHMEM_MPI_LIB to the \
             path of the launcher's libmpi.so, or export RSHMEM_BOOTSTRAP_ADDR=<host of rank \
             0>:<port> and RSHMEM_BOOTSTRAP_SECRET to every rank for the TCP bootstrap",
            tried.join(", ")
        )))
    }

    /// `MPI_COMM_WORLD`.
    fn world(&self) -> Comm {
        if self.ompi_byte.is_null() {
            Comm::Mpich(MPICH_COMM_WORLD)
        } else {
            Comm::Ompi(self.ompi_world)
        }
    }

    fn flag(&self, what: &str, f: *mut c_void) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: `f` is MPI_Initialized or MPI_Finalized, which take an int pointer.
        let r = unsafe { std::mem::transmute::<*mut c_void, Flag>(f)(&mut v) };
        check(what, r)?;
        Ok(v != 0)
    }

    /// (rank, size) in `comm`.
    ///
    /// # Safety
    /// `comm` is a valid communicator of this MPI, which is initialized.
    unsafe fn rank_size(&self, comm: Comm) -> Result<(c_int, c_int)> {
        let (mut rank, mut size) = (0 as c_int, 0 as c_int);
        match comm {
            Comm::Ompi(c) => {
                // SAFETY: the symbols have these signatures in Open MPI's ABI; `c` is valid.
                unsafe {
                    let (rf, sf) = (
                        std::mem::transmute::<*mut c_void, OmpiRank>(self.rank),
                        std::mem::transmute::<*mut c_void, OmpiRank>(self.size),
                    );
                    check("MPI_Comm_rank", rf(c, &mut rank))?;
                    check("MPI_Comm_size", sf(c, &mut size))?;
                }
            }
            Comm::Mpich(c) => {
                // SAFETY: the symbols have these signatures in the MPICH ABI; `c` is valid.
                unsafe {
                    let (rf, sf) = (
                        std::mem::transmute::<*mut c_void, MpichRank>(self.rank),
                        std::mem::transmute::<*mut c_void, MpichRank>(self.size),
                    );
                    check("MPI_Comm_rank", rf(c, &mut rank))?;
                    check("MPI_Comm_size", sf(c, &mut size))?;
                }
            }
        }
        if size < 1 || rank < 0 || rank >= size {
            return Err(Error::Config(format!(
                "MPI ({}) reports rank {rank} of {size}",
                self.from
            )));
        }
        Ok((rank, size))
    }

    /// Broadcasts `buf` from rank 0 of `comm`.
    ///
    /// # Safety
    /// As [`Mpi::rank_size`].
    unsafe fn bcast(&self, comm: Comm, buf: &mut [u8; LEN]) -> Result<()> {
        let r = match comm {
            // SAFETY: the signature of Open MPI's MPI_Bcast; buf holds LEN bytes on every rank.
            Comm::Ompi(c) => unsafe {
                std::mem::transmute::<*mut c_void, OmpiBcast>(self.bcast)(
                    buf.as_mut_ptr().cast(),
                    LEN as c_int,
                    self.ompi_byte,
                    0,
                    c,
                )
            },
            // SAFETY: the signature of the MPICH ABI's MPI_Bcast; as above.
            Comm::Mpich(c) => unsafe {
                std::mem::transmute::<*mut c_void, MpichBcast>(self.bcast)(
                    buf.as_mut_ptr().cast(),
                    LEN as c_int,
                    MPICH_MPI_BYTE,
                    0,
                    c,
                )
            },
        };
        check("MPI_Bcast", r)
    }

    /// Rank, size, and rank 0's unique id (made by `make` there) over `comm`. A rank 0 whose
    /// `make` fails still broadcasts (an empty text), so no rank is left waiting.
    ///
    /// # Safety
    /// As [`Mpi::rank_size`].
    unsafe fn exchange(
        &self,
        comm: Comm,
        make: &mut dyn FnMut() -> Result<UniqueId>,
    ) -> Result<(usize, usize, UniqueId)> {
        // SAFETY: the caller's contract.
        let (rank, size) = unsafe { self.rank_size(comm) }?;
        let mut buf = [0u8; LEN];
        let mut made = Ok(());
        if rank == 0 {
            made = make().and_then(|id| {
                let text = id.to_string();
                if text.len() >= LEN {
                    return Err(Error::Config(format!(
                        "the unique id {text:?} is longer than {} bytes",
                        LEN - 1
                    )));
                }
                buf[..text.len()].copy_from_slice(text.as_bytes());
                Ok(())
            });
        }
        // SAFETY: the caller's contract.
        unsafe { self.bcast(comm, &mut buf) }?;
        made?;
        if buf[0] == 0 {
            return Err(Error::Config(
                "MPI rank 0 could not make the rendezvous id (see its message)".into(),
            ));
        }
        let text: String = buf
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as char)
            .collect();
        let id = text.parse().map_err(|e| {
            Error::Config(format!("the rendezvous id received from MPI rank 0: {e}"))
        })?;
        Ok((rank as usize, size as usize, id))
    }
}

/// **Collective over `*comm`.** Rank, size and a unique id made by rank 0 with `make` and
/// broadcast to the others, over the communicator `*comm` of the MPI the program links and
/// has initialized (found with `dlsym`). For `librshmem`'s `RSHMEM_INIT_WITH_MPI_COMM`.
///
/// # Safety
/// `comm` is NULL (an error) or points to a valid `MPI_Comm` of an initialized MPI in this
/// process.
pub unsafe fn uid_over_comm(
    comm: *const c_void,
    make: &mut dyn FnMut() -> Result<UniqueId>,
) -> Result<(usize, usize, UniqueId)> {
    if comm.is_null() {
        return Err(Error::InvalidArgument(
            "the MPI communicator pointer is NULL".into(),
        ));
    }
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    if unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"MPI_Comm_rank".as_ptr()) }.is_null() {
        return Err(Error::Config(
            "MPI_Comm_rank is not in the process: link the program with its MPI library and \
             call MPI_Init first"
                .into(),
        ));
    }
    let mpi = Mpi::resolve(libc::RTLD_DEFAULT, "the program's MPI library".into())?;
    let c = if mpi.ompi_byte.is_null() {
        // SAFETY: in the MPICH ABI an MPI_Comm is an int; the caller's contract.
        Comm::Mpich(unsafe { *comm.cast::<c_int>() })
    } else {
        // SAFETY: in Open MPI's ABI an MPI_Comm is a pointer; the caller's contract.
        Comm::Ompi(unsafe { *comm.cast::<*mut c_void>() })
    };
    // SAFETY: a valid communicator of an initialized MPI (the caller's contract).
    unsafe { mpi.exchange(c, make) }
}

/// The rendezvous address rank 0 offers: `RSHMEM_TCP_ADDR` (an IP address of this host); else
/// loopback when the launcher says every rank is on this host; else the first non-loopback
/// IPv4 address of this host's name, or loopback when it has none.
fn rendezvous_ip(info: &LaunchInfo) -> Result<IpAddr> {
    if let Some(a) = std::env::var("RSHMEM_TCP_ADDR")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return a
            .trim()
            .parse()
            .map_err(|_| Error::env("RSHMEM_TCP_ADDR", &a, "expected an IP address"));
    }
    if info.local_size == Some(info.size) {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let name: String = if ok {
        buf.iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as char)
            .collect()
    } else {
        String::new()
    };
    Ok((name.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(|s| s.is_ipv4() && !s.ip().is_loopback()))
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |s| s.ip()))
}

/// **Collective.** The TCP bootstrap of a job started by an MPI launcher with nothing set:
/// the rendezvous id goes from rank 0 to the others over `MPI_COMM_WORLD` of the MPI found at
/// run time (module documentation). MPI's rank and size must match the launcher's variables.
pub(crate) fn bootstrap(
    mut info: LaunchInfo,
    timeout: Option<Duration>,
) -> Result<(LaunchInfo, Box<dyn Bootstrap>)> {
    if info.size == 1 && info.launcher != Launcher::Singleton {
        return Ok((info, Box::new(SingletonBootstrap::new())));
    }
    let mpi = Mpi::load()?;
    let started = if mpi.flag("MPI_Initialized", mpi.initialized)? {
        false
    } else {
        if mpi.flag("MPI_Finalized", mpi.finalized)? {
            return Err(Error::Config(
                "MPI is already finalized: rshmem cannot bootstrap through it; call shmem_init \
                 (or rshmem's init) before MPI_Finalize, or use the TCP bootstrap \
                 (RSHMEM_BOOTSTRAP_ADDR and RSHMEM_BOOTSTRAP_SECRET)"
                    .into(),
            ));
        }
        // SAFETY: MPI_Init(NULL, NULL) is allowed (MPI-2 and later) in a process where MPI
        // is neither initialized nor finalized (checked just above).
        let r = unsafe {
            std::mem::transmute::<*mut c_void, Init>(mpi.init)(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(&format!("MPI_Init ({})", mpi.from), r)?;
        true
    };
    let mut listener = None;
    let mut make = || {
        let ip = rendezvous_ip(&info)?;
        let l = TcpListener::bind((ip, 0)).map_err(|e| {
            Error::Config(format!(
                "listening on {ip} for the bootstrap rendezvous: {e} (set RSHMEM_TCP_ADDR to an \
                 address of this host)"
            ))
        })?;
        let addr = l
            .local_addr()
            .map_err(|e| Error::Config(format!("the rendezvous listener's address: {e}")))?;
        listener = Some(l);
        UniqueId::new(addr.to_string())
    };
    // SAFETY: MPI_COMM_WORLD of an initialized MPI.
    let got = unsafe { mpi.exchange(mpi.world(), &mut make) };
    if started {
        // SAFETY: rshmem initialized MPI above and is done with it; the program does not use
        // it (it would have initialized it itself).
        let r = unsafe { std::mem::transmute::<*mut c_void, Finalize>(mpi.finalize)() };
        check("MPI_Finalize", r)?;
    }
    let (rank, size, uid) = got?;
    if info.launcher == Launcher::Singleton {
        info.local_rank = None;
        info.local_size = None;
    } else if (rank, size) != (info.rank, info.size) {
        return Err(Error::Config(format!(
            "MPI_COMM_WORLD ({}) says this is rank {rank} of {size}, but the {} launcher's \
             variables say rank {} of {}; set RSHMEM_LAUNCHER to the launcher that started the \
             job, or use the TCP bootstrap (RSHMEM_BOOTSTRAP_ADDR and RSHMEM_BOOTSTRAP_SECRET)",
            mpi.from, info.launcher, info.rank, info.size
        )));
    }
    info.rank = rank;
    info.size = size;
    tracing::debug!(rank, size, from = %mpi.from, addr = uid.addr(), "bootstrap: rendezvous id over MPI");
    let boot = TcpBootstrap::new(rank, size, &uid, timeout, listener)?;
    Ok((info, Box::new(boot)))
}

//! Rank discovery from the launcher's environment variables.

use std::fmt;
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::singleton::SingletonBootstrap;
use crate::tcp::TcpBootstrap;
use crate::uid::{secret_from_hex, validate_addr, UniqueId, SECRET_LEN};
use crate::Bootstrap;

/// One environment variable read by this crate (for `--help`-style tables and the runtime's
/// merged configuration table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// What kind of value it takes, e.g. `integer` or `host:port`.
    pub kind: &'static str,
    /// Its default when unset (empty: none).
    pub default: &'static str,
    /// One-line description.
    pub help: &'static str,
}

/// Every environment variable this crate (library and `rshmemrun`) reads.
pub static ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "RSHMEM_RANK",
        kind: "integer",
        default: "",
        help: "This PE's rank, 0..RSHMEM_SIZE (set by rshmemrun). Takes precedence over other launchers' variables.",
    },
    EnvVar {
        name: "RSHMEM_SIZE",
        kind: "integer",
        default: "",
        help: "Number of PEs in the job (set by rshmemrun; must be set together with RSHMEM_RANK).",
    },
    EnvVar {
        name: "RSHMEM_LOCAL_RANK",
        kind: "integer",
        default: "",
        help: "This PE's rank among the PEs on its host (set by rshmemrun).",
    },
    EnvVar {
        name: "RSHMEM_LOCAL_SIZE",
        kind: "integer",
        default: "",
        help: "Number of PEs on this host (set by rshmemrun).",
    },
    EnvVar {
        name: "RSHMEM_BOOTSTRAP_ADDR",
        kind: "host:port",
        default: "",
        help: "Where rank 0 listens for the bootstrap rendezvous; required when there is more than one PE. Export the same value to every rank.",
    },
    EnvVar {
        name: "RSHMEM_BOOTSTRAP_SECRET",
        kind: "32 hex digits",
        default: "",
        help: "Job secret every rank and rank 0 prove to each other (it is never sent) (e.g. $(openssl rand -hex 16)). Pass it in the environment (mpirun -x RSHMEM_BOOTSTRAP_SECRET with the variable exported), never as a command-line value. The TCP bootstrap of a multi-PE job needs it or RSHMEM_BOOTSTRAP_SECRET_FILE (rshmemrun sets it).",
    },
    EnvVar {
        name: "RSHMEM_BOOTSTRAP_SECRET_FILE",
        kind: "path",
        default: "",
        help: "A file holding the job secret (32 hex digits), owned by the user running the PE and with no group/other permissions (chmod 600); refused otherwise. Use instead of RSHMEM_BOOTSTRAP_SECRET, not with it.",
    },
    EnvVar {
        name: "RSHMEM_BOOTSTRAP_LISTEN_FD",
        kind: "file descriptor",
        default: "",
        help: "Rank 0 only: an inherited, already listening TCP socket to use instead of binding RSHMEM_BOOTSTRAP_ADDR (set by rshmemrun).",
    },
    EnvVar {
        name: "RSHMEM_LAUNCHER",
        kind: "rshmemrun|torchrun|openmpi|slurm|pmi|singleton",
        default: "auto",
        help: "Which launcher's variables to read; unset means detect (RSHMEM_*, then torchrun, then Open MPI, then Slurm, then PMI, else singleton; variables of a launcher rshmem cannot join are an error). rshmemrun sets it to rshmemrun.",
    },
    EnvVar {
        name: "RSHMEM_BOOTSTRAP",
        kind: "auto|mpi|tcp",
        default: "auto",
        help: "Bootstrap of a multi-PE job: mpi (through MPI_COMM_WORLD: built with the mpi feature, its collectives; else the MPI library found at run time hands rank 0's rendezvous address and a fresh secret to every rank, then the ranks meet over TCP) or tcp (the RSHMEM_BOOTSTRAP_ADDR rendezvous). auto: mpi when started by mpirun/srun/PMI and RSHMEM_BOOTSTRAP_ADDR is unset; else tcp.",
    },
    EnvVar {
        name: "RSHMEM_MPI_LIB",
        kind: "path or soname",
        default: "",
        help: "The MPI library to open for the MPI bootstrap of a build without the mpi feature, when the program does not link MPI itself (default: the first of libmpi.so.40, libmpi.so.12, libmpich.so.12, libmpi.so, libmpich.so that opens). Use the library of the mpirun that starts the job.",
    },
    EnvVar {
        name: "RSHMEM_RUN_TIMEOUT",
        kind: "seconds",
        default: "",
        help: "rshmemrun only: kill all PEs after this many seconds and exit 124 (same as --timeout).",
    },
    EnvVar {
        name: "OMPI_COMM_WORLD_RANK",
        kind: "integer",
        default: "",
        help: "Rank under Open MPI's mpirun.",
    },
    EnvVar {
        name: "OMPI_COMM_WORLD_SIZE",
        kind: "integer",
        default: "",
        help: "Job size under Open MPI's mpirun.",
    },
    EnvVar {
        name: "OMPI_COMM_WORLD_LOCAL_RANK",
        kind: "integer",
        default: "",
        help: "Node-local rank under Open MPI's mpirun.",
    },
    EnvVar {
        name: "OMPI_COMM_WORLD_LOCAL_SIZE",
        kind: "integer",
        default: "",
        help: "Number of ranks on this node under Open MPI's mpirun.",
    },
    EnvVar {
        name: "PMIX_RANK",
        kind: "integer",
        default: "",
        help: "Rank under a PMIx launcher; used when OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not. Alone (no launcher detected) it marks a launch rshmem cannot join: an error, not a singleton.",
    },
    EnvVar {
        name: "SLURM_PROCID",
        kind: "integer",
        default: "",
        help: "Rank under srun.",
    },
    EnvVar {
        name: "SLURM_NTASKS",
        kind: "integer",
        default: "",
        help: "Job size under srun.",
    },
    EnvVar {
        name: "SLURM_LOCALID",
        kind: "integer",
        default: "",
        help: "Node-local rank under srun.",
    },
    EnvVar {
        name: "PMI_RANK",
        kind: "integer",
        default: "",
        help: "Rank under a PMI-1/PMI-2 launcher (MPICH/Intel MPI hydra).",
    },
    EnvVar {
        name: "PMI_SIZE",
        kind: "integer",
        default: "",
        help: "Job size under a PMI-1/PMI-2 launcher.",
    },
    EnvVar {
        name: "RANK",
        kind: "integer",
        default: "",
        help: "Rank under torchrun (torch.distributed.run).",
    },
    EnvVar {
        name: "WORLD_SIZE",
        kind: "integer",
        default: "",
        help: "Job size under torchrun.",
    },
    EnvVar {
        name: "LOCAL_RANK",
        kind: "integer",
        default: "",
        help: "Node-local rank under torchrun.",
    },
    EnvVar {
        name: "LOCAL_WORLD_SIZE",
        kind: "integer",
        default: "",
        help: "Number of ranks on this node under torchrun.",
    },
    EnvVar {
        name: "MASTER_ADDR",
        kind: "host",
        default: "",
        help: "torchrun's rank-0 host: without RSHMEM_BOOTSTRAP_ADDR, the bootstrap listens at MASTER_ADDR:(MASTER_PORT+1).",
    },
    EnvVar {
        name: "MASTER_PORT",
        kind: "port",
        default: "",
        help: "torchrun's store port (used by torch itself): without RSHMEM_BOOTSTRAP_ADDR, the bootstrap uses the next port.",
    },
    EnvVar {
        name: "TORCHELASTIC_RUN_ID",
        kind: "string",
        default: "",
        help: "Marks a torchrun worker (detection).",
    },
    EnvVar {
        name: "MV2_COMM_WORLD_RANK",
        kind: "integer",
        default: "",
        help: "Read only to detect a MVAPICH2 launch, which rshmem cannot join without RSHMEM_* variables: an error instead of a silent singleton.",
    },
    EnvVar {
        name: "PALS_RANKID",
        kind: "integer",
        default: "",
        help: "Read only to detect an HPE PALS (Cray) launch, which rshmem cannot join without RSHMEM_* variables: an error instead of a silent singleton.",
    },
    EnvVar {
        name: "ALPS_APP_PE",
        kind: "integer",
        default: "",
        help: "Read only to detect a Cray ALPS (aprun) launch, which rshmem cannot join without RSHMEM_* variables: an error instead of a silent singleton.",
    },
];

/// Which launcher started this process (decides which variables were read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Launcher {
    /// No launcher: a single PE.
    Singleton,
    /// `rshmemrun`, or anything that sets `RSHMEM_RANK`/`RSHMEM_SIZE`.
    Rshmemrun,
    /// Open MPI's `mpirun`/`prterun` (`OMPI_COMM_WORLD_*`, `PMIX_RANK`).
    OpenMpi,
    /// Slurm's `srun` (`SLURM_*`).
    Slurm,
    /// A PMI launcher such as MPICH's hydra (`PMI_RANK`, `PMI_SIZE`).
    Pmi,
    /// PyTorch's `torchrun` (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
    /// `MASTER_ADDR`, `MASTER_PORT`).
    Torchrun,
}

impl Launcher {
    /// The name used in `RSHMEM_LAUNCHER` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Singleton => "singleton",
            Launcher::Rshmemrun => "rshmemrun",
            Launcher::OpenMpi => "openmpi",
            Launcher::Slurm => "slurm",
            Launcher::Pmi => "pmi",
            Launcher::Torchrun => "torchrun",
        }
    }

    fn parse(s: &str) -> Option<Launcher> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "singleton" | "none" => Launcher::Singleton,
            "rshmemrun" | "rshmem" => Launcher::Rshmemrun,
            "openmpi" | "ompi" | "mpirun" => Launcher::OpenMpi,
            "slurm" | "srun" => Launcher::Slurm,
            "pmi" | "hydra" => Launcher::Pmi,
            "torchrun" | "torch" => Launcher::Torchrun,
            _ => return None,
        })
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    /// This PE's rank, `0..size`.
    pub rank: usize,
    /// Number of PEs in the job.
    pub size: usize,
    /// Rank among the PEs on this host, when the launcher says.
    pub local_rank: Option<usize>,
    /// Number of PEs on this host, when the launcher says.
    pub local_size: Option<usize>,
    /// The launcher whose variables were read.
    pub launcher: Launcher,
    /// The rendezvous (rank 0's address and the job secret); `Some` exactly when `size > 1`.
    pub uid: Option<UniqueId>,
    /// Rank 0 only: an inherited listening socket (`RSHMEM_BOOTSTRAP_LISTEN_FD`).
    pub listen_fd: Option<i32>,
}

/// Variables that mark a multi-process launch by a launcher rshmem cannot join by itself, with
/// the launcher's name: seeing one with no launcher detected is an error, not a singleton.
const FOREIGN_MARKERS: [(&str, &str); 4] = [
    (
        "PMIX_RANK",
        "a PMIx launcher (prterun, or another MPI's mpirun)",
    ),
    ("MV2_COMM_WORLD_RANK", "MVAPICH2"),
    ("PALS_RANKID", "HPE PALS (Cray mpiexec)"),
    ("ALPS_APP_PE", "Cray ALPS (aprun)"),
];

impl LaunchInfo {
    /// Reads the process environment. See [`LaunchInfo::from_lookup`].
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(&env_lookup)
    }

    /// Reads the launcher's variables through `lookup` (testable without touching the
    /// process environment). Empty values count as unset.
    ///
    /// Precedence (unless `RSHMEM_LAUNCHER` names one): `RSHMEM_RANK`/`RSHMEM_SIZE`, then Open
    /// MPI's `OMPI_COMM_WORLD_RANK`/`SIZE` (`PMIX_RANK` as the rank fallback), then Slurm's
    /// `SLURM_PROCID`/`SLURM_NTASKS`, then `PMI_RANK`/`PMI_SIZE`; with none of them the process
    /// is a singleton (rank 0 of 1).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        Self::with_bootstrap_choice(lookup).map(|(info, _)| info)
    }

    /// [`LaunchInfo::from_lookup`], and whether the job bootstraps through MPI (then `uid` is
    /// `None` and `RSHMEM_BOOTSTRAP_ADDR` is not needed).
    fn with_bootstrap_choice(lookup: &dyn Fn(&str) -> Option<String>) -> Result<(Self, bool)> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let launcher = match get("RSHMEM_LAUNCHER") {
            Some(v) => Launcher::parse(&v).ok_or_else(|| {
                Error::env(
                    "RSHMEM_LAUNCHER",
                    &v,
                    "expected one of rshmemrun, torchrun, openmpi, slurm, pmi, singleton (or unset to detect)",
                )
            })?,
            None => detect(&get)?,
        };

        let (rank, size, local_rank, local_size) = match launcher {
            Launcher::Singleton => (0, 1, Some(0), Some(1)),
            Launcher::Rshmemrun => {
                let (r, s) = rank_and_size(&get, launcher, &["RSHMEM_RANK"], "RSHMEM_SIZE")?;
                let (lr, ls) = locals(&get, "RSHMEM_LOCAL_RANK", Some("RSHMEM_LOCAL_SIZE"))?;
                (r, s, lr, ls)
            }
            Launcher::OpenMpi => {
                let (r, s) = rank_and_size(
                    &get,
                    launcher,
                    &["OMPI_COMM_WORLD_RANK", "PMIX_RANK"],
                    "OMPI_COMM_WORLD_SIZE",
                )?;
                let (lr, ls) = locals(
                    &get,
                    "OMPI_COMM_WORLD_LOCAL_RANK",
                    Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
                )?;
                (r, s, lr, ls)
            }
            Launcher::Slurm => {
                let (r, s) = rank_and_size(&get, launcher, &["SLURM_PROCID"], "SLURM_NTASKS")?;
                let (lr, ls) = locals(&get, "SLURM_LOCALID", None)?;
                (r, s, lr, ls)
            }
            Launcher::Pmi => {
                let (r, s) = rank_and_size(&get, launcher, &["PMI_RANK"], "PMI_SIZE")?;
                (r, s, None, None)
            }
            Launcher::Torchrun => {
                let (r, s) = rank_and_size(&get, launcher, &["RANK"], "WORLD_SIZE")?;
                let (lr, ls) = locals(&get, "LOCAL_RANK", Some("LOCAL_WORLD_SIZE"))?;
                (r, s, lr, ls)
            }
        };

        let use_mpi = wants_mpi(&get, launcher)?;
        let mut uid = None;
        let mut listen_fd = None;
        if size > 1 && !use_mpi {
            let id = rendezvous_id(&get, launcher, rank, size)?;
            if rank == 0 {
                if let Some(v) = get("RSHMEM_BOOTSTRAP_LISTEN_FD") {
                    let fd: i32 = v.trim().parse().ok().filter(|&fd| fd >= 0).ok_or_else(|| {
                        Error::env(
                            "RSHMEM_BOOTSTRAP_LISTEN_FD",
                            &v,
                            "not a file descriptor number (a non-negative integer)",
                        )
                    })?;
                    listen_fd = Some(fd);
                }
            }
            uid = Some(id);
        }
        Ok((
            LaunchInfo {
                rank,
                size,
                local_rank,
                local_size,
                launcher,
                uid,
                listen_fd,
            },
            use_mpi,
        ))
    }
}

/// This process's rank as its launcher's variables give it, for messages written before (or
/// without) a bootstrap: `None` when no launcher is detected or the rank variable is missing
/// or malformed. Reads the same variables as [`LaunchInfo::from_env`] (honouring
/// `RSHMEM_LAUNCHER`) but needs no address or secret, so it works even when start-up fails.
pub fn launcher_rank() -> Option<usize> {
    launcher_rank_from(&env_lookup)
}

/// The launcher this process's environment names (`RSHMEM_LAUNCHER`) or looks like (the
/// variables [`LaunchInfo::from_env`] detects), without reading rank, size, address or secret.
///
/// # Errors
/// [`Error::Env`] when `RSHMEM_LAUNCHER` names no launcher; [`Error::Config`] when the
/// variables of a launcher rshmem cannot join (e.g. `PMIX_RANK` alone) are present.
pub fn detect_launcher() -> Result<Launcher> {
    detect_launcher_from(&env_lookup)
}

fn detect_launcher_from(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Launcher> {
    let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    match get("RSHMEM_LAUNCHER") {
        Some(v) => Launcher::parse(&v).ok_or_else(|| {
            Error::env(
                "RSHMEM_LAUNCHER",
                &v,
                "expected one of rshmemrun, torchrun, openmpi, slurm, pmi, singleton (or unset to detect)",
            )
        }),
        None => detect(&get),
    }
}

fn launcher_rank_from(lookup: &dyn Fn(&str) -> Option<String>) -> Option<usize> {
    let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let launcher = match get("RSHMEM_LAUNCHER") {
        Some(v) => Launcher::parse(&v)?,
        None => detect(&get).ok()?,
    };
    let rank_vars: &[&str] = match launcher {
        Launcher::Singleton => return Some(0),
        Launcher::Rshmemrun => &["RSHMEM_RANK"],
        Launcher::OpenMpi => &["OMPI_COMM_WORLD_RANK", "PMIX_RANK"],
        Launcher::Slurm => &["SLURM_PROCID"],
        Launcher::Pmi => &["PMI_RANK"],
        Launcher::Torchrun => &["RANK"],
    };
    rank_vars
        .iter()
        .find_map(|&n| get(n))
        .and_then(|v| v.trim().parse().ok())
}

/// The process environment as a lookup function.
fn env_lookup(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Whether the MPI bootstrap is used (`RSHMEM_BOOTSTRAP`, else automatic: started by Open MPI,
/// Slurm or PMI, and no `RSHMEM_BOOTSTRAP_ADDR`). Built with the `mpi` feature it is
/// [`crate::MpiBootstrap`]; else MPI found at run time (`mpi_rt`) carries the TCP rendezvous id.
fn wants_mpi(get: &dyn Fn(&str) -> Option<String>, launcher: Launcher) -> Result<bool> {
    match get("RSHMEM_BOOTSTRAP") {
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(auto_mpi(get, launcher)),
            "tcp" => Ok(false),
            "mpi" => Ok(true),
            _ => Err(Error::env(
                "RSHMEM_BOOTSTRAP",
                &v,
                "expected one of auto, mpi, tcp (or unset for auto)",
            )),
        },
        None => Ok(auto_mpi(get, launcher)),
    }
}

fn auto_mpi(get: &dyn Fn(&str) -> Option<String>, launcher: Launcher) -> bool {
    matches!(
        launcher,
        Launcher::OpenMpi | Launcher::Slurm | Launcher::Pmi
    ) && get("RSHMEM_BOOTSTRAP_ADDR").is_none()
}

/// Which launcher's variables are present. torchrun comes before the MPI launchers and Slurm
/// because it may itself run under them (one torchrun per node started by srun or mpirun): its
/// variables then describe this process, theirs describe the torchrun agent.
fn detect(get: &dyn Fn(&str) -> Option<String>) -> Result<Launcher> {
    let any = |names: &[&str]| names.iter().any(|n| get(n).is_some());
    Ok(if any(&["RSHMEM_RANK", "RSHMEM_SIZE"]) {
        Launcher::Rshmemrun
    } else if any(&["RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"]) {
        Launcher::Torchrun
    } else if any(&["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"]) {
        Launcher::OpenMpi
    } else if any(&["SLURM_PROCID"]) {
        Launcher::Slurm
    } else if any(&["PMI_RANK", "PMI_SIZE"]) {
        Launcher::Pmi
    } else if let Some((var, who)) = FOREIGN_MARKERS
        .iter()
        .find_map(|&(n, who)| get(n).map(|v| ((n, v), who)))
    {
        return Err(Error::Config(format!(
            "{}={} says this process was started by {who}, whose job rshmem cannot join \
                 by itself: start the program with rshmemrun, Open MPI's mpirun, srun, a PMI \
                 launcher or torchrun, or set RSHMEM_RANK, RSHMEM_SIZE, RSHMEM_BOOTSTRAP_ADDR \
                 and a secret yourself; set RSHMEM_LAUNCHER=singleton if this process is meant \
                 to run alone",
            var.0, var.1
        )));
    } else {
        Launcher::Singleton
    })
}

fn parse_count(var: &str, value: &str) -> Result<usize> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| Error::env(var, value, "not a non-negative integer"))
}

/// Reads a (rank, size) pair: the first of `rank_vars` that is set, and `size_var`.
fn rank_and_size(
    get: &dyn Fn(&str) -> Option<String>,
    launcher: Launcher,
    rank_vars: &[&str],
    size_var: &str,
) -> Result<(usize, usize)> {
    let rank = rank_vars.iter().find_map(|&n| get(n).map(|v| (n, v)));
    let size = get(size_var);
    match (rank, size) {
        (Some((rank_var, rank_val)), Some(size_val)) => {
            let size = parse_count(size_var, &size_val)?;
            if size == 0 {
                return Err(Error::env(
                    size_var,
                    &size_val,
                    "zero PEs: the job size must be at least 1",
                ));
            }
            let rank = parse_count(rank_var, &rank_val)?;
            if rank >= size {
                return Err(Error::env(
                    rank_var,
                    &rank_val,
                    format!("rank {rank} is not below the job size {size} ({size_var})"),
                ));
            }
            Ok((rank, size))
        }
        (Some((rank_var, rank_val)), None) => Err(Error::env(
            rank_var,
            &rank_val,
            format!("{rank_var} is set but {size_var} is not: set both"),
        )),
        (None, Some(size_val)) => Err(Error::env(
            size_var,
            &size_val,
            format!(
                "{size_var} is set but {} is not: set both",
                rank_vars.join(" or ")
            ),
        )),
        (None, None) => Err(Error::Config(format!(
            "RSHMEM_LAUNCHER={launcher} but neither {} nor {size_var} is set",
            rank_vars.join(" nor ")
        ))),
    }
}

/// Reads the optional node-local rank and size.
fn locals(
    get: &dyn Fn(&str) -> Option<String>,
    rank_var: &str,
    size_var: Option<&str>,
) -> Result<(Option<usize>, Option<usize>)> {
    let local_size = match size_var.and_then(|n| get(n).map(|v| (n, v))) {
        Some((n, v)) => {
            let s = parse_count(n, &v)?;
            if s == 0 {
                return Err(Error::env(
                    n,
                    &v,
                    "zero PEs on this host: must be at least 1",
                ));
            }
            Some(s)
        }
        None => None,
    };
    let local_rank = match get(rank_var) {
        Some(v) => {
            let r = parse_count(rank_var, &v)?;
            if let (Some(s), Some(sn)) = (local_size, size_var) {
                if r >= s {
                    return Err(Error::env(
                        rank_var,
                        &v,
                        format!("local rank {r} is not below the local size {s} ({sn})"),
                    ));
                }
            }
            Some(r)
        }
        None => None,
    };
    Ok((local_rank, local_size))
}

/// Builds the unique id of a multi-PE job from `RSHMEM_BOOTSTRAP_ADDR` (under torchrun, else
/// `MASTER_ADDR:(MASTER_PORT+1)`) and the secret, which is required under every launcher.
fn rendezvous_id(
    get: &dyn Fn(&str) -> Option<String>,
    launcher: Launcher,
    rank: usize,
    size: usize,
) -> Result<UniqueId> {
    let addr = match get("RSHMEM_BOOTSTRAP_ADDR") {
        Some(a) => a,
        None if launcher == Launcher::Torchrun => torchrun_addr(get)?,
        None => {
            let mpi_hint = "; or set RSHMEM_BOOTSTRAP=mpi (or unset RSHMEM_BOOTSTRAP) under \
                            mpirun/srun to bootstrap through MPI";
            return Err(Error::Config(format!(
                "this is rank {rank} of {size} (from the {launcher} launcher's variables) but \
                 RSHMEM_BOOTSTRAP_ADDR is not set: export RSHMEM_BOOTSTRAP_ADDR=<host of rank 0>:<port> \
                 to every rank, e.g. `mpirun -x RSHMEM_BOOTSTRAP_ADDR=node0:29500 ...` or \
                 `export RSHMEM_BOOTSTRAP_ADDR=...` before srun; use rshmemrun for single-host jobs, \
                 or set RSHMEM_LAUNCHER=singleton if this process is meant to run alone{mpi_hint}"
            )));
        }
    };
    let addr = addr.trim().to_owned();
    validate_addr(&addr).map_err(|reason| Error::env("RSHMEM_BOOTSTRAP_ADDR", &addr, reason))?;

    let secret = explicit_secret(get)?.ok_or_else(|| {
        let how = match launcher {
            Launcher::Rshmemrun => {
                "rshmemrun sets it; if you set the RSHMEM_* variables yourself, give every rank \
                 the same one"
            }
            Launcher::OpenMpi => "with Open MPI: `mpirun -x RSHMEM_BOOTSTRAP_SECRET ...`",
            Launcher::Slurm => "srun forwards exported variables",
            Launcher::Pmi => "with hydra: `mpiexec -genvlist RSHMEM_BOOTSTRAP_SECRET ...`",
            Launcher::Torchrun => "torchrun's workers inherit it",
            Launcher::Singleton => "",
        };
        Error::Config(format!(
            "this is rank {rank} of {size} (from the {launcher} launcher's variables) but no job \
             secret is set: without one, any process could join the job as one of its ranks. \
             `export RSHMEM_BOOTSTRAP_SECRET=$(openssl rand -hex 16)` and pass it by name to every \
             rank ({how}), never as a value on a command line (`-x VAR=value` is visible to \
             every user), or set RSHMEM_BOOTSTRAP_SECRET_FILE to a file only you can read"
        ))
    })?;
    UniqueId::with_secret(addr, secret)
}

/// torchrun's rank-0 host with the port after torch's own store port.
fn torchrun_addr(get: &dyn Fn(&str) -> Option<String>) -> Result<String> {
    let missing = |what: &str| {
        Error::Config(format!(
            "started by torchrun (RANK/WORLD_SIZE are set) but {what}: export \
             RSHMEM_BOOTSTRAP_ADDR=<host of rank 0>:<free port> to every worker"
        ))
    };
    let host = get("MASTER_ADDR").ok_or_else(|| missing("MASTER_ADDR is not set"))?;
    let port_s = get("MASTER_PORT").ok_or_else(|| missing("MASTER_PORT is not set"))?;
    let port: u16 = port_s
        .trim()
        .parse()
        .map_err(|_| Error::env("MASTER_PORT", &port_s, "not a port number (1..65535)"))?;
    let next = port.checked_add(1).filter(|_| port != 0).ok_or_else(|| {
        Error::env(
            "MASTER_PORT",
            &port_s,
            "no next port to use: set RSHMEM_BOOTSTRAP_ADDR",
        )
    })?;
    let host = host.trim();
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Ok(format!("{host}:{next}"))
}

/// The secret given explicitly: `RSHMEM_BOOTSTRAP_SECRET` or `RSHMEM_BOOTSTRAP_SECRET_FILE`
/// (never both). `None` when neither is set.
fn explicit_secret(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<[u8; SECRET_LEN]>> {
    let hex_error = |var: &str, v: &str, e: Error| {
        let reason = match e {
            Error::InvalidArgument(m) => m,
            other => other.to_string(),
        };
        // Do not echo (most of) a secret into logs.
        Error::env(
            var,
            &format!("<{} characters, not shown>", v.trim().chars().count()),
            format!("{reason}; generate one with `openssl rand -hex 16`"),
        )
    };
    match (
        get("RSHMEM_BOOTSTRAP_SECRET"),
        get("RSHMEM_BOOTSTRAP_SECRET_FILE"),
    ) {
        (Some(_), Some(path)) => Err(Error::env(
            "RSHMEM_BOOTSTRAP_SECRET_FILE",
            &path,
            "RSHMEM_BOOTSTRAP_SECRET is set too: give the secret one way only",
        )),
        (Some(v), None) => secret_from_hex(v.trim())
            .map(Some)
            .map_err(|e| hex_error("RSHMEM_BOOTSTRAP_SECRET", &v, e)),
        (None, Some(path)) => {
            let text = read_secret_file(path.trim())?;
            secret_from_hex(text.trim()).map(Some).map_err(|e| {
                let reason = match e {
                    Error::InvalidArgument(m) => m,
                    other => other.to_string(),
                };
                Error::env(
                    "RSHMEM_BOOTSTRAP_SECRET_FILE",
                    &path,
                    format!(
                        "the file's {reason}; write one with `openssl rand -hex 16 > FILE` \
                         (after `umask 077`)"
                    ),
                )
            })
        }
        (None, None) => Ok(None),
    }
}

/// Reads a secret file after checking that only its owner, this process's user, can read it.
/// Refuses (with the reason) a file that is not a regular file, belongs to someone else, or
/// has any group/other permission bit.
pub(crate) fn read_secret_file(path: &str) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    const VAR: &str = "RSHMEM_BOOTSTRAP_SECRET_FILE";
    let bad = |reason: String| Error::env(VAR, path, reason);
    // O_NOFOLLOW: the checks below are about the file itself, not a link another user made.
    // O_NONBLOCK: a FIFO must not block the open (it is refused below).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| bad(format!("cannot open it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| bad(format!("cannot stat it: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(bad("not a regular file".into()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(bad(format!(
            "the file belongs to uid {}, not to this process's user (uid {me}); a secret file \
             must be your own",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(bad(format!(
            "its permissions are {mode:03o}: group and others must have no access to a secret \
             (chmod 600 it)"
        )));
    }
    let mut text = String::new();
    file.take(4096)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    Ok(text)
}

/// Set once `RSHMEM_BOOTSTRAP_LISTEN_FD` has been adopted, so it is never owned twice.
static LISTEN_FD_TAKEN: AtomicBool = AtomicBool::new(false);

/// Reads an integer socket option of `fd`.
fn sockopt_int(fd: i32, opt: libc::c_int) -> std::io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `val` and `len` are valid for writes and `len` is the size of `val`; an invalid
    // or non-socket `fd` only makes the call fail with EBADF/ENOTSOCK.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut val as *mut libc::c_int).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(val)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Adopts the listening socket the launcher passed in `fd`, after checking that it is one.
fn inherit_listener(fd: i32, uid: &UniqueId) -> Result<TcpListener> {
    const VAR: &str = "RSHMEM_BOOTSTRAP_LISTEN_FD";
    let value = fd.to_string();
    let bad = |reason: String| Error::env(VAR, &value, reason);
    // SAFETY: F_GETFD only reads the descriptor flags; an invalid fd yields EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(bad(format!(
            "not an open file descriptor ({}); it must be inherited from the launcher",
            std::io::Error::last_os_error()
        )));
    }
    let ty = sockopt_int(fd, libc::SO_TYPE).map_err(|e| bad(format!("not a socket ({e})")))?;
    let domain =
        sockopt_int(fd, libc::SO_DOMAIN).map_err(|e| bad(format!("not a socket ({e})")))?;
    if ty != libc::SOCK_STREAM || (domain != libc::AF_INET && domain != libc::AF_INET6) {
        return Err(bad("not a TCP socket".into()));
    }
    let listening =
        sockopt_int(fd, libc::SO_ACCEPTCONN).map_err(|e| bad(format!("not a socket ({e})")))?;
    if listening == 0 {
        return Err(bad("the socket is not listening".into()));
    }
    if LISTEN_FD_TAKEN.swap(true, Ordering::SeqCst) {
        return Err(bad(
            "already adopted by an earlier bootstrap in this process".into(),
        ));
    }
    // SAFETY: the fd is open (checked above) and is a listening TCP socket that the launcher
    // handed to this process for the bootstrap alone; LISTEN_FD_TAKEN guarantees it is adopted
    // at most once, so no other owner will close it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Keep it out of programs this PE may itself start.
    // SAFETY: `fd` is open and owned by `owned`; F_SETFD only changes its descriptor flags.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    let listener = TcpListener::from(owned);
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let want = uid
        .addr()
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok());
    if want != Some(port) {
        return Err(bad(format!(
            "the inherited socket listens on port {port} but RSHMEM_BOOTSTRAP_ADDR is {}",
            uid.addr()
        )));
    }
    Ok(listener)
}

/// Discovers this process's rank from the environment and joins the job.
///
/// A singleton (or any job of size 1) gets a [`SingletonBootstrap`]; otherwise a
/// [`TcpBootstrap`] at `RSHMEM_BOOTSTRAP_ADDR` (rank 0 uses the listening socket inherited
/// through `RSHMEM_BOOTSTRAP_LISTEN_FD` when there is one). `timeout` bounds each step
/// (`None`: wait forever).
///
/// A job started by Open MPI, Slurm or PMI without `RSHMEM_BOOTSTRAP_ADDR` (or any job with
/// `RSHMEM_BOOTSTRAP=mpi`) bootstraps through MPI: with the `mpi` feature it gets an
/// `MpiBootstrap` (the crate's, with that feature), whose rank and size are `MPI_COMM_WORLD`'s
/// and which `timeout` does not bound (MPI calls block; MPI's failure handling applies);
/// without it, the MPI library found at run time (the program's, else `RSHMEM_MPI_LIB` or a
/// usual soname) carries rank 0's rendezvous id to every rank, MPI is finalized again if rshmem
/// initialized it, and the ranks meet through the [`TcpBootstrap`].
pub fn from_env(timeout: Option<Duration>) -> Result<(LaunchInfo, Box<dyn Bootstrap>)> {
    from_env_lookup(&env_lookup, timeout)
}

/// [`from_env`] with the variables read through `lookup` (the runtime passes one in which
/// NVSHMEM's `NVSHMEM_BOOTSTRAP` stands in for an unset `RSHMEM_BOOTSTRAP`).
pub fn from_env_lookup(
    lookup: &dyn Fn(&str) -> Option<String>,
    timeout: Option<Duration>,
) -> Result<(LaunchInfo, Box<dyn Bootstrap>)> {
    let (info, use_mpi) = LaunchInfo::with_bootstrap_choice(lookup)?;
    tracing::debug!(
        rank = info.rank,
        size = info.size,
        launcher = %info.launcher,
        mpi = use_mpi,
        "bootstrap: launch information"
    );
    if use_mpi {
        return mpi_from_env(info, timeout);
    }
    if info.size == 1 {
        return Ok((info, Box::new(SingletonBootstrap::new())));
    }
    let uid = info.uid.as_ref().ok_or_else(|| {
        Error::Config("RSHMEM_BOOTSTRAP_ADDR is required for a job of more than one PE".into())
    })?;
    let listener = match info.listen_fd {
        Some(fd) if info.rank == 0 => Some(inherit_listener(fd, uid)?),
        _ => None,
    };
    let boot = TcpBootstrap::new(info.rank, info.size, uid, timeout, listener)?;
    Ok((info, Box::new(boot)))
}

/// Joins `MPI_COMM_WORLD`; MPI's rank and size must match the launcher's variables (when there
/// were any) and fill in what they lacked.
#[cfg(feature = "mpi")]
fn mpi_from_env(
    mut info: LaunchInfo,
    _timeout: Option<Duration>,
) -> Result<(LaunchInfo, Box<dyn Bootstrap>)> {
    let boot = crate::MpiBootstrap::new()?;
    let (rank, size) = (boot.rank(), boot.size());
    if info.launcher == Launcher::Singleton {
        info.local_rank = None;
        info.local_size = None;
    } else if (rank, size) != (info.rank, info.size) {
        return Err(Error::Config(format!(
            "MPI_COMM_WORLD says this is rank {rank} of {size}, but the {} launcher's variables \
             say rank {} of {}; set RSHMEM_LAUNCHER to the launcher that started the job, or \
             RSHMEM_BOOTSTRAP=tcp",
            info.launcher, info.rank, info.size
        )));
    }
    info.rank = rank;
    info.size = size;
    info.local_rank = info.local_rank.or(Some(boot.local_rank()));
    info.local_size = info.local_size.or(Some(boot.local_size()));
    Ok((info, Box::new(boot)))
}

#[cfg(not(feature = "mpi"))]
fn mpi_from_env(
    info: LaunchInfo,
    timeout: Option<Duration>,
) -> Result<(LaunchInfo, Box<dyn Bootstrap>)> {
    crate::mpi_rt::bootstrap(info, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const SECRET: &str = "00112233445566778899aabbccddeeff";

    fn parse(vars: &[(&str, &str)]) -> Result<LaunchInfo> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchInfo::from_lookup(&|name| map.get(name).cloned())
    }

    /// The error's variable name (for `Error::Env`), or panics with the error.
    fn env_var_of(r: Result<LaunchInfo>) -> String {
        match r {
            Err(Error::Env { var, .. }) => var,
            other => panic!("expected an Env error, got {other:?}"),
        }
    }

    #[test]
    fn detect_launcher_names_the_launcher_without_rank_details() {
        let detect = |vars: &[(&str, &str)]| {
            let map: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            detect_launcher_from(&|name| map.get(name).cloned())
        };
        assert_eq!(detect(&[]).unwrap(), Launcher::Singleton);
        // No size, address or secret needed: only which launcher it looks like.
        assert_eq!(detect(&[("SLURM_PROCID", "3")]).unwrap(), Launcher::Slurm);
        assert_eq!(detect(&[("RANK", "1")]).unwrap(), Launcher::Torchrun);
        assert_eq!(
            detect(&[("RSHMEM_LAUNCHER", "pmi"), ("SLURM_PROCID", "3")]).unwrap(),
            Launcher::Pmi
        );
        assert!(matches!(
            detect(&[("RSHMEM_LAUNCHER", "bogus")]),
            Err(Error::Env { var, .. }) if var == "RSHMEM_LAUNCHER"
        ));
        assert!(matches!(
            detect(&[("PMIX_RANK", "0")]),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn singleton_when_nothing_set() {
        let i = parse(&[]).unwrap();
        assert_eq!(
            i,
            LaunchInfo {
                rank: 0,
                size: 1,
                local_rank: Some(0),
                local_size: Some(1),
                launcher: Launcher::Singleton,
                uid: None,
                listen_fd: None,
            }
        );
        // Unrelated and empty variables do not change that.
        let i = parse(&[
            ("RSHMEM_RANK", ""),
            ("SLURM_NTASKS", "4"),
            ("HOME", "/root"),
        ])
        .unwrap();
        assert_eq!(i.launcher, Launcher::Singleton);
    }

    #[test]
    fn rshmemrun_variables() {
        let i = parse(&[
            ("RSHMEM_RANK", "2"),
            ("RSHMEM_SIZE", "4"),
            ("RSHMEM_LOCAL_RANK", "2"),
            ("RSHMEM_LOCAL_SIZE", "4"),
            ("RSHMEM_BOOTSTRAP_ADDR", "127.0.0.1:4000"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
            ("RSHMEM_BOOTSTRAP_LISTEN_FD", "7"),
            ("RSHMEM_LAUNCHER", "rshmemrun"),
        ])
        .unwrap();
        assert_eq!(
            (i.rank, i.size, i.local_rank, i.local_size),
            (2, 4, Some(2), Some(4))
        );
        assert_eq!(i.launcher, Launcher::Rshmemrun);
        let uid = i.uid.unwrap();
        assert_eq!(uid.addr(), "127.0.0.1:4000");
        assert_eq!(uid.secret_hex(), SECRET);
        // Only rank 0 keeps the inherited listener.
        assert_eq!(i.listen_fd, None);
        let i = parse(&[
            ("RSHMEM_RANK", "0"),
            ("RSHMEM_SIZE", "4"),
            ("RSHMEM_BOOTSTRAP_ADDR", "127.0.0.1:4000"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
            ("RSHMEM_BOOTSTRAP_LISTEN_FD", "7"),
        ])
        .unwrap();
        assert_eq!(i.listen_fd, Some(7));
        assert_eq!((i.local_rank, i.local_size), (None, None));
    }

    #[test]
    fn open_mpi_variables() {
        let i = parse(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("RSHMEM_BOOTSTRAP_ADDR", "node0:29500"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ])
        .unwrap();
        assert_eq!(
            (i.rank, i.size, i.local_rank, i.local_size),
            (3, 8, Some(1), Some(2))
        );
        assert_eq!(i.launcher, Launcher::OpenMpi);
        // PMIX_RANK is the rank fallback.
        let i = parse(&[
            ("PMIX_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("RSHMEM_BOOTSTRAP_ADDR", "node0:29500"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ])
        .unwrap();
        assert_eq!((i.rank, i.size, i.launcher), (5, 8, Launcher::OpenMpi));
        // OMPI_COMM_WORLD_RANK wins over PMIX_RANK.
        let i = parse(&[
            ("PMIX_RANK", "5"),
            ("OMPI_COMM_WORLD_RANK", "6"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("RSHMEM_BOOTSTRAP_ADDR", "node0:29500"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ])
        .unwrap();
        assert_eq!(i.rank, 6);
    }

    #[test]
    fn slurm_variables() {
        let i = parse(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
            ("RSHMEM_BOOTSTRAP_ADDR", "n1:7000"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ])
        .unwrap();
        assert_eq!(
            (i.rank, i.size, i.local_rank, i.local_size),
            (1, 2, Some(0), None)
        );
        assert_eq!(i.launcher, Launcher::Slurm);
    }

    #[test]
    fn pmi_variables() {
        let i = parse(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "3"),
            ("RSHMEM_BOOTSTRAP_ADDR", "n1:7000"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ])
        .unwrap();
        assert_eq!((i.rank, i.size, i.launcher), (0, 3, Launcher::Pmi));
        assert_eq!((i.local_rank, i.local_size), (None, None));
    }

    #[test]
    fn precedence_between_launchers() {
        let all = [
            ("RSHMEM_RANK", "1"),
            ("RSHMEM_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("PMI_RANK", "4"),
            ("PMI_SIZE", "5"),
            ("RSHMEM_BOOTSTRAP_ADDR", "h:1"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ];
        let expect = [
            (Launcher::Rshmemrun, 1, 2),
            (Launcher::OpenMpi, 2, 3),
            (Launcher::Slurm, 3, 4),
            (Launcher::Pmi, 4, 5),
        ];
        // Dropping the highest-priority pair each time exposes the next launcher.
        for (skip, &(launcher, rank, size)) in expect.iter().enumerate() {
            let vars: Vec<_> = all[2 * skip..].to_vec();
            let i = parse(&vars).unwrap();
            assert_eq!(
                (i.launcher, i.rank, i.size),
                (launcher, rank, size),
                "skip {skip}"
            );
        }
        // RSHMEM_LAUNCHER overrides detection.
        let mut vars = all.to_vec();
        vars.push(("RSHMEM_LAUNCHER", "slurm"));
        let i = parse(&vars).unwrap();
        assert_eq!((i.launcher, i.rank, i.size), (Launcher::Slurm, 3, 4));
        let mut vars = all.to_vec();
        vars.push(("RSHMEM_LAUNCHER", "singleton"));
        let i = parse(&vars).unwrap();
        assert_eq!(
            (i.launcher, i.rank, i.size, i.uid),
            (Launcher::Singleton, 0, 1, None)
        );
        assert_eq!(
            env_var_of(parse(&[("RSHMEM_LAUNCHER", "torque")])),
            "RSHMEM_LAUNCHER"
        );
        assert!(matches!(
            parse(&[("RSHMEM_LAUNCHER", "pmi")]),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let base = [
            ("RSHMEM_BOOTSTRAP_ADDR", "h:1"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: &[Case<'_>] = &[
            (
                &[("RSHMEM_RANK", "x"), ("RSHMEM_SIZE", "2")],
                "RSHMEM_RANK",
                "not a non-negative",
            ),
            (
                &[("RSHMEM_RANK", "-1"), ("RSHMEM_SIZE", "2")],
                "RSHMEM_RANK",
                "not a non-negative",
            ),
            (
                &[("RSHMEM_RANK", "0"), ("RSHMEM_SIZE", "two")],
                "RSHMEM_SIZE",
                "not a non-negative",
            ),
            (
                &[("RSHMEM_RANK", "0"), ("RSHMEM_SIZE", "0")],
                "RSHMEM_SIZE",
                "zero PEs",
            ),
            (
                &[("RSHMEM_RANK", "2"), ("RSHMEM_SIZE", "2")],
                "RSHMEM_RANK",
                "not below the job size",
            ),
            (&[("RSHMEM_RANK", "1")], "RSHMEM_RANK", "RSHMEM_SIZE is not"),
            (&[("RSHMEM_SIZE", "2")], "RSHMEM_SIZE", "RSHMEM_RANK is not"),
            (
                &[
                    ("RSHMEM_RANK", "1"),
                    ("RSHMEM_SIZE", "2"),
                    ("RSHMEM_LOCAL_RANK", "2"),
                    ("RSHMEM_LOCAL_SIZE", "2"),
                ],
                "RSHMEM_LOCAL_RANK",
                "not below the local size",
            ),
            (
                &[
                    ("RSHMEM_RANK", "1"),
                    ("RSHMEM_SIZE", "2"),
                    ("RSHMEM_LOCAL_SIZE", "0"),
                ],
                "RSHMEM_LOCAL_SIZE",
                "zero PEs",
            ),
            (
                &[
                    ("RSHMEM_RANK", "1"),
                    ("RSHMEM_SIZE", "2"),
                    ("RSHMEM_LOCAL_RANK", "a"),
                ],
                "RSHMEM_LOCAL_RANK",
                "not a non-negative",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")],
                "OMPI_COMM_WORLD_RANK",
                "not below",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "1")],
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE is not",
            ),
            (
                &[("OMPI_COMM_WORLD_SIZE", "0"), ("PMIX_RANK", "0")],
                "OMPI_COMM_WORLD_SIZE",
                "zero PEs",
            ),
            (
                &[("PMIX_RANK", "z"), ("OMPI_COMM_WORLD_SIZE", "2")],
                "PMIX_RANK",
                "not a non-negative",
            ),
            (
                &[("SLURM_PROCID", "0")],
                "SLURM_PROCID",
                "SLURM_NTASKS is not",
            ),
            (
                &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1.5")],
                "SLURM_NTASKS",
                "not a non-negative",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_LOCALID", "?"),
                ],
                "SLURM_LOCALID",
                "not a non-negative",
            ),
            (
                &[("PMI_RANK", "9"), ("PMI_SIZE", "3")],
                "PMI_RANK",
                "not below",
            ),
            (&[("PMI_SIZE", "3")], "PMI_SIZE", "PMI_RANK is not"),
        ];
        for (vars, var, reason) in cases {
            match with(vars) {
                Err(Error::Env {
                    var: v, reason: r, ..
                }) => {
                    assert_eq!(&v, var, "{vars:?}");
                    assert!(
                        r.contains(reason),
                        "{vars:?}: reason {r:?} lacks {reason:?}"
                    );
                }
                other => panic!("{vars:?}: expected Env error on {var}, got {other:?}"),
            }
        }
    }

    #[test]
    fn env_error_message_shows_value() {
        let e = parse(&[("RSHMEM_RANK", "abc"), ("RSHMEM_SIZE", "2")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("RSHMEM_RANK") && e.contains("abc"), "{e}");
    }

    #[test]
    fn address_and_secret_checks() {
        let rs = [("RSHMEM_RANK", "1"), ("RSHMEM_SIZE", "2")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = rs.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        // Missing address: a Config error that says what to export.
        match with(&[("RSHMEM_BOOTSTRAP_SECRET", SECRET)]) {
            Err(Error::Config(m)) => {
                assert!(
                    m.contains("RSHMEM_BOOTSTRAP_ADDR") && m.contains("mpirun -x"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        for bad in ["localhost", "h:0", "h:x", ":5", "::1:5"] {
            let mut v = rs.to_vec();
            v.push(("RSHMEM_BOOTSTRAP_ADDR", bad));
            v.push(("RSHMEM_BOOTSTRAP_SECRET", SECRET));
            assert_eq!(env_var_of(parse(&v)), "RSHMEM_BOOTSTRAP_ADDR", "{bad}");
        }
        for bad in [
            "abc",
            "0011223344556677889900aabbccddeeff",
            "0011223344556677889900aabbccddzz",
        ] {
            let mut v = rs.to_vec();
            v.push(("RSHMEM_BOOTSTRAP_ADDR", "h:5"));
            v.push(("RSHMEM_BOOTSTRAP_SECRET", bad));
            let e = parse(&v).unwrap_err();
            assert!(
                matches!(&e, Error::Env { var, value, .. } if var == "RSHMEM_BOOTSTRAP_SECRET" && !value.contains(bad)),
                "{e:?}"
            );
        }
        // Under RSHMEM_* variables the secret is required.
        match with(&[("RSHMEM_BOOTSTRAP_ADDR", "h:5")]) {
            Err(Error::Config(m)) => assert!(m.contains("RSHMEM_BOOTSTRAP_SECRET"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A listen fd must be a number.
        let e = with(&[
            ("RSHMEM_BOOTSTRAP_ADDR", "h:5"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
            ("RSHMEM_RANK", "0"),
        ]);
        assert!(e.is_ok());
        let mut v = vec![
            ("RSHMEM_RANK", "0"),
            ("RSHMEM_SIZE", "2"),
            ("RSHMEM_BOOTSTRAP_ADDR", "h:5"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ];
        v.push(("RSHMEM_BOOTSTRAP_LISTEN_FD", "-3"));
        assert_eq!(env_var_of(parse(&v)), "RSHMEM_BOOTSTRAP_LISTEN_FD");
        // Size 1 needs no address at all.
        let i = parse(&[("RSHMEM_RANK", "0"), ("RSHMEM_SIZE", "1")]).unwrap();
        assert_eq!((i.size, i.uid), (1, None));
    }

    /// A fresh private directory for secret-file tests.
    fn private_dir(tag: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!(
            "rshmem-secret-test-{tag}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    fn write_mode(path: &std::path::Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn secret_file_is_read_only_when_private() {
        let dir = private_dir("file");
        let f = dir.join("secret");
        let fs = f.to_str().unwrap().to_owned();
        let with_file = |extra: &[(&str, &str)]| {
            let mut v = vec![
                ("RSHMEM_RANK", "1"),
                ("RSHMEM_SIZE", "2"),
                ("RSHMEM_BOOTSTRAP_ADDR", "h:5"),
                ("RSHMEM_BOOTSTRAP_SECRET_FILE", fs.as_str()),
            ];
            v.extend_from_slice(extra);
            parse(&v)
        };
        // Owner-only: accepted, whitespace around the digits ignored.
        write_mode(&f, &format!("{SECRET}\n"), 0o600);
        let uid = with_file(&[]).unwrap().uid.unwrap();
        assert_eq!(uid.secret_hex(), SECRET);
        write_mode(&f, SECRET, 0o400);
        assert!(with_file(&[]).is_ok());
        // Group- or other-readable (or any group/other bit): refused, naming the mode.
        for mode in [0o640, 0o604, 0o644, 0o620, 0o601] {
            write_mode(&f, SECRET, mode);
            match with_file(&[]) {
                Err(Error::Env { var, reason, .. }) => {
                    assert_eq!(var, "RSHMEM_BOOTSTRAP_SECRET_FILE");
                    assert!(
                        reason.contains(&format!("{mode:03o}")) && reason.contains("chmod 600"),
                        "{reason}"
                    );
                }
                other => panic!("mode {mode:o} accepted: {other:?}"),
            }
        }
        // Malformed content: named, and the content is not echoed.
        write_mode(&f, "not-hex-at-all", 0o600);
        let e = with_file(&[]).unwrap_err().to_string();
        assert!(
            e.contains("RSHMEM_BOOTSTRAP_SECRET_FILE") && !e.contains("not-hex-at-all"),
            "{e}"
        );
        // Missing file, a directory, a symbolic link to a good file: refused.
        write_mode(&f, SECRET, 0o600);
        let missing = dir.join("missing");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        for (path, why) in [
            (missing.to_str().unwrap(), "cannot open"),
            (dir.to_str().unwrap(), "not a regular file"),
            (link.to_str().unwrap(), "cannot open"),
        ] {
            let e = parse(&[
                ("RSHMEM_RANK", "1"),
                ("RSHMEM_SIZE", "2"),
                ("RSHMEM_BOOTSTRAP_ADDR", "h:5"),
                ("RSHMEM_BOOTSTRAP_SECRET_FILE", path),
            ])
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("RSHMEM_BOOTSTRAP_SECRET_FILE") && e.contains(why),
                "{path}: {e}"
            );
        }
        // Both ways at once: refused rather than guessing which one is meant.
        let e = with_file(&[("RSHMEM_BOOTSTRAP_SECRET", SECRET)]).unwrap_err();
        assert!(e.to_string().contains("one way only"), "{e}");
        // Also under a foreign launcher.
        let i = parse(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("RSHMEM_BOOTSTRAP_ADDR", "h:5"),
            ("RSHMEM_BOOTSTRAP_SECRET_FILE", fs.as_str()),
        ])
        .unwrap();
        assert_eq!(i.uid.unwrap().secret_hex(), SECRET);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn secret_file_of_another_user_is_refused() {
        // Needs a file owned by someone else: only root can make one here.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = private_dir("owner");
        let f = dir.join("secret");
        write_mode(&f, SECRET, 0o600);
        std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
        let e = read_secret_file(f.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn torchrun_variables() {
        let base = [
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "none"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ];
        let i = parse(&base).unwrap();
        assert_eq!(
            (i.rank, i.size, i.local_rank, i.local_size, i.launcher),
            (3, 4, Some(1), Some(2), Launcher::Torchrun)
        );
        // The rendezvous is at the port after torch's own store port...
        assert_eq!(i.uid.as_ref().unwrap().addr(), "node0:29501");
        // ... unless RSHMEM_BOOTSTRAP_ADDR says otherwise.
        let mut v = base.to_vec();
        v.push(("RSHMEM_BOOTSTRAP_ADDR", "node9:4000"));
        assert_eq!(parse(&v).unwrap().uid.unwrap().addr(), "node9:4000");
        // IPv6 master address.
        let mut v = base.to_vec();
        v[4] = ("MASTER_ADDR", "fe80::1");
        assert_eq!(parse(&v).unwrap().uid.unwrap().addr(), "[fe80::1]:29501");
        // torchrun's variables win over an outer srun's or mpirun's (torchrun under srun).
        let mut v = base.to_vec();
        v.extend([("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]);
        v.extend([("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert_eq!(parse(&v).unwrap().launcher, Launcher::Torchrun);
        // A lone worker (WORLD_SIZE=1) is a job of one.
        let i = parse(&[("RANK", "0"), ("WORLD_SIZE", "1")]).unwrap();
        assert_eq!((i.size, i.launcher), (1, Launcher::Torchrun));
        // Partial or broken: errors, never a singleton.
        assert_eq!(env_var_of(parse(&[("RANK", "0")])), "RANK");
        assert_eq!(env_var_of(parse(&[("WORLD_SIZE", "4")])), "WORLD_SIZE");
        assert_eq!(
            env_var_of(parse(&[("RANK", "4"), ("WORLD_SIZE", "4")])),
            "RANK"
        );
        assert!(matches!(
            parse(&[("TORCHELASTIC_RUN_ID", "x")]),
            Err(Error::Config(_))
        ));
        match parse(&[("RANK", "1"), ("WORLD_SIZE", "2")]) {
            Err(Error::Config(m)) => assert!(m.contains("MASTER_ADDR"), "{m}"),
            other => panic!("{other:?}"),
        }
        let bad_port = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "65535"),
        ];
        assert_eq!(env_var_of(parse(&bad_port)), "MASTER_PORT");
        // Named explicitly.
        let i = parse(&[
            ("RSHMEM_LAUNCHER", "torchrun"),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
        ]);
        assert_eq!(i.unwrap().launcher, Launcher::Torchrun);
    }

    #[test]
    fn launcher_rank_needs_no_rendezvous() {
        let rank = |vars: &[(&str, &str)]| {
            let map: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            launcher_rank_from(&|n| map.get(n).cloned())
        };
        // Under mpirun with no address (start-up would fail): the rank is still known.
        assert_eq!(
            rank(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "4")]),
            Some(3)
        );
        assert_eq!(
            rank(&[("OMPI_COMM_WORLD_SIZE", "4"), ("PMIX_RANK", "2")]),
            Some(2)
        );
        assert_eq!(rank(&[("SLURM_PROCID", "5")]), Some(5));
        assert_eq!(rank(&[("PMI_RANK", "1")]), Some(1));
        assert_eq!(rank(&[("RANK", "6"), ("WORLD_SIZE", "8")]), Some(6));
        assert_eq!(rank(&[("RSHMEM_RANK", "7")]), Some(7));
        assert_eq!(rank(&[]), Some(0));
        assert_eq!(rank(&[("RSHMEM_RANK", "x")]), None);
        assert_eq!(rank(&[("PMIX_RANK", "1")]), None);
        assert_eq!(
            rank(&[
                ("RSHMEM_LAUNCHER", "slurm"),
                ("SLURM_PROCID", "2"),
                ("RSHMEM_RANK", "9")
            ]),
            Some(2)
        );
    }

    #[test]
    fn launches_rshmem_cannot_join_are_errors_not_singletons() {
        for var in [
            "PMIX_RANK",
            "MV2_COMM_WORLD_RANK",
            "PALS_RANKID",
            "ALPS_APP_PE",
        ] {
            match parse(&[(var, "1")]) {
                Err(Error::Config(m)) => {
                    assert!(
                        m.contains(var) && m.contains("RSHMEM_LAUNCHER=singleton"),
                        "{m}"
                    )
                }
                other => panic!("{var}: {other:?}"),
            }
            // Unless the user says this process runs alone.
            let i = parse(&[(var, "1"), ("RSHMEM_LAUNCHER", "singleton")]).unwrap();
            assert_eq!(i.size, 1);
        }
    }

    #[test]
    fn every_launcher_requires_a_secret() {
        // A secret derived from job ids was once used here: other users could compute it and
        // join the job as one of its ranks.
        let launches: [&[(&str, &str)]; 4] = [
            &[
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", "1234"),
            ],
            &[
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_MCA_ess_base_jobid", "99"),
            ],
            &[("PMI_RANK", "1"), ("PMI_SIZE", "2")],
            &[
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("TORCHELASTIC_RUN_ID", "r"),
            ],
        ];
        for vars in launches {
            let mut v = vars.to_vec();
            v.push(("RSHMEM_BOOTSTRAP_ADDR", "n1:7000"));
            match parse(&v) {
                Err(Error::Config(m)) => assert!(
                    m.contains("RSHMEM_BOOTSTRAP_SECRET")
                        && m.contains("RSHMEM_BOOTSTRAP_SECRET_FILE")
                        && m.contains("never as a value on a command line"),
                    "{m}"
                ),
                other => panic!("{vars:?}: no secret accepted: {other:?}"),
            }
            // With one: accepted, and it is the one used.
            v.push(("RSHMEM_BOOTSTRAP_SECRET", SECRET));
            assert_eq!(parse(&v).unwrap().uid.unwrap().secret_hex(), SECRET);
        }
        // A job of one needs none.
        assert!(parse(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]).is_ok());
    }

    fn choice(vars: &[(&str, &str)]) -> Result<(LaunchInfo, bool)> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchInfo::with_bootstrap_choice(&|name| map.get(name).cloned())
    }

    #[test]
    fn bootstrap_choice() {
        let ompi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("RSHMEM_BOOTSTRAP_SECRET", SECRET),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = ompi.to_vec();
            v.extend_from_slice(extra);
            choice(&v)
        };
        // An address always means TCP unless MPI is forced.
        let (i, mpi) = with(&[("RSHMEM_BOOTSTRAP_ADDR", "h:1")]).unwrap();
        assert!(!mpi && i.uid.is_some());
        // Forcing TCP without an address: the Config error.
        match with(&[("RSHMEM_BOOTSTRAP", "tcp")]) {
            Err(Error::Config(m)) => assert!(m.contains("RSHMEM_BOOTSTRAP_ADDR"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A bad value names the variable.
        assert_eq!(
            env_var_of(with(&[("RSHMEM_BOOTSTRAP", "ucx")]).map(|(i, _)| i)),
            "RSHMEM_BOOTSTRAP"
        );
        // rshmemrun's variables never pick MPI automatically.
        let r = choice(&[("RSHMEM_RANK", "0"), ("RSHMEM_SIZE", "2")]);
        assert!(matches!(r, Err(Error::Config(_))), "{r:?}");
        // A single PE needs nothing.
        let (i, mpi) = choice(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]).unwrap();
        assert_eq!((i.size, i.uid), (1, None));
        assert!(mpi);
        {
            // Under mpirun without an address: MPI (linked with the `mpi` feature, else found
            // at run time), no rendezvous id.
            let (i, mpi) = with(&[]).unwrap();
            assert!(mpi && i.uid.is_none());
            assert_eq!((i.rank, i.size), (1, 4));
            let (_, mpi) = with(&[("RSHMEM_BOOTSTRAP", "AUTO")]).unwrap();
            assert!(mpi);
            // Forced, even with an address or no launcher at all.
            let (i, mpi) = with(&[
                ("RSHMEM_BOOTSTRAP", "mpi"),
                ("RSHMEM_BOOTSTRAP_ADDR", "h:1"),
            ])
            .unwrap();
            assert!(mpi && i.uid.is_none());
            let (_, mpi) = choice(&[("RSHMEM_BOOTSTRAP", "mpi")]).unwrap();
            assert!(mpi);
        }
    }

    #[test]
    fn env_table_lists_every_variable_read() {
        let names: Vec<&str> = ENV_VARS.iter().map(|v| v.name).collect();
        for n in [
            "RSHMEM_RANK",
            "RSHMEM_SIZE",
            "RSHMEM_LOCAL_RANK",
            "RSHMEM_LOCAL_SIZE",
            "RSHMEM_BOOTSTRAP_ADDR",
            "RSHMEM_BOOTSTRAP_SECRET",
            "RSHMEM_BOOTSTRAP_LISTEN_FD",
            "RSHMEM_LAUNCHER",
            "RSHMEM_BOOTSTRAP",
            "RSHMEM_MPI_LIB",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "PMIX_RANK",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_LOCALID",
            "PMI_RANK",
            "PMI_SIZE",
        ] {
            assert!(names.contains(&n), "{n} missing from ENV_VARS");
        }
        // Every lookup goes through the table: record what from_lookup asks for.
        let asked = std::cell::RefCell::new(Vec::<String>::new());
        let _ = LaunchInfo::from_lookup(&|n| {
            asked.borrow_mut().push(n.to_owned());
            match n {
                "OMPI_COMM_WORLD_SIZE" => Some("2".into()),
                "PMIX_RANK" => Some("0".into()),
                "RSHMEM_BOOTSTRAP_ADDR" => Some("h:1".into()),
                _ => None,
            }
        });
        for n in asked.into_inner() {
            assert!(
                names.contains(&n.as_str()),
                "{n} is read but not in ENV_VARS"
            );
        }
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate entries");
    }

    #[test]
    fn launching_doc_lists_every_variable() {
        // The doc lives in the workspace, not the package: skip when packaged alone.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/launching.md");
        let Ok(doc) = std::fs::read_to_string(path) else {
            return;
        };
        for v in ENV_VARS {
            assert!(
                doc.contains(&format!("| `{}` |", v.name)),
                "{} missing from {path}",
                v.name
            );
        }
    }

    #[test]
    fn inherit_listener_validates_fd() {
        let uid = UniqueId::with_secret("127.0.0.1:1", [0; SECRET_LEN]).unwrap();
        // Not open.
        let e = inherit_listener(1_000_000, &uid).unwrap_err();
        assert!(
            matches!(&e, Error::Env { var, .. } if var == "RSHMEM_BOOTSTRAP_LISTEN_FD"),
            "{e}"
        );
        // Open, but a regular file.
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let e = inherit_listener(std::os::fd::AsRawFd::as_raw_fd(&f), &uid).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        // A connected (non-listening) TCP socket.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let e = inherit_listener(std::os::fd::AsRawFd::as_raw_fd(&c), &uid).unwrap_err();
        assert!(e.to_string().contains("not listening"), "{e}");
    }
}

//! `rshmem-info`: what this build of rshmem and this machine have: the version, the compiled-in
//! features, the CUDA driver and NVRTC found, the launcher the environment looks like, the
//! transports that can be used, the UCX found, and every environment variable rshmem reads with
//! its current value (a malformed value is flagged with the error init would give), the NVSHMEM
//! variables set and what rshmem does with each, `RSHMEM_*` names it does not know (with the
//! closest known name), and where the
//! C headers and libraries are (`--paths` alone): in an installed prefix (`scripts/install-c`),
//! found from this executable's own location, or in the build tree it was built in.
//! `--json` prints the same as JSON; `--markdown` prints the variable table for the docs
//! (`--markdown --nvshmem`: the table of NVSHMEM's variables). Exits 1 when a variable's value is
//! malformed (init would fail), 0 otherwise.
//!
//! Nothing here initialises rshmem or creates a CUDA context; `--devices` initialises the CUDA
//! driver to count the GPUs.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde::Serialize;

/// Prints what this build of rshmem and this machine provide, and checks the RSHMEM_*
/// environment variables of this shell without starting anything.
#[derive(Parser, Debug)]
#[command(name = "rshmem-info", version)]
struct Args {
    /// Print the report as JSON (one object) instead of text.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print only the table of environment variables, as Markdown (for the docs).
    #[arg(long)]
    markdown: bool,
    /// With --markdown: the table of NVSHMEM's variables and what rshmem does with each.
    #[arg(long, requires = "markdown")]
    nvshmem: bool,
    /// Also count the CUDA devices (initialises the CUDA driver; creates no context).
    #[arg(long)]
    devices: bool,
    /// Print only where the C headers, libraries, CMake package and pkg-config files are
    /// (with --json: only that object).
    #[arg(long, conflicts_with = "markdown")]
    paths: bool,
}

/// Which optional features this binary was compiled with.
#[derive(Serialize)]
struct Features {
    mpi: bool,
    verbs: bool,
}

#[derive(Serialize)]
struct Cuda {
    /// libcuda could be loaded.
    driver: bool,
    /// Visible devices (only with `--devices`).
    #[serde(skip_serializing_if = "Option::is_none")]
    devices: Option<usize>,
}

#[derive(Serialize)]
struct Nvrtc {
    found: bool,
    /// `major.minor` when found.
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    /// Why it could not be used.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Launch {
    /// The launcher the environment names or looks like (None when that cannot be told).
    launcher: Option<String>,
    /// This PE's rank and the job's size as init would read them.
    #[serde(skip_serializing_if = "Option::is_none")]
    rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<usize>,
    /// Why init would fail to read the launch (None when it would not).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Transport {
    name: &'static str,
    what: &'static str,
    usable: bool,
    /// Why not usable, or a caveat.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Serialize)]
struct Ucx {
    found: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    resources: Vec<String>,
    rdma: bool,
    /// `UCX_TLS` as set here (None: unset, UCX picks among all its transports).
    tls: Option<String>,
    /// UCX can move GPU memory under these settings (it offers `cuda_copy`).
    cuda: bool,
    /// This UCX ships its CUDA module (None: its folder could not be found).
    #[serde(skip_serializing_if = "Option::is_none")]
    cuda_module: Option<bool>,
    /// Why the GPU backend cannot use it, and the fix (None when it can, or UCX is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_unusable: Option<String>,
    /// Its endpoints use UCX's peer-failure handling (`RSHMEM_UCX_ERROR_MODE`; None when the
    /// setting is invalid or UCX is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_errors: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Var {
    name: &'static str,
    kind: &'static str,
    default: &'static str,
    help: &'static str,
    /// The current value, when set.
    value: Option<String>,
    /// The parse error init would report for this value (None: valid or unset).
    invalid: Option<String>,
    /// Unset itself but given a value by this NVSHMEM variable (`NAME=value`).
    #[serde(skip_serializing_if = "Option::is_none")]
    from_nvshmem: Option<String>,
}

/// One NVSHMEM variable set in this environment.
#[derive(Serialize)]
struct NvVar {
    name: &'static str,
    value: String,
    /// `maps`, `satisfied`, `program` or `no-equivalent`.
    treatment: &'static str,
    /// The `RSHMEM_*` variable it stands for (mapped ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    rshmem: Option<&'static str>,
    /// What rshmem uses: the translated value, or why the value is ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    effect: Option<String>,
    note: &'static str,
    /// Why init would fail with this value (None: valid).
    invalid: Option<String>,
}

/// An `RSHMEM_*` variable set here that rshmem does not know.
#[derive(Serialize)]
struct Unknown {
    name: String,
    /// The closest known name, when one is close.
    did_you_mean: Option<&'static str>,
}

/// One file of the C installation and whether it is there.
#[derive(Serialize)]
struct PathFile {
    name: &'static str,
    path: String,
    found: bool,
}

/// Where the C headers and libraries are, relative to this executable.
#[derive(Serialize)]
struct Paths {
    /// `installed` (PREFIX/bin/rshmem-info of `scripts/install-c PREFIX`), `build-tree`
    /// (target/PROFILE/rshmem-info of a checkout) or `unknown`.
    layout: &'static str,
    /// This executable, symbolic links resolved.
    exe: Option<String>,
    /// The installed prefix, or the checkout's root.
    #[serde(skip_serializing_if = "Option::is_none")]
    prefix: Option<String>,
    /// `-I` for rshmem.h, shmem.h, shmemx.h, pshmem.h.
    #[serde(skip_serializing_if = "Option::is_none")]
    include_dir: Option<String>,
    /// `-I` for the device library (`#include "rshmem/rshmem.cuh"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    device_include_dir: Option<String>,
    /// `-I` for the NVSHMEM compatibility headers (nvshmem.h, nvshmemx.h).
    #[serde(skip_serializing_if = "Option::is_none")]
    nvshmem_include_dir: Option<String>,
    /// `-L` for librshmem and libshmem.
    #[serde(skip_serializing_if = "Option::is_none")]
    lib_dir: Option<String>,
    /// `CMAKE_PREFIX_PATH` entry / `rshmem_DIR` (installed only).
    #[serde(skip_serializing_if = "Option::is_none")]
    cmake_dir: Option<String>,
    /// `PKG_CONFIG_PATH` entry (installed only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pkgconfig_dir: Option<String>,
    /// The files of each place, found or not.
    files: Vec<PathFile>,
    /// Why the layout is unknown, or what is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Serialize)]
struct Report {
    version: &'static str,
    paths: Paths,
    features: Features,
    cuda: Cuda,
    nvrtc: Nvrtc,
    launch: Launch,
    transports: Vec<Transport>,
    ucx: Ucx,
    env: Vec<Var>,
    nvshmem: Vec<NvVar>,
    unknown: Vec<Unknown>,
}

fn env_value(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Every variable of the one table, each checked by the parser that init uses: a runtime variable
/// alone through `Config::from_lookup`, the launcher's through `LaunchInfo::from_env` (whose
/// errors name the variable).
fn check_vars(launch_error: Option<&rshmem_bootstrap::Error>) -> Vec<Var> {
    rshmem::config::all_env_vars()
        .map(|v| {
            let value = env_value(v.name);
            let from_nvshmem = match &value {
                Some(_) => None,
                None => rshmem::config::effective(&env_value, v.name).and_then(|_| {
                    rshmem::config::NVSHMEM_VARS
                        .iter()
                        .filter(|nv| nv.what == rshmem::config::NvshmemUse::Maps(v.name))
                        .find_map(|nv| {
                            let raw = env_value(nv.name)?;
                            match nv.map_value(&raw) {
                                rshmem::config::Mapped::Value(t) => {
                                    Some(format!("{}={raw} (as {t})", nv.name))
                                }
                                _ => None,
                            }
                        })
                }),
            };
            let invalid = match &value {
                None => None,
                Some(_) if rshmem::config::ENV_VARS.iter().any(|r| r.name == v.name) => {
                    let only = |k: &str| if k == v.name { env_value(k) } else { None };
                    rshmem::config::Config::from_lookup(&only)
                        .err()
                        .map(|e| e.to_string())
                }
                Some(_) => match launch_error {
                    Some(e @ rshmem_bootstrap::Error::Env { var, .. }) if var == v.name => {
                        Some(e.to_string())
                    }
                    _ => None,
                },
            };
            Var {
                name: v.name,
                kind: v.kind,
                default: v.default,
                help: v.help,
                value,
                invalid,
                from_nvshmem,
            }
        })
        .collect()
}

/// The NVSHMEM variables set here, each with what rshmem does with it.
fn check_nvshmem() -> Vec<NvVar> {
    use rshmem::config::{Mapped, NvshmemUse};
    let mut out = Vec::new();
    for nv in rshmem::config::NVSHMEM_VARS {
        let Some(value) = env_value(nv.name) else {
            continue;
        };
        let (treatment, rshmem, mut effect, mut invalid) = match nv.what {
            NvshmemUse::Maps(to) => {
                let (effect, invalid) = match nv.map_value(&value) {
                    Mapped::Value(v) => (Some(format!("{to}={v}")), None),
                    Mapped::Nothing => (None, None),
                    Mapped::NoEquivalent(why) => (Some(format!("ignored: {why}")), None),
                    Mapped::Invalid(why) => (None, Some(why)),
                };
                ("maps", Some(to), effect, invalid)
            }
            NvshmemUse::Satisfied => ("satisfied", None, None, None),
            NvshmemUse::Program => ("program", None, None, None),
            NvshmemUse::NoEquivalent => ("no-equivalent", None, Some("ignored".into()), None),
        };
        if let Some(to) = rshmem.filter(|to| env_value(to).is_some()) {
            effect = Some(format!("overridden by {to}, which is set"));
            invalid = None;
        }
        let row = NvVar {
            name: nv.name,
            value,
            treatment,
            rshmem,
            effect,
            note: nv.note,
            invalid,
        };
        // NVSHMEM_DEBUG has two entries (RSHMEM_LOG and RSHMEM_INFO): one row, the one that
        // does something.
        match out.iter_mut().find(|o: &&mut NvVar| o.name == row.name) {
            Some(prev) => {
                if prev.effect.is_none() && (row.effect.is_some() || row.invalid.is_some()) {
                    *prev = row;
                }
            }
            None => out.push(row),
        }
    }
    out
}

/// The places of a layout, before the files are looked at.
struct Layout {
    layout: &'static str,
    prefix: PathBuf,
    include: PathBuf,
    device_include: PathBuf,
    nvshmem_include: PathBuf,
    lib: PathBuf,
    bin: PathBuf,
    cmake: Option<PathBuf>,
    pkgconfig: Option<PathBuf>,
}

/// `PREFIX/bin/rshmem-info` of an installed prefix: `PREFIX/include/rshmem/rshmem.cuh` is there.
fn installed_layout(bin: &Path) -> Option<Layout> {
    if bin.file_name()? != "bin" {
        return None;
    }
    let prefix = bin.parent()?.to_path_buf();
    let include = prefix.join("include");
    if !include.join("rshmem").join("rshmem.cuh").is_file() {
        return None;
    }
    Some(Layout {
        layout: "installed",
        device_include: include.clone(),
        nvshmem_include: include.join("nvshmem"),
        lib: prefix.join("lib"),
        bin: bin.to_path_buf(),
        cmake: Some(prefix.join("lib").join("cmake").join("rshmem")),
        pkgconfig: Some(prefix.join("lib").join("pkgconfig")),
        include,
        prefix,
    })
}

/// A checkout holding `capi/include` and `device-lib/include/rshmem`.
fn is_checkout(dir: &Path) -> bool {
    dir.join("capi").join("include").is_dir()
        && dir
            .join("device-lib")
            .join("include")
            .join("rshmem")
            .join("rshmem.cuh")
            .is_file()
}

/// `target/PROFILE/rshmem-info` inside a checkout (the libraries are built next to it), or, for a
/// target directory elsewhere, the checkout this binary was compiled from when it still exists.
fn build_tree_layout(bin: &Path) -> Option<Layout> {
    let root = bin
        .ancestors()
        .skip(1)
        .find(|d| is_checkout(d))
        .map(Path::to_path_buf)
        .or_else(|| {
            let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
            is_checkout(built_from).then(|| built_from.to_path_buf())
        })?;
    let include = root.join("capi").join("include");
    Some(Layout {
        layout: "build-tree",
        device_include: root.join("device-lib").join("include"),
        nvshmem_include: include.join("nvshmem"),
        lib: bin.to_path_buf(),
        bin: bin.to_path_buf(),
        cmake: None,
        pkgconfig: None,
        include,
        prefix: root,
    })
}

fn paths() -> Paths {
    let exe = std::env::current_exe().and_then(|e| e.canonicalize());
    let unknown = |exe: Option<String>, note: String| Paths {
        layout: "unknown",
        exe,
        prefix: None,
        include_dir: None,
        device_include_dir: None,
        nvshmem_include_dir: None,
        lib_dir: None,
        cmake_dir: None,
        pkgconfig_dir: None,
        files: Vec::new(),
        note: Some(note),
    };
    let exe = match exe {
        Ok(e) => e,
        Err(e) => return unknown(None, format!("cannot find this executable: {e}")),
    };
    let shown = Some(exe.display().to_string());
    let Some(bin) = exe.parent() else {
        return unknown(shown, "this executable has no parent directory".to_string());
    };
    let Some(l) = installed_layout(bin).or_else(|| build_tree_layout(bin)) else {
        return unknown(
            shown,
            "neither an installed prefix (PREFIX/bin next to PREFIX/include/rshmem) nor a \
             checkout's target directory; install with scripts/install-c PREFIX"
                .to_string(),
        );
    };
    let mut files = vec![
        ("rshmem.h", l.include.join("rshmem.h")),
        ("shmem.h", l.include.join("shmem.h")),
        (
            "rshmem/rshmem.cuh",
            l.device_include.join("rshmem").join("rshmem.cuh"),
        ),
        ("nvshmem.h", l.nvshmem_include.join("nvshmem.h")),
        ("nvshmemx.h", l.nvshmem_include.join("nvshmemx.h")),
        ("librshmem.so", l.lib.join("librshmem.so")),
        ("librshmem.a", l.lib.join("librshmem.a")),
        ("libshmem.so", l.lib.join("libshmem.so")),
        ("libshmem.a", l.lib.join("libshmem.a")),
        ("rshmemrun", l.bin.join("rshmemrun")),
    ];
    if let Some(c) = &l.cmake {
        files.push(("rshmemConfig.cmake", c.join("rshmemConfig.cmake")));
    }
    if let Some(p) = &l.pkgconfig {
        files.push(("rshmem.pc", p.join("rshmem.pc")));
        files.push(("shmem-rshmem.pc", p.join("shmem-rshmem.pc")));
    }
    let files: Vec<PathFile> = files
        .into_iter()
        .map(|(name, p)| PathFile {
            name,
            found: p.is_file(),
            path: p.display().to_string(),
        })
        .collect();
    let missing: Vec<&str> = files.iter().filter(|f| !f.found).map(|f| f.name).collect();
    let note = (!missing.is_empty()).then(|| {
        let how = if l.layout == "installed" {
            "reinstall with scripts/install-c"
        } else {
            "build them: cargo build -p rshmem-c -p rshmem-capi (with this binary's profile)"
        };
        format!("missing: {} ({how})", missing.join(", "))
    });
    let show = |p: &Path| Some(p.display().to_string());
    Paths {
        layout: l.layout,
        exe: shown,
        prefix: show(&l.prefix),
        include_dir: show(&l.include),
        device_include_dir: show(&l.device_include),
        nvshmem_include_dir: show(&l.nvshmem_include),
        lib_dir: show(&l.lib),
        cmake_dir: l.cmake.as_deref().and_then(show),
        pkgconfig_dir: l.pkgconfig.as_deref().and_then(show),
        files,
        note,
    }
}

fn report(args: &Args) -> Report {
    let features = Features {
        mpi: cfg!(feature = "mpi"),
        verbs: cfg!(feature = "verbs"),
    };
    let driver = rshmem::cuda::driver_present();
    let cuda = Cuda {
        driver,
        devices: args.devices.then(|| rshmem::cuda::device_count(1)),
    };
    let nvrtc = match rshmem::device::nvrtc::nvrtc_version() {
        Ok((major, minor)) => Nvrtc {
            found: true,
            version: Some(format!("{major}.{minor}")),
            error: None,
        },
        Err(e) => Nvrtc {
            found: false,
            version: None,
            error: Some(e.to_string()),
        },
    };

    // As init reads them: NVSHMEM_BOOTSTRAP stands in for an unset RSHMEM_BOOTSTRAP.
    let info = rshmem_bootstrap::LaunchInfo::from_lookup(&|k: &str| {
        rshmem::config::effective(&env_value, k)
    });
    let launch = match &info {
        Ok(i) => Launch {
            launcher: Some(i.launcher.name().to_string()),
            rank: Some(i.rank),
            size: Some(i.size),
            error: None,
        },
        Err(e) => Launch {
            launcher: rshmem_bootstrap::detect_launcher()
                .ok()
                .map(|l| l.name().to_string()),
            rank: None,
            size: None,
            error: Some(e.to_string()),
        },
    };

    // UCX: loaded the way the UCX transport loads it (RSHMEM_UCX_LIB or libucp.so.0), under the
    // UCX_* variables of this environment.
    let lib = env_value("RSHMEM_UCX_LIB").filter(|s| !s.trim().is_empty());
    let tls = env_value("UCX_TLS");
    let ucx = match rshmem::probe_ucx(lib.as_deref()) {
        Ok(p) => Ucx {
            found: true,
            version: Some(format!("{}.{}.{}", p.version.0, p.version.1, p.version.2)),
            path: Some(p.path.clone()),
            rdma: p.rdma(),
            cuda: p.cuda(),
            cuda_module: p.cuda_module,
            gpu_unusable: p.gpu_unready(),
            peer_errors: rshmem::config::Config::from_lookup(&|k: &str| {
                (k == "RSHMEM_UCX_ERROR_MODE")
                    .then(|| env_value(k))
                    .flatten()
            })
            .ok()
            .map(|c| p.peer_errors(&c)),
            resources: p.resources,
            tls,
            error: None,
        },
        Err(e) => Ucx {
            found: false,
            version: None,
            path: None,
            resources: Vec::new(),
            rdma: false,
            tls,
            cuda: false,
            cuda_module: None,
            gpu_unusable: None,
            peer_errors: None,
            error: Some(e.to_string()),
        },
    };

    let mut transports = vec![
        Transport {
            name: "shm",
            what: "host shared memory between PEs of one host",
            usable: true,
            note: None,
        },
        Transport {
            name: "p2p",
            what: "GPU memory of PEs on one host over NVLink/PCIe",
            usable: driver,
            note: (!driver).then(|| "no CUDA driver (libcuda) found".to_string()),
        },
        Transport {
            name: "tcp",
            what: "PEs on other hosts",
            usable: true,
            note: None,
        },
        Transport {
            name: "ucx",
            what: "PEs on other hosts through UCX",
            usable: ucx.found,
            note: ucx
                .error
                .as_ref()
                .map(|e| format!("libucp not usable: {e}")),
        },
    ];
    if features.verbs {
        transports.push(Transport {
            name: "verbs",
            what: "PEs on other hosts over InfiniBand/RoCE",
            usable: true,
            note: Some("compiled in; the RDMA device is opened at init".to_string()),
        });
    }

    Report {
        version: env!("CARGO_PKG_VERSION"),
        paths: paths(),
        features,
        cuda,
        nvrtc,
        env: check_vars(info.as_ref().err()),
        nvshmem: check_nvshmem(),
        unknown: rshmem::config::EnvReport::from_process()
            .unknown_rshmem
            .into_iter()
            .map(|(name, did_you_mean)| Unknown { name, did_you_mean })
            .collect(),
        launch,
        transports,
        ucx,
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn text(r: &Report) -> String {
    let mut out = format!("rshmem {}\n", r.version);
    out.push_str(&format!(
        "features: mpi: {}, verbs: {}\n",
        yes(r.features.mpi),
        yes(r.features.verbs)
    ));
    out.push_str(&match (r.cuda.driver, r.cuda.devices) {
        (false, _) => "cuda driver: not found (libcuda could not be loaded)\n".to_string(),
        (true, None) => "cuda driver: found (--devices counts the GPUs)\n".to_string(),
        (true, Some(n)) => format!("cuda driver: found, {n} device(s) visible\n"),
    });
    out.push_str(&match (&r.nvrtc.version, &r.nvrtc.error) {
        (Some(v), _) => format!("nvrtc: found, version {v}\n"),
        (None, Some(e)) => format!("nvrtc: not found ({e})\n"),
        (None, None) => "nvrtc: not found\n".to_string(),
    });
    let l = &r.launch;
    out.push_str(&match (&l.launcher, l.rank, l.size, &l.error) {
        (Some(name), Some(rank), Some(size), None) => {
            format!("launcher: {name} (rank {rank} of {size})\n")
        }
        (name, _, _, Some(e)) => format!(
            "launcher: {} -- INVALID, init would fail: {e}\n",
            name.as_deref().unwrap_or("unknown")
        ),
        (name, ..) => format!("launcher: {}\n", name.as_deref().unwrap_or("unknown")),
    });
    let usable: Vec<&str> = r
        .transports
        .iter()
        .filter(|t| t.usable)
        .map(|t| t.name)
        .collect();
    out.push_str(&format!("transports: {}\n", usable.join(", ")));
    for t in &r.transports {
        out.push_str(&format!(
            "  {:<5} {}: {}{}\n",
            t.name,
            t.what,
            if t.usable { "usable" } else { "not usable" },
            t.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ));
    }
    if !r.features.verbs {
        out.push_str("  verbs not compiled in (build rshmem with --features verbs)\n");
    }
    out.push('\n');
    let u = &r.ucx;
    match (&u.version, &u.path, &u.error) {
        (Some(v), Some(p), _) => out.push_str(&format!(
            "ucx: UCX {v} from {p}\n  UCX_TLS: {}\n  resources it will use: {}\n  RDMA (InfiniBand/RoCE): {}\n  CUDA support (GPU heaps): {}\n  peer-failure handling (RSHMEM_UCX_ERROR_MODE): {}\n  RSHMEM_REMOTE_TRANSPORT=auto uses it for PEs on other hosts: {}\n\n",
            u.tls
                .as_deref()
                .map_or("unset (UCX picks among all its transports)".to_string(), str::to_string),
            u.resources.join(", "),
            yes(u.rdma),
            match (&u.gpu_unusable, u.cuda_module) {
                (None, _) => "yes (cuda_copy)".to_string(),
                (Some(why), Some(true)) => format!("module installed, not usable here: {why}"),
                (Some(why), _) => format!("no: {why}"),
            },
            match u.peer_errors {
                Some(true) => "yes (UCP_ERR_HANDLING_MODE_PEER)",
                Some(false) => "no (UCP_ERR_HANDLING_MODE_NONE)",
                None => "unknown (RSHMEM_UCX_ERROR_MODE is invalid)",
            },
            match (u.rdma, u.cuda) {
                (true, true) => "yes, where both PEs have it and verbs is not used",
                (true, false) => "yes on the CPU backend, where both PEs have it and verbs is not used; not on the GPU backend (no CUDA support)",
                _ => "no (rshmem's TCP transport; RSHMEM_REMOTE_TRANSPORT=ucx forces UCX)",
            }
        )),
        (_, _, e) => out.push_str(&format!(
            "ucx: not available ({})\n\n",
            e.as_deref().unwrap_or("unknown reason")
        )),
    }
    out.push_str(&paths_text(&r.paths));
    out.push('\n');
    let bad = invalid_count(r);
    if bad > 0 {
        out.push_str(&format!(
            "INVALID: {bad} environment variable(s) are malformed; init would fail (marked below)\n\n"
        ));
    }
    if !r.unknown.is_empty() {
        out.push_str("unknown RSHMEM_ variables (ignored):\n");
        for u in &r.unknown {
            out.push_str(&match u.did_you_mean {
                Some(k) => format!("  {} -- did you mean {k}?\n", u.name),
                None => format!("  {}\n", u.name),
            });
        }
        out.push('\n');
    }
    if r.nvshmem.is_empty() {
        out.push_str("NVSHMEM variables: none set (rshmem-info --markdown --nvshmem lists what each does)\n\n");
    } else {
        out.push_str("NVSHMEM variables set:\n");
        for v in &r.nvshmem {
            let what = match (v.treatment, &v.effect, &v.invalid) {
                (_, _, Some(e)) => format!("INVALID: {}={:?} is malformed: {e}", v.name, v.value),
                ("maps", Some(e), None) => e.clone(),
                ("maps", None, None) => "no effect with this value".to_string(),
                ("satisfied", ..) => "nothing to do".to_string(),
                ("program", ..) => "read by the program, not by rshmem".to_string(),
                _ => "ignored: no rshmem equivalent".to_string(),
            };
            out.push_str(&format!(
                "  {:<28} (set: {}) {what}\n      {}\n",
                v.name, v.value, v.note
            ));
        }
        out.push('\n');
    }
    out.push_str("environment variables:\n");
    for v in &r.env {
        let now = match (&v.value, &v.invalid, &v.from_nvshmem) {
            (Some(s), None, _) => format!(" (set: {s})"),
            (Some(s), Some(e), _) => format!(" (set: {s}) INVALID: {e}"),
            (None, _, Some(nv)) => format!(" (from {nv})"),
            (None, _, None) => String::new(),
        };
        out.push_str(&format!(
            "  {:<28} {} [default: {}]{now}\n      {}\n",
            v.name, v.kind, v.default, v.help
        ));
    }
    out
}

fn paths_text(p: &Paths) -> String {
    let mut out = format!("paths: {}", p.layout);
    if let Some(prefix) = &p.prefix {
        out.push_str(&format!(" at {prefix}"));
    }
    out.push('\n');
    let dirs = [
        ("include (rshmem.h, shmem.h)", &p.include_dir),
        ("include (device library)", &p.device_include_dir),
        ("include (nvshmem.h)", &p.nvshmem_include_dir),
        ("libraries", &p.lib_dir),
        ("cmake package", &p.cmake_dir),
        ("pkg-config", &p.pkgconfig_dir),
    ];
    for (what, dir) in dirs {
        if let Some(d) = dir {
            out.push_str(&format!("  {what:<29} {d}\n"));
        }
    }
    for f in &p.files {
        out.push_str(&format!(
            "  {:<29} {}{}\n",
            f.name,
            f.path,
            if f.found { "" } else { " (missing)" }
        ));
    }
    if let (Some(inc), Some(dev), Some(lib)) = (&p.include_dir, &p.device_include_dir, &p.lib_dir) {
        let dev = if dev == inc {
            String::new()
        } else {
            format!(" -I{dev}")
        };
        out.push_str(&format!(
            "  compile and link: -I{inc}{dev} -L{lib} -Xlinker -rpath={lib} -lrshmem\n"
        ));
    }
    if let Some(n) = &p.note {
        out.push_str(&format!("  note: {n}\n"));
    }
    if let Some(e) = &p.exe {
        out.push_str(&format!("  (this executable: {e})\n"));
    }
    out
}

fn markdown() -> String {
    let mut out = String::from("| variable | type | default | meaning |\n|---|---|---|---|\n");
    for v in rshmem::config::all_env_vars() {
        let cell = |t: &str| t.replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            v.name,
            cell(v.kind),
            cell(v.default),
            cell(v.help)
        ));
    }
    out
}

/// Values init would reject: malformed RSHMEM_/launcher variables and NVSHMEM variables.
fn invalid_count(r: &Report) -> usize {
    r.env.iter().filter(|v| v.invalid.is_some()).count()
        + r.nvshmem.iter().filter(|v| v.invalid.is_some()).count()
}

/// `value` as pretty JSON and a newline; exits 1 naming the cause when it cannot be written.
fn json<T: Serialize>(value: &T) -> String {
    match serde_json::to_string_pretty(value) {
        Ok(s) => s + "\n",
        Err(e) => {
            eprintln!("rshmem-info: cannot write the report as JSON: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let args = Args::parse();
    let mut invalid = 0;
    let out = if args.markdown && args.nvshmem {
        rshmem::config::nvshmem_markdown()
    } else if args.markdown {
        markdown()
    } else if args.paths && args.json {
        json(&paths())
    } else if args.paths {
        paths_text(&paths())
    } else {
        let r = report(&args);
        invalid = invalid_count(&r);
        if args.json {
            json(&r)
        } else {
            text(&r)
        }
    };
    // A closed pipe (`rshmem-info | head`) is not an error worth reporting.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    if invalid > 0 {
        std::process::exit(1);
    }
}

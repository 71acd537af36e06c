//! Run-time compilation of CUDA C++ that uses the rshmem device library, with NVRTC.
//!
//! [`compile_cubin`] compiles one CUDA source for one GPU architecture into a CUBIN that the CUDA
//! driver loads as a module. The device library's headers ([`super::HEADERS`]) are handed to
//! NVRTC in memory, so the source can `#include "rshmem/rshmem.cuh"` without the rshmem source
//! tree. Kernels keep their explicit `__global__` (no `-default-device`); declare them
//! `extern "C"` to look them up by their plain names.
//!
//! NVRTC is loaded at run time (`libnvrtc.so`, found through `LD_LIBRARY_PATH`); without it the
//! calls return [`Error::Unsupported`] saying how to install it (`rshmem-install-nvrtc` of an
//! installed prefix or `scripts/install-nvrtc` of a checkout, the pip
//! package `nvidia-cuda-nvrtc==13.0.*`). Nothing here needs a GPU.
//!
//! CUBINs are cached on disk, keyed by the source, the options, the architecture, the NVRTC
//! version and the device library's headers: in `$RSHMEM_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/rshmem`, else `~/.cache/rshmem` (see [`Cache`]). The directory is created
//! owner-only and not used if others can write to it; entries are written atomically (a
//! temporary file renamed into place) and verified when read, so an entry that is corrupt,
//! truncated or belongs to another key is simply compiled again. Compilations whose options name
//! include directories (`-I`, `--include-path`, `--pre-include`, `-include`) are not cached,
//! because files read from disk are not part of the key.

use std::ffi::{c_char, c_int, CStr, CString};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use cudarc::nvrtc::sys;

use crate::error::{Error, Result};

/// The `call` named by every error of this module.
const CALL: &str = "compile";

/// Where [`compile_cubin_cached`] caches CUBINs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Cache {
    /// [`default_cache_dir`]: `$RSHMEM_CACHE_DIR`, else `$XDG_CACHE_HOME/rshmem`, else
    /// `~/.cache/rshmem`; no caching when none of them is set.
    #[default]
    Default,
    /// This directory (created owner-only if missing).
    Dir(PathBuf),
    /// Always compile; read and write no cache.
    Off,
}

/// Options of [`compile_cubin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// GPU architecture to compile for, `sm_XY` (or `sm_XYa` / `sm_XYf`); `sm_90` by default
    /// (H100, H200).
    pub arch: String,
    /// Extra NVRTC options, passed after rshmem's own (`--gpu-architecture=…`, `-std=c++17`),
    /// e.g. `-DN=4`, `-lineinfo`, `--use_fast_math`, `-maxrregcount=64`.
    pub options: Vec<String>,
    /// The program's name in NVRTC's messages, e.g. the file it came from.
    pub name: String,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            arch: "sm_90".to_string(),
            options: Vec::new(),
            name: "rshmem_program.cu".to_string(),
        }
    }
}

/// NVRTC's version as (major, minor), e.g. `(13, 0)`.
///
/// # Errors
/// [`Error::Unsupported`] when `libnvrtc.so` cannot be loaded (the message says how to install
/// it and set `LD_LIBRARY_PATH`).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    guarded(|| {
        load()?;
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: `load` found the library; both pointers are valid for writes of a c_int.
        let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
        check(r, "nvrtcVersion")?;
        Ok((major, minor))
    })
}

/// Compiles `src` (CUDA C++; it may `#include "rshmem/rshmem.cuh"`) for `opts.arch` and returns
/// the CUBIN (an ELF image for `cuModuleLoadData`). Served from the cache when an identical
/// compilation was cached before (see the module documentation).
///
/// # Errors
/// * [`Error::Unsupported`] when NVRTC cannot be loaded;
/// * [`Error::InvalidArgument`] (call `compile`) for a malformed architecture, a NUL byte in the
///   source, name or options, and when NVRTC rejects the program or an option: the message holds
///   NVRTC's error and its full compilation log.
pub fn compile_cubin(src: &str, opts: &CompileOptions) -> Result<Vec<u8>> {
    compile_cubin_cached(src, opts, &Cache::Default)
}

/// [`compile_cubin`] with an explicit cache: [`Cache::Default`] (what `compile_cubin` uses), a
/// directory of its own, or [`Cache::Off`].
///
/// # Errors
/// As [`compile_cubin`].
pub fn compile_cubin_cached(src: &str, opts: &CompileOptions, cache: &Cache) -> Result<Vec<u8>> {
    check_arch(&opts.arch)?;
    guarded(|| {
        load()?;
        let version = nvrtc_version()?;
        let mut args = vec![
            format!("--gpu-architecture={}", opts.arch),
            "-std=c++17".to_string(),
        ];
        args.extend(opts.options.iter().cloned());
        let dir = cache_dir_for(&opts.options, cache);
        let key = cache_key(src, &opts.name, &opts.arch, &args, version);
        let path = dir
            .as_ref()
            .map(|d| d.join(format!("{:016x}.cubin", fnv1a64(&key))));
        if let Some(path) = &path {
            if let Some(cubin) = read_entry(path, &key) {
                tracing::debug!(name = %opts.name, path = %path.display(), "CUBIN from cache");
                return Ok(cubin);
            }
        }
        let cubin = compile(src, &opts.name, &opts.arch, &args)?;
        if let (Some(dir), Some(path)) = (&dir, &path) {
            if let Err(e) = write_entry(dir, path, &key, &cubin) {
                tracing::debug!(path = %path.display(), error = %e, "could not cache CUBIN");
            }
        }
        Ok(cubin)
    })
}

/// The default cache directory: `$RSHMEM_CACHE_DIR`, else `$XDG_CACHE_HOME/rshmem`, else
/// `$HOME/.cache/rshmem`; `None` when none of these variables is set.
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("RSHMEM_CACHE_DIR") {
        return Some(dir);
    }
    if let Some(xdg) = var("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("rshmem"));
    }
    var("HOME").map(|home| home.join(".cache").join("rshmem"))
}

/// Runs `f`, turning a panic inside the NVRTC bindings (a missing symbol in an old NVRTC, say)
/// into an error instead of unwinding into the caller.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown failure".to_string());
            Err(Error::Unsupported {
                call: CALL,
                reason: format!("the NVRTC library could not be used: {what}"),
            })
        }
    }
}

/// Checks once per process that libnvrtc can be loaded.
fn load() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to dlopen libnvrtc under its usual names; loading it
    // runs the library's initializers, which have no preconditions.
    let present = *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() });
    if present {
        return Ok(());
    }
    let path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    Err(Error::Unsupported {
        call: CALL,
        reason: format!(
            "NVRTC (libnvrtc.so.13) was not found in LD_LIBRARY_PATH (\"{path}\") or the system \
             library path; run `export LD_LIBRARY_PATH=$({tool}):$LD_LIBRARY_PATH` ({tool} \
             installs the pip package nvidia-cuda-nvrtc==13.0.* once and prints its folder)",
            tool = install_nvrtc_command()
        ),
    })
}

/// The command that installs NVRTC, as this program can run it: `rshmem-install-nvrtc` beside the
/// running program (the bin/ folder of a prefix scripts/install-c installed, with rshmemrun and
/// rshmem-info), else `rshmem-install-nvrtc` when it is on PATH, else the checkout's
/// `scripts/install-nvrtc`.
fn install_nvrtc_command() -> String {
    const TOOL: &str = "rshmem-install-nvrtc";
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.to_path_buf()))
    {
        let beside = dir.join(TOOL);
        if beside.is_file() {
            return beside.display().to_string();
        }
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(TOOL).is_file()))
        .unwrap_or(false);
    if on_path {
        TOOL.to_string()
    } else {
        "scripts/install-nvrtc".to_string()
    }
}

fn error_string(r: sys::nvrtcResult) -> String {
    // SAFETY: nvrtcGetErrorString accepts any result code and returns a pointer to a static
    // NUL-terminated string, or NULL.
    let p = unsafe { sys::nvrtcGetErrorString(r) };
    if p.is_null() {
        return format!("{r:?}");
    }
    // SAFETY: non-null, NUL-terminated and static (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn check(r: sys::nvrtcResult, what: &str) -> Result<()> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::invalid(
            CALL,
            format!("{what} failed: {}", error_string(r)),
        ))
    }
}

fn check_arch(arch: &str) -> Result<()> {
    let ok = arch.strip_prefix("sm_").is_some_and(|rest| {
        let digits = rest.trim_end_matches(['a', 'f']);
        (2..=3).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && rest.len() <= digits.len() + 1
    });
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            CALL,
            format!("architecture {arch:?} is not of the form sm_XY (e.g. sm_90 for H100/H200); a CUBIN needs a real GPU architecture"),
        ))
    }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(CALL, format!("the {what} contains a NUL byte")))
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: self.0 was created by nvrtcCreateProgram and is destroyed only here.
        unsafe {
            sys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

impl Program {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: self.0 is a live program; `size` is valid for writes.
        if unsafe { sys::nvrtcGetProgramLogSize(self.0, &mut size) }
            != sys::nvrtcResult::NVRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: buf has the `size` bytes NVRTC asked for, including the terminating NUL.
        if unsafe { sys::nvrtcGetProgramLog(self.0, buf.as_mut_ptr().cast::<c_char>()) }
            != sys::nvrtcResult::NVRTC_SUCCESS
        {
            return String::new();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim_end().to_string()
    }
}

fn compile(src: &str, name: &str, arch: &str, args: &[String]) -> Result<Vec<u8>> {
    let started = std::time::Instant::now();
    let c_src = cstring("source", src)?;
    let c_name = cstring("program name", name)?;
    let headers = super::HEADERS
        .iter()
        .map(|(n, text)| Ok((cstring("header name", n)?, cstring("header", text)?)))
        .collect::<Result<Vec<_>>>()?;
    let header_texts: Vec<*const c_char> = headers.iter().map(|(_, t)| t.as_ptr()).collect();
    let header_names: Vec<*const c_char> = headers.iter().map(|(n, _)| n.as_ptr()).collect();
    let c_args = args
        .iter()
        .map(|a| cstring("option", a))
        .collect::<Result<Vec<_>>>()?;
    let arg_ptrs: Vec<*const c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    let n_headers =
        c_int::try_from(headers.len()).map_err(|_| Error::invalid(CALL, "too many headers"))?;
    let n_args =
        c_int::try_from(arg_ptrs.len()).map_err(|_| Error::invalid(CALL, "too many options"))?;

    let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a live NUL-terminated string (owned by the CStrings above, which
    // outlive the call); the two arrays have n_headers entries each; `raw` is valid for writes.
    let r = unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            c_src.as_ptr(),
            c_name.as_ptr(),
            n_headers,
            header_texts.as_ptr(),
            header_names.as_ptr(),
        )
    };
    check(r, "nvrtcCreateProgram")?;
    let program = Program(raw);

    // SAFETY: program.0 is live; arg_ptrs holds n_args live NUL-terminated strings.
    let r = unsafe { sys::nvrtcCompileProgram(program.0, n_args, arg_ptrs.as_ptr()) };
    let log = program.log();
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::invalid(
            CALL,
            format!(
                "NVRTC could not compile {name} for {arch} ({}); options {args:?}; log:\n{log}",
                error_string(r)
            ),
        ));
    }
    if !log.is_empty() {
        tracing::debug!(%name, %log, "NVRTC messages");
    }

    let mut size = 0usize;
    // SAFETY: program.0 is live and compiled; `size` is valid for writes.
    let r = unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) };
    check(r, "nvrtcGetCUBINSize")?;
    let mut cubin = vec![0u8; size];
    if size > 0 {
        // SAFETY: cubin has exactly the `size` bytes NVRTC reported.
        let r = unsafe { sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast::<c_char>()) };
        check(r, "nvrtcGetCUBIN")?;
    }
    if !is_elf(&cubin) {
        return Err(Error::invalid(
            CALL,
            format!("NVRTC returned no CUBIN for {name} ({size} bytes, not an ELF image); is {arch} a real GPU architecture?"),
        ));
    }
    tracing::debug!(%name, %arch, bytes = cubin.len(), ms = started.elapsed().as_millis() as u64, "compiled with NVRTC");
    Ok(cubin)
}

fn is_elf(b: &[u8]) -> bool {
    b.len() > 4 && b[..4] == *b"\x7fELF"
}

// ---------------------------------------------------------------------------------------------
// Cache.

const ENTRY_MAGIC: &[u8] = b"rshmem cubin cache 1\n";

/// FNV-1a, 64 bits: names cache files (the full key is stored and compared, so a collision only
/// costs a recompilation).
fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Everything the CUBIN depends on, unambiguously (length-prefixed parts).
fn cache_key(src: &str, name: &str, arch: &str, args: &[String], version: (i32, i32)) -> Vec<u8> {
    let mut key = Vec::with_capacity(src.len() + 64 * 1024);
    let mut part = |b: &[u8]| {
        key.extend_from_slice(&(b.len() as u64).to_le_bytes());
        key.extend_from_slice(b);
    };
    part(format!("nvrtc {}.{}", version.0, version.1).as_bytes());
    part(format!("state {}", super::state::DEVICE_STATE_VERSION).as_bytes());
    part(arch.as_bytes());
    part(name.as_bytes());
    for a in args {
        part(a.as_bytes());
    }
    for (n, text) in super::HEADERS {
        part(n.as_bytes());
        part(text.as_bytes());
    }
    part(src.as_bytes());
    key
}

/// Options that make NVRTC read files from disk, which the key does not cover.
fn reads_files(args: &[String]) -> bool {
    args.iter().any(|a| {
        a.starts_with("-I")
            || a.starts_with("--include-path")
            || a.starts_with("--pre-include")
            || a.starts_with("-include")
    })
}

fn cache_dir_for(options: &[String], cache: &Cache) -> Option<PathBuf> {
    if reads_files(options) {
        return None;
    }
    let dir = match cache {
        Cache::Off => return None,
        Cache::Dir(d) => d.clone(),
        Cache::Default => default_cache_dir()?,
    };
    match usable_dir(&dir) {
        Ok(()) => Some(dir),
        Err(reason) => {
            tracing::debug!(dir = %dir.display(), %reason, "not caching CUBINs");
            None
        }
    }
}

/// Creates `dir` owner-only if missing; refuses a directory another user owns or can write to.
fn usable_dir(dir: &Path) -> std::result::Result<(), String> {
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create it: {e}"))?;
    }
    let meta = fs::metadata(dir).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_dir() {
        return Err("not a directory".to_string());
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err("owned by another user".to_string());
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err("writable by other users".to_string());
    }
    Ok(())
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if b.len() < n {
        return None;
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Some(head)
}

fn take_u64(b: &mut &[u8]) -> Option<u64> {
    take(b, 8)
        .and_then(|x| x.try_into().ok())
        .map(u64::from_le_bytes)
}

/// The cached CUBIN for `key`, if `path` holds a complete, intact entry for exactly that key.
fn read_entry(path: &Path, key: &[u8]) -> Option<Vec<u8>> {
    let data = fs::read(path).ok()?;
    let mut b = data.as_slice();
    if take(&mut b, ENTRY_MAGIC.len())? != ENTRY_MAGIC {
        return None;
    }
    let key_len = usize::try_from(take_u64(&mut b)?).ok()?;
    if take(&mut b, key_len)? != key {
        return None;
    }
    let len = usize::try_from(take_u64(&mut b)?).ok()?;
    let cubin = take(&mut b, len)?;
    let sum = take_u64(&mut b)?;
    (b.is_empty() && sum == fnv1a64(cubin) && is_elf(cubin)).then(|| cubin.to_vec())
}

fn write_entry(dir: &Path, path: &Path, key: &[u8], cubin: &[u8]) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(
        ".tmp-{}-{}-{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(ENTRY_MAGIC)?;
        f.write_all(&(key.len() as u64).to_le_bytes())?;
        f.write_all(key)?;
        f.write_all(&(cubin.len() as u64).to_le_bytes())?;
        f.write_all(cubin)?;
        f.write_all(&fnv1a64(cubin).to_le_bytes())?;
        f.flush()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names() {
        for ok in ["sm_90", "sm_90a", "sm_100", "sm_100f", "sm_80"] {
            assert!(check_arch(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "sm90",
            "compute_90",
            "sm_9",
            "sm_90aa",
            "sm_x0",
            "sm_1000",
        ] {
            assert!(check_arch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cache_entries_round_trip_and_reject_damage() {
        let dir = std::env::temp_dir().join(format!("rshmem-nvrtc-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        usable_dir(&dir).expect("create cache dir");
        assert_eq!(
            fs::metadata(&dir).expect("metadata").permissions().mode() & 0o777,
            0o700
        );
        let key = cache_key("src", "n.cu", "sm_90", &["-std=c++17".to_string()], (13, 0));
        let path = dir.join("entry.cubin");
        let cubin = b"\x7fELF rest of an image".to_vec();
        write_entry(&dir, &path, &key, &cubin).expect("write entry");
        assert_eq!(read_entry(&path, &key), Some(cubin.clone()));
        // Another key: miss.
        let other = cache_key(
            "src2",
            "n.cu",
            "sm_90",
            &["-std=c++17".to_string()],
            (13, 0),
        );
        assert_eq!(read_entry(&path, &other), None);
        // Truncated and flipped entries: miss.
        let data = fs::read(&path).expect("read entry");
        fs::write(&path, &data[..data.len() - 3]).expect("truncate");
        assert_eq!(read_entry(&path, &key), None);
        let mut flipped = data.clone();
        let n = flipped.len();
        flipped[n - 12] ^= 1;
        fs::write(&path, &flipped).expect("flip");
        assert_eq!(read_entry(&path, &key), None);
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(&dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn include_options_disable_the_cache() {
        let options = vec!["-I/some/dir".to_string()];
        assert_eq!(
            cache_dir_for(&options, &Cache::Dir(std::env::temp_dir())),
            None
        );
        assert_eq!(cache_dir_for(&[], &Cache::Off), None);
    }
}

//! Placeholder until the NVRTC wrapper lands (being written now; replace this file entirely).

/// NVRTC options.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Target architecture, e.g. `sm_90`.
    pub arch: String,
    /// Extra NVRTC options.
    pub options: Vec<String>,
    /// Program name.
    pub name: String,
}

/// Compiles CUDA source to CUBIN.
pub fn compile_cubin(_src: &str, _opts: &CompileOptions) -> crate::Result<Vec<u8>> {
    Err(crate::Error::Unsupported { call: "compile", reason: "NVRTC wrapper not built yet".into() })
}

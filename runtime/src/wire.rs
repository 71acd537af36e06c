//! Wire codes: the numbers the host API, the proxy, the transports and the device library agree
//! on — atomic operations, proxy request kinds, comparisons, signal operations, reduction
//! operators and element types — each defined once here with its conversion from the raw
//! number (`TryFrom`). [`crate::contract`] writes the same numbers, with the struct layouts the
//! host and the device share, as C++ `static_assert`s.

use std::any::TypeId;

use crate::types::{Cmp, SignalOp};

/// A raw code that names nothing of its kind (the kind and the number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownCode {
    /// What the code should have named ("atomic operation", ...).
    pub kind: &'static str,
    /// The number received.
    pub code: i64,
}

impl std::fmt::Display for UnknownCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not a valid {} code", self.code, self.kind)
    }
}

impl std::error::Error for UnknownCode {}

/// Declares a `#[repr]` enum with explicit codes, its `code()` and `from_code` (None for a
/// number that names no variant): the one shape of every fixed code of a frame or a payload
/// (these here, the TCP transport's heaps and rejections, UCX's refusals, the proxy's failures,
/// the remote-transport choice the PEs exchange). With `, fn NAME` after the type, every variant
/// also carries its words for messages (`Variant = code => "words",`) and `NAME()` gives them.
macro_rules! code_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $repr:ty, $(#[$tmeta:meta])* fn $text:ident {
            $($(#[$vmeta:meta])* $variant:ident = $code:literal => $words:literal,)+
        }
    ) => {
        $crate::wire::code_enum! {
            $(#[$meta])*
            $vis enum $name: $repr {
                $($(#[$vmeta])* $variant = $code,)+
            }
        }

        impl $name {
            $(#[$tmeta])*
            pub const fn $text(self) -> &'static str {
                match self {
                    $($name::$variant => $words,)+
                }
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $repr:ty {
            $($(#[$vmeta:meta])* $variant:ident = $code:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr($repr)]
        $vis enum $name {
            $($(#[$vmeta])* $variant = $code,)+
        }

        #[allow(dead_code)]
        impl $name {
            /// The raw code.
            pub const fn code(self) -> $repr {
                self as $repr
            }

            /// The value of raw code `c`, None if it names none.
            pub const fn from_code(c: $repr) -> Option<Self> {
                match c {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use code_enum;

/// [`code_enum!`] for the codes the device library shares (these here and the proxy's failures,
/// `proxy::fifo::Failure`): also `TryFrom` of the raw number and the list of (variant, device
/// name) the contract generator uses.
macro_rules! codes {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $repr:ty, $kind:literal {
            $($(#[$vmeta:meta])* $variant:ident = $code:literal => $dev:literal,)+
        }
    ) => {
        $crate::wire::code_enum! {
            $(#[$meta])*
            $vis enum $name: $repr {
                $($(#[$vmeta])* $variant = $code,)+
            }
        }

        impl $name {
            /// Every value with the device library's name for it.
            pub const ALL: &'static [($name, &'static str)] = &[$(($name::$variant, $dev),)+];
        }

        impl TryFrom<$repr> for $name {
            type Error = $crate::wire::UnknownCode;
            fn try_from(c: $repr) -> Result<Self, $crate::wire::UnknownCode> {
                $name::from_code(c).ok_or($crate::wire::UnknownCode { kind: $kind, code: c as i64 })
            }
        }
    };
}
pub(crate) use codes;

/// `From` both ways between a runtime enum and its wire code, whose variants have the same
/// names: each pair listed once (the matches stay exhaustive both ways); and `TryFrom` of the
/// raw number (`$repr`) for the runtime enum, through the wire code.
macro_rules! same_variants {
    ($a:ident <=> $b:ident : $repr:ty { $($v:ident),+ }) => {
        impl TryFrom<$repr> for $a {
            type Error = UnknownCode;
            fn try_from(c: $repr) -> Result<$a, UnknownCode> {
                $b::try_from(c).map($a::from)
            }
        }

        impl From<$a> for $b {
            fn from(x: $a) -> $b {
                match x {
                    $($a::$v => $b::$v,)+
                }
            }
        }

        impl From<$b> for $a {
            fn from(x: $b) -> $a {
                match x {
                    $($b::$v => $a::$v,)+
                }
            }
        }
    };
}

codes! {
    /// An atomic operation on a 4- or 8-byte word (the proxy request's `amo` byte, the TCP
    /// transport's AMO frames, `RSHMEM_PROXY_AMO_*` in proxy.cuh).
    pub enum AmoOp: u8, "atomic operation" {
        /// Read.
        Fetch = 0 => "RSHMEM_PROXY_AMO_FETCH",
        /// Write.
        Set = 1 => "RSHMEM_PROXY_AMO_SET",
        /// Exchange.
        Swap = 2 => "RSHMEM_PROXY_AMO_SWAP",
        /// Compare and swap with `cond`.
        CompareSwap = 3 => "RSHMEM_PROXY_AMO_CSWAP",
        /// Wrapping add.
        FetchAdd = 4 => "RSHMEM_PROXY_AMO_ADD",
        /// Bitwise and.
        FetchAnd = 5 => "RSHMEM_PROXY_AMO_AND",
        /// Bitwise or.
        FetchOr = 6 => "RSHMEM_PROXY_AMO_OR",
        /// Bitwise xor.
        FetchXor = 7 => "RSHMEM_PROXY_AMO_XOR",
    }
}

impl AmoOp {
    /// The new value of a word holding `old` after the operation (for transports that build
    /// atomics out of compare-and-swap; `CompareSwap` only applies when `old == cond`).
    pub fn apply(self, old: u64, value: u64, cond: u64) -> u64 {
        match self {
            AmoOp::Fetch => old,
            AmoOp::Set | AmoOp::Swap => value,
            AmoOp::CompareSwap => {
                if old == cond {
                    value
                } else {
                    old
                }
            }
            AmoOp::FetchAdd => old.wrapping_add(value),
            AmoOp::FetchAnd => old & value,
            AmoOp::FetchOr => old | value,
            AmoOp::FetchXor => old ^ value,
        }
    }
}

/// One atomic operation on an aligned word: what to do, the word's size in bytes (4 or 8),
/// the operand, and the value a `CompareSwap` compares with (the others ignore it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amo {
    /// The operation.
    pub op: AmoOp,
    /// The word's size in bytes.
    pub size: usize,
    /// The operand (the new value of `Set`, `Swap` and `CompareSwap`).
    pub value: u64,
    /// What `CompareSwap` compares the word with.
    pub cond: u64,
}

impl Amo {
    /// `op` with `value` and `cond` on a word of `size` bytes.
    pub const fn new(op: AmoOp, size: usize, value: u64, cond: u64) -> Amo {
        Amo {
            op,
            size,
            value,
            cond,
        }
    }

    /// A read of the word of `size` bytes.
    pub const fn fetch(size: usize) -> Amo {
        Amo::new(AmoOp::Fetch, size, 0, 0)
    }

    /// A write of `value` into an 8-byte word.
    pub const fn set64(value: u64) -> Amo {
        Amo::new(AmoOp::Set, 8, value, 0)
    }

    /// The new value of a word holding `old` after the operation ([`AmoOp::apply`]).
    pub fn apply(self, old: u64) -> u64 {
        self.op.apply(old, self.value, self.cond)
    }
}

codes! {
    /// The kind of a proxy request (the ring slot's `op` byte, `RSHMEM_PROXY_OP_*`).
    pub enum ProxyOp: u8, "proxy request" {
        /// Copy `nbytes` from local memory (or the inline data) to `remote` on `pe`.
        Put = 1 => "RSHMEM_PROXY_OP_PUT",
        /// Copy `nbytes` from `remote` on `pe` to local memory (or the inline result).
        Get = 2 => "RSHMEM_PROXY_OP_GET",
        /// Atomic `amo` of `size` bytes on `remote` on `pe`.
        Amo = 3 => "RSHMEM_PROXY_OP_AMO",
        /// Signal update of the u64 at `remote` on `pe`.
        Signal = 4 => "RSHMEM_PROXY_OP_SIGNAL",
        /// Complete every earlier request.
        Quiet = 5 => "RSHMEM_PROXY_OP_QUIET",
        /// Complete every earlier request, then a barrier over all PEs.
        Barrier = 6 => "RSHMEM_PROXY_OP_BARRIER",
        /// Nothing (measures the ring's round trip).
        Nop = 7 => "RSHMEM_PROXY_OP_NOP",
    }
}

codes! {
    /// A comparison's code in the device library and the C APIs (`RSHMEM_CMP_*`).
    pub enum CmpCode: i32, "comparison" {
        /// `==`
        Eq = 0 => "RSHMEM_CMP_EQ",
        /// `!=`
        Ne = 1 => "RSHMEM_CMP_NE",
        /// `>`
        Gt = 2 => "RSHMEM_CMP_GT",
        /// `>=`
        Ge = 3 => "RSHMEM_CMP_GE",
        /// `<`
        Lt = 4 => "RSHMEM_CMP_LT",
        /// `<=`
        Le = 5 => "RSHMEM_CMP_LE",
    }
}

same_variants!(Cmp <=> CmpCode: i32 { Eq, Ne, Gt, Ge, Lt, Le });

codes! {
    /// A signal operation's code (`RSHMEM_SIGNAL_*`; also the proxy's signal request `amo` byte).
    pub enum SignalCode: i32, "signal operation" {
        /// Store the value.
        Set = 0 => "RSHMEM_SIGNAL_SET",
        /// Atomically add the value.
        Add = 1 => "RSHMEM_SIGNAL_ADD",
    }
}

same_variants!(SignalOp <=> SignalCode: i32 { Set, Add });

codes! {
    /// A reduction operator's code in the device collectives (`RSHMEM_OP_*` in coll.cuh).
    pub enum ReduceCode: i32, "reduction operator" {
        /// Sum.
        Sum = 0 => "RSHMEM_OP_SUM",
        /// Product.
        Prod = 1 => "RSHMEM_OP_PROD",
        /// Minimum.
        Min = 2 => "RSHMEM_OP_MIN",
        /// Maximum.
        Max = 3 => "RSHMEM_OP_MAX",
        /// Bitwise and.
        And = 4 => "RSHMEM_OP_AND",
        /// Bitwise or.
        Or = 5 => "RSHMEM_OP_OR",
        /// Bitwise xor.
        Xor = 6 => "RSHMEM_OP_XOR",
    }
}

impl ReduceCode {
    /// The operator of a reduction call name (`"sum_reduce"`, ... as in `ReduceOp::CALL`).
    pub fn of_call(call: &str) -> Option<ReduceCode> {
        Some(match call {
            "sum_reduce" => ReduceCode::Sum,
            "prod_reduce" => ReduceCode::Prod,
            "min_reduce" => ReduceCode::Min,
            "max_reduce" => ReduceCode::Max,
            "and_reduce" => ReduceCode::And,
            "or_reduce" => ReduceCode::Or,
            "xor_reduce" => ReduceCode::Xor,
            _ => return None,
        })
    }
}

/// The device library's C++ name of the element type `T` of a device collective, or None for a
/// type the device collectives do not take.
pub fn device_type<T: 'static>() -> Option<&'static str> {
    let t = TypeId::of::<T>();
    let table: [(TypeId, &str); 16] = [
        (TypeId::of::<i8>(), "int8_t"),
        (TypeId::of::<i16>(), "int16_t"),
        (TypeId::of::<i32>(), "int32_t"),
        (TypeId::of::<i64>(), "int64_t"),
        (TypeId::of::<i128>(), "__int128"),
        (TypeId::of::<u8>(), "uint8_t"),
        (TypeId::of::<u16>(), "uint16_t"),
        (TypeId::of::<u32>(), "uint32_t"),
        (TypeId::of::<u64>(), "uint64_t"),
        (TypeId::of::<u128>(), "unsigned __int128"),
        (TypeId::of::<isize>(), "int64_t"),
        (TypeId::of::<usize>(), "uint64_t"),
        (TypeId::of::<f32>(), "float"),
        (TypeId::of::<f64>(), "double"),
        // The device library's 16-bit float words (rshmem_detail::f16 / bf16 in coll.cuh).
        (TypeId::of::<crate::F16>(), "f16"),
        (TypeId::of::<crate::BF16>(), "bf16"),
    ];
    table.iter().find(|(id, _)| *id == t).map(|&(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_named() {
        for &(v, _) in AmoOp::ALL {
            assert_eq!(AmoOp::try_from(v.code()), Ok(v));
        }
        for &(v, _) in ProxyOp::ALL {
            assert_eq!(ProxyOp::try_from(v.code()), Ok(v));
        }
        for c in [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le] {
            assert_eq!(Cmp::try_from(CmpCode::from(c).code()), Ok(c));
        }
        for s in [SignalOp::Set, SignalOp::Add] {
            assert_eq!(SignalOp::try_from(SignalCode::from(s).code()), Ok(s));
        }
        let e = AmoOp::try_from(8).unwrap_err();
        assert_eq!(e.to_string(), "8 is not a valid atomic operation code");
        assert!(ProxyOp::try_from(0).is_err());
        assert!(Cmp::try_from(-1).is_err());
        assert_eq!(ReduceCode::of_call("max_reduce"), Some(ReduceCode::Max));
        assert_eq!(ReduceCode::of_call("median_reduce"), None);
    }

    #[test]
    fn device_types_cover_the_reduction_types() {
        assert_eq!(device_type::<f64>(), Some("double"));
        assert_eq!(device_type::<usize>(), Some("uint64_t"));
        assert_eq!(device_type::<bool>(), None);
        assert_eq!(device_type::<crate::F16>(), Some("f16"));
        assert_eq!(device_type::<crate::BF16>(), Some("bf16"));
    }
}

//! Which transport serves each PE pair.
//!
//! PEs of this host are reached by load/store through the heap's own transport ([`Via::Local`]).
//! For the others, `RSHMEM_REMOTE_TRANSPORT` picks: `tcp`, `verbs`, `ucx`, or `auto` (verbs
//! between two PEs that both opened an RDMA device; else UCX between two PEs whose UCX has an
//! RDMA transport; TCP otherwise). Every PE announces through the bootstrap what it asked for,
//! whether verbs opened and what UCX it has ([`Announce`]); [`plan`] then computes the same
//! answer on both ends of every pair.

use std::fmt;

pub use crate::config::{RemoteChoice, UcxErrorMode};

/// How this PE reaches one PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Same host: load/store through the heap's transport (shm or p2p); also this PE itself.
    Local,
    /// The TCP transport.
    Tcp,
    /// The verbs transport.
    Verbs,
    /// The UCX transport.
    Ucx,
}

/// What one PE tells the others at init: its setting, whether it opened an RDMA device, and
/// what UCX it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Announce {
    /// Its `RSHMEM_REMOTE_TRANSPORT`.
    pub choice: RemoteChoice,
    /// It opened an RDMA device (always false without the `verbs` feature).
    pub verbs: bool,
    /// It loaded and initialised UCX (a worker exists).
    pub ucx: bool,
    /// Its UCX has an RDMA transport (InfiniBand/RoCE).
    pub ucx_rdma: bool,
    /// Its UCX endpoints would use peer-failure handling ([`ucx_peer_errors`] of its setting).
    pub ucx_peer: bool,
    /// Its `RSHMEM_UCX_ERROR_MODE` was `peer` or `none`, not `auto`.
    pub ucx_mode_set: bool,
}

impl Announce {
    /// Whether it has the remote transport `c` open (`tcp` and `auto` need nothing opened).
    fn opened(&self, c: RemoteChoice) -> bool {
        match c {
            RemoteChoice::Ucx => self.ucx,
            RemoteChoice::Verbs => self.verbs,
            RemoteChoice::Tcp | RemoteChoice::Auto => true,
        }
    }

    /// Two bytes: the setting, and flags (bit 0 verbs, bit 1 UCX, bit 2 UCX with RDMA, bit 3
    /// UCX with peer-failure handling, bit 4 its error mode set explicitly).
    pub fn encode(self) -> [u8; 2] {
        [
            self.choice.code(),
            self.verbs as u8
                | (self.ucx as u8) << 1
                | (self.ucx_rdma as u8) << 2
                | (self.ucx_peer as u8) << 3
                | (self.ucx_mode_set as u8) << 4,
        ]
    }

    /// The inverse of [`Announce::encode`]; `None` for anything else.
    pub fn decode(b: &[u8]) -> Option<Self> {
        match b {
            [c, f] if *f < 32 => Some(Announce {
                choice: RemoteChoice::from_code(*c)?,
                verbs: f & 1 != 0,
                ucx: f & 2 != 0,
                ucx_rdma: f & 4 != 0,
                ucx_peer: f & 8 != 0,
                ucx_mode_set: f & 16 != 0,
            }),
            _ => None,
        }
    }
}

/// Why no plan could be made; the message names the PEs involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Routes for PE `me`: `local[pe]` says whether PE `pe` shares this host; `all[pe]` is what PE
/// `pe` announced. Every PE must ask for the same setting. With `verbs`, every PE must have
/// opened a device (in a job that spans hosts every PE has remote peers), so that all PEs fail
/// together instead of some waiting for those that stopped. With `auto`, a pair uses verbs when both of
/// its PEs opened a device. Both ends of a pair compute the same answer.
pub fn plan(me: usize, local: &[bool], all: &[Announce]) -> Result<Vec<Via>, PlanError> {
    let n = all.len();
    if local.len() != n || me >= n {
        return Err(PlanError(format!(
            "inconsistent job description: {n} announcements, {} host entries, PE {me}",
            local.len()
        )));
    }
    let choice = all[me].choice;
    let differ: Vec<String> = (0..n)
        .filter(|&p| all[p].choice != choice)
        .map(|p| format!("PE {p} has {}", all[p].choice))
        .collect();
    if !differ.is_empty() {
        return Err(PlanError(format!(
            "PEs disagree on RSHMEM_REMOTE_TRANSPORT: PE {me} has {choice}, {}; set the same value on every PE",
            differ.join(", ")
        )));
    }
    let has_remote = local.iter().any(|l| !l);
    // A remote transport asked for by name must be open on every PE.
    let named = match choice {
        RemoteChoice::Ucx => Some("could not load or initialise UCX"),
        RemoteChoice::Verbs => Some("could not open an RDMA device"),
        RemoteChoice::Tcp | RemoteChoice::Auto => None,
    };
    if let Some(cannot) = named.filter(|_| has_remote) {
        let without: Vec<String> = (0..n)
            .filter(|&p| !all[p].opened(choice))
            .map(|p| p.to_string())
            .collect();
        if !without.is_empty() {
            return Err(PlanError(format!(
                "RSHMEM_REMOTE_TRANSPORT={choice} but PE(s) {} {cannot}",
                without.join(", ")
            )));
        }
    }
    Ok((0..n)
        .map(|p| {
            if local[p] {
                Via::Local
            } else {
                match choice {
                    RemoteChoice::Tcp => Via::Tcp,
                    RemoteChoice::Verbs => Via::Verbs,
                    RemoteChoice::Ucx => Via::Ucx,
                    RemoteChoice::Auto if all[me].verbs && all[p].verbs => Via::Verbs,
                    RemoteChoice::Auto if all[me].ucx_rdma && all[p].ucx_rdma => Via::Ucx,
                    RemoteChoice::Auto => Via::Tcp,
                }
            }
        })
        .collect())
}

/// True if some pair of the job uses verbs, computed from the announcements alone, so every PE
/// gets the same answer (the verbs connection exchange is collective, so all PEs take part
/// when any pair needs it). At least two PEs must have opened a device and the setting must not
/// be `tcp`; PEs of one host never talk over verbs, but a PE cannot see the other hosts' layout,
/// so this may say yes for a job where every device-holding PE is on one host (the exchange then
/// connects nothing).
pub fn verbs_in_job(all: &[Announce]) -> bool {
    all.first().is_some_and(|a| a.choice != RemoteChoice::Tcp)
        && all.iter().filter(|a| a.verbs).count() >= 2
}

/// True if some pair of the job uses UCX, computed from the announcements alone (like
/// [`verbs_in_job`]): the UCX exchanges are collective, so every PE takes part when any pair
/// needs them. A PE that has UCX but no pair to use it on still takes part, connecting nothing.
pub fn ucx_in_job(all: &[Announce]) -> bool {
    match all.first().map(|a| a.choice) {
        Some(RemoteChoice::Ucx) => all.iter().filter(|a| a.ucx).count() >= 2,
        Some(RemoteChoice::Auto) => all.iter().filter(|a| a.ucx_rdma).count() >= 2,
        _ => false,
    }
}

/// Whether atomics over UCX are applied by rshmem on the target (UCX active messages, see
/// `transport/ucx/amo.rs`) instead of by UCX's own atomics: always on the GPU backend (UCX's
/// software atomics dereference the target address on the CPU, which GPU memory is not); when
/// asked for (`RSHMEM_UCX_TARGET_ATOMICS=1`); and on a host without an RDMA device, where UCX
/// would emulate them (UCX 1.22 with peer-failure handling also finds no protocol for software
/// fetching atomics over TCP: "cannot find remote protocol ... amo_fetch").
pub fn ucx_target_atomics(gpu: bool, forced: bool, rdma: bool) -> bool {
    // Without RDMA, UCX emulates atomics in software, and its target answers the initiator from
    // inside its handler, which aborts the process when the initiator died (as for puts, see
    // `ucx_emulated_rma`): rshmem's own handlers answer through `ucp_am_send_nbx`, whose
    // failure is only a status.
    gpu || forced || !rdma
}

/// Why a UCX would carry puts and gets over TCP by its software emulation (active messages
/// applied by the target's UCX, which answers each from inside its handler); None when it
/// would not. That answer is sent with `ucp_request_send`, which calls `ucs_fatal` on any
/// error but "no resource": when the initiator dies with puts to this PE in flight, the target
/// aborts (`ucp_request.inl: Fatal: unexpected error: Endpoint timeout` in `ucp_put_handler`;
/// measured with UCX 1.13.1 in 2 of 3 kill runs, the code unchanged in 1.22). UCX emulates
/// RMA without an RDMA transport (`rdma`) when it opens no TCP RMA lane: always up to 1.13;
/// 1.14-1.19 when the endpoints use peer-failure handling (`peer_errors`); 1.20 and newer with
/// peer-failure handling when the user set `UCX_RNDV_THRESH` (`user_rndv`: rshmem sets it to
/// `inf`, which opens the lane).
pub fn ucx_emulated_rma(
    version: (u32, u32, u32),
    rdma: bool,
    peer_errors: bool,
    user_rndv: bool,
) -> Option<&'static str> {
    let v = (version.0, version.1);
    if rdma {
        None
    } else if v < (1, 14) {
        Some("UCX 1.13 and older have no RMA lane over TCP")
    } else if v <= (1, 19) && peer_errors {
        Some("UCX 1.14 to 1.19 open no RMA lane over TCP for endpoints with peer-failure handling (RSHMEM_UCX_ERROR_MODE=peer)")
    } else if v >= (1, 20) && peer_errors && user_rndv {
        Some("with the UCX_RNDV_THRESH you set, UCX opens no RMA lane over TCP for endpoints with peer-failure handling")
    } else {
        None
    }
}

/// Whether UCX endpoints use UCX's peer-failure handling. It keeps a keepalive on every
/// endpoint (a peer that vanishes without closing its connections is found), but UCX then uses
/// only protocols that can abort: on a memory domain that cannot invalidate registrations (TCP)
/// UCX 1.14-1.19 open no zero-copy RMA lane and emulate every put with active messages (measured
/// with UCX 1.16 over TCP: put + quiet twice OSHMEM's latency, large puts a fifth of its
/// bandwidth; UCX 1.20 and newer open the lane when rendezvous is off, which rshmem sets, see
/// `transport/ucx/ucp.rs`). Without it, a peer that crashes is still reported when its
/// connections close (UCX calls the endpoint's error handler either way); one that vanishes
/// silently only after `RSHMEM_TIMEOUT`. `auto`: without it for a UCX of 1.14-1.19 that has no
/// RDMA transport (`rdma`: one of its resources is InfiniBand/RoCE), with it otherwise.
pub fn ucx_peer_errors(mode: UcxErrorMode, version: (u32, u32, u32), rdma: bool) -> bool {
    match mode {
        UcxErrorMode::Peer => true,
        UcxErrorMode::None => false,
        UcxErrorMode::Auto => {
            let v = (version.0, version.1);
            rdma || !((1, 14)..=(1, 19)).contains(&v)
        }
    }
}

/// Whether the job's UCX endpoints use peer-failure handling: UCX cannot connect an endpoint
/// with it to one without, so every PE that opened UCX must use the same. Yes when every such
/// PE would ([`Announce::ucx_peer`]); a PE whose `auto` chose none (UCX 1.14-1.19 over TCP)
/// takes the job with it. An error when a PE asked for `peer` explicitly and another uses none.
pub fn ucx_peer_errors_in_job(all: &[Announce]) -> Result<bool, PlanError> {
    let with_ucx = || all.iter().enumerate().filter(|(_, a)| a.ucx);
    let Some((q, _)) = with_ucx().find(|(_, a)| !a.ucx_peer) else {
        return Ok(true);
    };
    if let Some((p, _)) = with_ucx().find(|(_, a)| a.ucx_peer && a.ucx_mode_set) {
        return Err(PlanError(format!(
            "PE {p} set RSHMEM_UCX_ERROR_MODE=peer, but PE {q} uses UCX without peer-failure handling (RSHMEM_UCX_ERROR_MODE=none, or auto with a UCX of 1.14 to 1.19 without RDMA); UCX cannot connect endpoints of both kinds: set the same RSHMEM_UCX_ERROR_MODE on every PE"
        )));
    }
    Ok(false)
}

/// True for UCX resources that move CUDA memory (`cuda_copy/...`): UCX applies puts and gets
/// to a CUDA rkey through them when the network cannot reach GPU memory itself (over TCP, the
/// target stages the data through `cuda_copy`; without it UCX aborts the target process).
pub fn ucx_cuda_resource(resource: &str) -> bool {
    resource.starts_with("cuda_copy/")
}

/// Whether a UCX can carry a GPU heap: it must list a `cuda_copy` resource under the current
/// `UCX_*` settings. `resources` is what the context would use (`transport/device`), `tls` the
/// value of `UCX_TLS` (None when unset), `lib` the library's path and version for the message,
/// `cuda_module`: whether that UCX ships its CUDA module (None when unknown). The error says
/// why not and how to fix it.
pub fn ucx_gpu_ready(
    resources: &[String],
    tls: Option<&str>,
    lib: &str,
    cuda_module: Option<bool>,
) -> Result<(), String> {
    if resources.iter().any(|r| ucx_cuda_resource(r)) {
        return Ok(());
    }
    let listed = if resources.is_empty() {
        "none".to_string()
    } else {
        resources.join(", ")
    };
    let tls_excludes = tls.is_some_and(|t| {
        let t = t.trim();
        !t.is_empty()
            && !t.starts_with('^')
            && !t
                .split(',')
                .any(|x| matches!(x.trim(), "all" | "cuda" | "cuda_copy"))
    });
    let cause = if tls_excludes && cuda_module != Some(false) {
        format!(
            "UCX_TLS={} leaves out cuda_copy (add it, e.g. UCX_TLS={},cuda_copy)",
            tls.unwrap_or_default().trim(),
            tls.unwrap_or_default().trim()
        )
    } else if cuda_module == Some(true) {
        "its CUDA module is installed but offers no cuda_copy resource (is the CUDA driver visible to UCX?)".to_string()
    } else {
        "it was built without CUDA support; use a CUDA-enabled UCX, e.g. the libucx-cu13 Python wheel (pip install libucx-cu13), with RSHMEM_UCX_LIB=<its libucx/lib>/libucp.so.0 and that folder on LD_LIBRARY_PATH".to_string()
    };
    Err(format!(
        "{lib} cannot carry the GPU heap: UCX moves GPU memory with its cuda_copy transport, which it does not offer here (its resources: {listed}); {cause}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PE 0's plan in the job of [`LOCAL0`].
    fn plan0(a: &[Announce]) -> Vec<Via> {
        plan(0, &LOCAL0, a).unwrap()
    }

    fn ann(choice: RemoteChoice, verbs: &[bool]) -> Vec<Announce> {
        verbs
            .iter()
            .map(|&v| Announce {
                choice,
                verbs: v,
                ..Default::default()
            })
            .collect()
    }

    fn ann_ucx(choice: RemoteChoice, ucx: &[bool], rdma: &[bool]) -> Vec<Announce> {
        ucx.iter()
            .zip(rdma)
            .map(|(&u, &r)| Announce {
                choice,
                ucx: u,
                ucx_rdma: r,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn ucx_forced() {
        let a = ann_ucx(RemoteChoice::Ucx, &[true; 4], &[false; 4]);
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Ucx, Via::Ucx]);
        assert!(ucx_in_job(&a));
        // A PE without UCX fails the plan on every PE, naming it.
        let a = ann_ucx(RemoteChoice::Ucx, &[true, true, false, true], &[false; 4]);
        let e = plan(0, &LOCAL0, &a).unwrap_err();
        assert!(
            e.0.contains("PE(s) 2 could not load or initialise UCX"),
            "{e}"
        );
        let e = plan(3, &[false, false, true, true], &a).unwrap_err();
        assert!(e.0.contains("PE(s) 2 "), "{e}");
        // One host: nothing needed.
        let a = ann_ucx(RemoteChoice::Ucx, &[false; 2], &[false; 2]);
        assert_eq!(plan(1, &[true, true], &a).unwrap(), [Via::Local; 2]);
    }

    #[test]
    fn auto_prefers_verbs_then_ucx_rdma_then_tcp() {
        // UCX over TCP only: auto stays on rshmem's TCP.
        let a = ann_ucx(RemoteChoice::Auto, &[true; 4], &[false; 4]);
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Tcp, Via::Tcp]);
        assert!(!ucx_in_job(&a));
        // UCX with RDMA on 0, 2 (not 3): 0↔2 over UCX, 0↔3 over TCP.
        let a = ann_ucx(RemoteChoice::Auto, &[true; 4], &[true, true, true, false]);
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Ucx, Via::Tcp]);
        assert!(ucx_in_job(&a));
        // Verbs wins where both opened a device.
        let mut a = a;
        a[0].verbs = true;
        a[2].verbs = true;
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Verbs, Via::Tcp]);
        // tcp forced ignores UCX.
        let a = ann_ucx(RemoteChoice::Tcp, &[true; 4], &[true; 4]);
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Tcp, Via::Tcp]);
        assert!(!ucx_in_job(&a));
    }

    #[test]
    fn parse_choice() {
        assert_eq!(RemoteChoice::parse("auto"), Some(RemoteChoice::Auto));
        assert_eq!(RemoteChoice::parse(" TCP "), Some(RemoteChoice::Tcp));
        assert_eq!(RemoteChoice::parse("verbs"), Some(RemoteChoice::Verbs));
        assert_eq!(RemoteChoice::parse("ib"), Some(RemoteChoice::Verbs));
        assert_eq!(RemoteChoice::parse("udp"), None);
        assert_eq!(RemoteChoice::parse("UCX"), Some(RemoteChoice::Ucx));
        for c in [
            RemoteChoice::Auto,
            RemoteChoice::Tcp,
            RemoteChoice::Verbs,
            RemoteChoice::Ucx,
        ] {
            assert_eq!(RemoteChoice::parse(&c.to_string()), Some(c));
        }
    }

    #[test]
    fn announce_round_trip() {
        for choice in [
            RemoteChoice::Auto,
            RemoteChoice::Tcp,
            RemoteChoice::Verbs,
            RemoteChoice::Ucx,
        ] {
            for f in 0..32u8 {
                let a = Announce {
                    choice,
                    verbs: f & 1 != 0,
                    ucx: f & 2 != 0,
                    ucx_rdma: f & 4 != 0,
                    ucx_peer: f & 8 != 0,
                    ucx_mode_set: f & 16 != 0,
                };
                assert_eq!(Announce::decode(&a.encode()), Some(a));
            }
        }
        assert_eq!(Announce::decode(&[]), None);
        assert_eq!(Announce::decode(&[0, 32]), None);
        assert_eq!(Announce::decode(&[4, 0]), None);
        assert_eq!(Announce::decode(&[0, 0, 0]), None);
    }

    #[test]
    fn ucx_peer_errors_agreed_by_the_job() {
        let a = |ucx, peer, set| Announce {
            choice: RemoteChoice::Ucx,
            ucx,
            ucx_peer: peer,
            ucx_mode_set: set,
            ..Default::default()
        };
        assert_eq!(ucx_peer_errors_in_job(&[a(true, true, false); 3]), Ok(true));
        // One PE's auto chose none: the job follows it.
        let mixed = [
            a(true, true, false),
            a(true, false, false),
            a(true, true, false),
        ];
        assert_eq!(ucx_peer_errors_in_job(&mixed), Ok(false));
        // A PE without UCX does not count.
        assert_eq!(
            ucx_peer_errors_in_job(&[a(true, true, true), a(false, false, false)]),
            Ok(true)
        );
        // An explicit peer against a PE without: an error naming both.
        let e = ucx_peer_errors_in_job(&[a(true, false, true), a(true, true, true)]).unwrap_err();
        assert!(
            e.0.contains("PE 1 set RSHMEM_UCX_ERROR_MODE=peer") && e.0.contains("PE 0 uses"),
            "{e}"
        );
    }

    #[test]
    fn ucx_peer_errors_rule() {
        use UcxErrorMode::{Auto, None, Peer};
        for v in [(1, 13, 1), (1, 16, 0), (1, 22, 0)] {
            for rdma in [false, true] {
                assert!(ucx_peer_errors(Peer, v, rdma), "peer: always");
                assert!(!ucx_peer_errors(None, v, rdma), "none: never");
            }
        }
        assert!(ucx_peer_errors(Auto, (1, 13, 1), false), "1.13: no cost");
        assert!(!ucx_peer_errors(Auto, (1, 14, 0), false), "1.14 over TCP");
        assert!(!ucx_peer_errors(Auto, (1, 16, 0), false), "1.16 over TCP");
        assert!(!ucx_peer_errors(Auto, (1, 19, 1), false), "1.19 over TCP");
        assert!(ucx_peer_errors(Auto, (1, 16, 0), true), "1.16 with RDMA");
        assert!(
            ucx_peer_errors(Auto, (1, 20, 0), false),
            "1.20: rendezvous off suffices"
        );
        assert!(ucx_peer_errors(Auto, (1, 22, 0), false));
        assert_eq!(UcxErrorMode::parse(" PEER "), Some(Peer));
        assert_eq!(UcxErrorMode::parse("none"), Some(None));
        assert_eq!(UcxErrorMode::parse(""), Some(Auto));
        assert_eq!(UcxErrorMode::parse("off"), Option::None);
    }

    #[test]
    fn ucx_target_atomics_rule() {
        assert!(
            ucx_target_atomics(false, false, false),
            "no RDMA: rshmem's (UCX's emulation aborts the target of a dead initiator)"
        );
        assert!(ucx_target_atomics(true, false, true), "GPU: always");
        assert!(ucx_target_atomics(false, true, true), "asked for");
        assert!(
            !ucx_target_atomics(false, false, true),
            "with RDMA: UCX's own"
        );
    }

    #[test]
    fn ucx_emulated_rma_rule() {
        assert!(ucx_emulated_rma((1, 13, 1), false, false, false).is_some());
        assert!(
            ucx_emulated_rma((1, 13, 1), true, true, false).is_none(),
            "RDMA"
        );
        assert!(ucx_emulated_rma((1, 16, 0), false, true, false).is_some());
        assert!(ucx_emulated_rma((1, 16, 0), false, false, false).is_none());
        assert!(ucx_emulated_rma((1, 22, 0), false, true, false).is_none());
        assert!(ucx_emulated_rma((1, 22, 0), false, true, true).is_some());
    }

    fn res(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ucx_gpu_needs_cuda_copy() {
        let lib = "UCX 1.22.0 (libucp.so.0)";
        assert!(ucx_gpu_ready(
            &res(&["tcp/lo", "cuda_copy/cuda"]),
            Some("tcp,cuda_copy"),
            lib,
            Some(true)
        )
        .is_ok());
        assert!(ucx_gpu_ready(&res(&["tcp/lo", "cuda_copy/cuda"]), None, lib, None).is_ok());
        // Debian's UCX: no CUDA module, no cuda_copy: names the cause and the fix.
        let e = ucx_gpu_ready(
            &res(&["self/memory", "tcp/lo"]),
            None,
            "UCX 1.13.1 (libucp.so.0)",
            Some(false),
        )
        .unwrap_err();
        assert!(e.contains("UCX 1.13.1") && e.contains("tcp/lo"), "{e}");
        assert!(
            e.contains("built without CUDA support")
                && e.contains("libucx-cu13")
                && e.contains("RSHMEM_UCX_LIB"),
            "{e}"
        );
        // A CUDA-enabled UCX restricted by UCX_TLS: the fix is UCX_TLS.
        let e = ucx_gpu_ready(&res(&["tcp/lo"]), Some("tcp"), lib, Some(true)).unwrap_err();
        assert!(
            e.contains("UCX_TLS=tcp leaves out cuda_copy") && e.contains("UCX_TLS=tcp,cuda_copy"),
            "{e}"
        );
        // Unknown module, UCX_TLS restricting: UCX_TLS is named.
        let e = ucx_gpu_ready(&res(&["tcp/lo"]), Some("tcp,self"), lib, None).unwrap_err();
        assert!(e.contains("leaves out cuda_copy"), "{e}");
        // UCX_TLS that allows cuda_copy (or excludes others only) does not blame UCX_TLS.
        for tls in ["all", "^ib", "tcp,cuda", "cuda_copy,tcp"] {
            let e = ucx_gpu_ready(&res(&["tcp/lo"]), Some(tls), lib, Some(false)).unwrap_err();
            assert!(e.contains("built without CUDA support"), "{tls}: {e}");
        }
        let e = ucx_gpu_ready(&res(&["tcp/lo"]), None, lib, Some(true)).unwrap_err();
        assert!(e.contains("CUDA module is installed"), "{e}");
        assert!(!ucx_cuda_resource("cuda_ipc/cuda") && ucx_cuda_resource("cuda_copy/cuda"));
    }

    /// Hosts {0,1} and {2,3}; from PE 0's view.
    const LOCAL0: [bool; 4] = [true, true, false, false];

    #[test]
    fn auto_without_devices_is_tcp() {
        let r = plan(0, &LOCAL0, &ann(RemoteChoice::Auto, &[false; 4])).unwrap();
        assert_eq!(r, [Via::Local, Via::Local, Via::Tcp, Via::Tcp]);
        assert!(!verbs_in_job(&ann(RemoteChoice::Auto, &[false; 4])));
    }

    #[test]
    fn auto_uses_verbs_per_pair() {
        // PE 3 has no device: 0↔2 over verbs, 0↔3 over TCP; the same from 3's side.
        let a = ann(RemoteChoice::Auto, &[true, true, true, false]);
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Verbs, Via::Tcp]);
        let local3 = [false, false, true, true];
        assert_eq!(
            plan(3, &local3, &a).unwrap(),
            [Via::Tcp, Via::Tcp, Via::Local, Via::Local]
        );
        assert_eq!(
            plan(2, &local3, &a).unwrap(),
            [Via::Verbs, Via::Verbs, Via::Local, Via::Local]
        );
        assert!(verbs_in_job(&a));
    }

    #[test]
    fn tcp_forced_ignores_devices() {
        let a = ann(RemoteChoice::Tcp, &[true; 4]);
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Tcp, Via::Tcp]);
        assert!(!verbs_in_job(&a));
    }

    #[test]
    fn verbs_forced() {
        let a = ann(RemoteChoice::Verbs, &[true; 4]);
        assert_eq!(plan0(&a), [Via::Local, Via::Local, Via::Verbs, Via::Verbs]);
        // A PE without a device fails the plan on every PE that would need it, naming it.
        let a = ann(RemoteChoice::Verbs, &[true, true, true, false]);
        let e = plan(0, &LOCAL0, &a).unwrap_err();
        assert!(e.0.contains("PE(s) 3 could not open"), "{e}");
        let e = plan(3, &[false, false, true, true], &a).unwrap_err();
        assert!(e.0.contains("PE(s) 3 could not open"), "{e}");
        // Also on PE 2, which shares PE 3's host: every PE stops, none waits for the others.
        let e = plan(2, &[false, false, true, true], &a).unwrap_err();
        assert!(e.0.contains("PE(s) 3 could not open"), "{e}");
        // My own missing device is named too.
        let a = ann(RemoteChoice::Verbs, &[false, true, true, true]);
        assert!(plan(0, &LOCAL0, &a).unwrap_err().0.contains("PE(s) 0 "));
        // One host only: nothing remote, nothing needed.
        let a = ann(RemoteChoice::Verbs, &[false; 2]);
        assert_eq!(plan(1, &[true, true], &a).unwrap(), [Via::Local; 2]);
    }

    #[test]
    fn disagreement_is_an_error() {
        let mut a = ann(RemoteChoice::Auto, &[false; 4]);
        a[2].choice = RemoteChoice::Tcp;
        let e = plan(0, &LOCAL0, &a).unwrap_err();
        assert!(e.0.contains("PE 2 has tcp"), "{e}");
        assert!(plan(0, &LOCAL0, &a[..3]).is_err());
    }
}

//! `rshmem-testpe`: one PE of rshmem's multi-PE integration tests.
//!
//! ```text
//! rshmemrun -n N --timeout SECS rshmem-testpe SCENARIO [ARGS...]
//! ```
//!
//! Every PE runs the named scenario, checks what it sees, and either prints
//! `PE <me>: ok <scenario>` to stdout and exits 0, or prints
//! `PE <me>: FAIL <scenario>: <what, expected vs got>` to stderr at the first failed check and
//! exits 1. Scenarios (each works with 1 to 8 PEs unless noted):
//!
//! * `rma` — put/get/p/g for every RMA type, putmem/getmem, `_nbi` forms, iput/iget, fence.
//! * `amo` — every atomic on every AMO type.
//! * `amo-names` — the error of every atomic names that atomic.
//! * `signal` — put_signal(_nbi), signal_op, signal_fetch, signal_wait_until.
//! * `coll` — teams (predefined, strided and 2-D splits, translate, destroy) and every host
//!   collective on several teams, types and sizes, plus misuse errors.
//! * `region [remote]` — symmetric regions: this PE's own memory registered with
//!   `register_region`, used by RMA, atomics, signals, waits and team collectives; range, PE and
//!   unreachable-copy errors (`remote`, with `RSHMEM_DISABLE_P2P=1`: no peer's copy reachable).
//! * `active-set` — the collectives over an OpenSHMEM 1.4 active set (odd/even PEs and the whole
//!   job) with the caller's pSync restored, `reduce_with`, and bad sets.
//! * `gpucoll` — the GPU team collectives: every `*_on_stream` collective on several teams and
//!   sizes against host references, the device library's collectives from a user kernel, and
//!   argument errors (on the CPU backend: nothing to check, says so).
//! * `overlap` — every PE keeps a compute kernel that holds most of the GPU's SMs running on
//!   another stream while the stream collectives of every size run and are checked (they must
//!   make progress without all their blocks resident).
//! * `stream` — every `*_on_stream` call and a user kernel on the GPU backend (on the CPU backend:
//!   the Unsupported answers).
//! * `wait` — wait_until(_all/_any/_some)(_vector) and test*, with status exclusion.
//! * `heap` — malloc family semantics, heap growth, symmetric offsets, out of memory (run with
//!   `RSHMEM_HEAP_INITIAL=4M RSHMEM_HEAP_LIMIT=256M`).
//! * `heap-huge` — allocation requests near `usize::MAX` must fail cleanly.
//! * `transports [tcp|verbs|ucx]` — `World::transport` names the transport and capability bits of
//!   every PE (load/store on this host, the given remote transport for the others).
//! * `idle` — one-sided operations on a PE that sleeps outside rshmem complete, and the
//!   sleeping PE uses (almost) no CPU (2+ PEs).
//! * `sync-cost [remote]` — barriers, team syncs and splits in O(log n) rounds and messages,
//!   counted (`remote`: every other PE over TCP; see `scenarios/synccost.rs`).
//! * `errors` — bad arguments give the right error and write nothing.
//! * `fds` — every descriptor init opened is close-on-exec (none leaks into child processes).
//! * `timeout` — waits and a barrier run past `RSHMEM_TIMEOUT=1` (no finalize).
//! * `die [DIR]` — the last PE exits right after init; the others see `PeerLost` (2+ PEs),
//!   then meet through marker files in DIR before they exit.
//! * `symmetry` — mismatched allocations under `RSHMEM_DEBUG_SYMMETRY=1`.
//! * `finalize-mismatch` — PE 0 calls finalize while the others call barrier_all: every PE
//!   gets `AsymmetricCall` (2+ PEs).
//! * `heap-mismatch` — PE 0 calls malloc while the others call barrier_all: every PE gets
//!   `AsymmetricCall` naming both calls (3+ PEs on one host, with the host barrier).
//! * `crash` — PE 1 aborts while the others wait in a barrier (2+ PEs).
//! * `panic` — PE 1 panics (status 101) while the others wait in a barrier and exit 1 as soon
//!   as it is gone (2+ PEs): the launcher must blame PE 1 all the same.
//! * `kill-stream DELAY_MS` — the last PE streams puts to the others and kills itself; the
//!   survivors' barrier fails with `PeerLost` naming it (2+ PEs; no abort inside UCX).
//! * `hang [DELAY_MS]` — PE 1 blocks in `signal_wait_until` (after DELAY_MS), the others in a
//!   barrier; for the hang report (2+ PEs).
//! * `embed RANK SIZE UNIQUE_ID` — started without a launcher: joins through `Builder` with an
//!   explicit rank, size and unique id, and uses owned (`SharedSymBuf`) buffers.
//! * `scale [BARRIERS]` — one `SCALE ...` line per PE: init time, mean barrier time, resident
//!   memory and the sockets held after init (for `scripts/scale-test` and `tests/tests/scale.rs`).
//! * `tcp-stop`, `tcp-idle`, `tcp-lazy` — the TCP transport with a stopped peer, with idle and
//!   hostile connections at init and after it, and connections opened at first use by several
//!   threads at once (see `scenarios/tcpnet.rs`).

mod check;
mod scenarios;
mod vals;

use std::process::ExitCode;

use rshmem::World;

use check::{Ctx, Fail, R};

/// How a scenario ends when its checks pass.
enum End {
    /// Call finalize (collective) after the scenario.
    Finalize,
    /// The job cannot continue (a peer is gone or a barrier timed out): exit without finalize.
    NoFinalize,
}

/// The scenarios, and whether each needs at least 2 PEs.
const SCENARIOS: &[(&str, bool)] = &[
    ("rma", false),
    ("amo", false),
    ("amo-names", false),
    ("signal", false),
    ("coll", false),
    ("region", false),
    ("active-set", false),
    ("wait", false),
    ("heap", false),
    ("heap-huge", false),
    ("tcp-big", false),
    ("tcp-idle", false),
    ("tcp-lazy", false),
    ("tcp-stop", true),
    ("transports", false),
    ("errors", false),
    ("fds", false),
    ("symmetry", false),
    ("stream", false),
    ("gpucoll", false),
    ("overlap", false),
    ("timeout", false),
    ("die", true),
    ("die-finalize", true),
    ("finalize-mismatch", true),
    ("heap-mismatch", true),
    ("crash", true),
    ("panic", true),
    ("kill-stream", true),
    ("idle", true),
    ("sync-cost", false),
    ("hang", true),
    ("scale", false),
];

/// Runs scenario `name` (one of [`SCENARIOS`]).
fn dispatch(name: &str, c: &Ctx<'_>) -> R<End> {
    use scenarios::*;
    let regular = match name {
        "rma" => rma::run,
        "amo" => amo::run,
        "amo-names" => amo::names,
        "signal" => signal::run,
        "coll" => coll::run,
        "region" => region::run,
        "active-set" => active_set::run,
        "stream" => stream::run,
        "gpucoll" => gpucoll::run,
        "overlap" => overlap::run,
        "wait" => wait::run,
        "heap" => heap::run,
        "heap-huge" => heap::huge,
        "tcp-big" => rma::big,
        "tcp-idle" => tcpnet::idle,
        "tcp-lazy" => tcpnet::lazy,
        "transports" => transports::run,
        "idle" => idle::run,
        "sync-cost" => synccost::run,
        "errors" => errors::run,
        "fds" => fds::run,
        "scale" => scale::run,
        "symmetry" => symmetry::run,
        "timeout" => return timeout::run(c).map(|()| End::NoFinalize),
        "die" => return die::run(c).map(|()| End::NoFinalize),
        "heap-mismatch" => return symmetry::heap_mismatch(c).map(|()| End::NoFinalize),
        "crash" => return crash::run(c).map(|()| End::NoFinalize),
        "panic" => return crash::panic(c).map(|()| End::NoFinalize),
        "kill-stream" => return kill::stream(c).map(|()| End::NoFinalize),
        "hang" => return hang::run(c).map(|()| End::NoFinalize),
        "tcp-stop" => return tcpnet::stop(c).map(|()| End::NoFinalize),
        _ => return Err(Fail(format!("unknown scenario {name:?}"))),
    };
    regular(c).map(|()| End::Finalize)
}

fn fail(pe: &str, scenario: &str, msg: &str) -> ExitCode {
    check::say(true, &format!("PE {pe}: FAIL {scenario}: {msg}"));
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    if std::env::var_os("RSHMEM_LOG").is_some() {
        rshmem::init_logging();
    }
    let scenario = std::env::args().nth(1).unwrap_or_default();
    if scenario == "embed" {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return match scenarios::embed::run(&args) {
            Ok(me) => {
                check::say(false, &format!("PE {me}: ok embed"));
                ExitCode::SUCCESS
            }
            Err(Fail(msg)) => fail(args.first().map_or("?", |s| s.as_str()), "embed", &msg),
        };
    }
    // The launcher's rank, for messages before init knows it.
    let rank = rshmem::config::launcher_rank().map_or_else(|| "?".to_string(), |r| r.to_string());
    let Some(&(_, needs_two)) = SCENARIOS.iter().find(|(s, _)| *s == scenario) else {
        let names: Vec<&str> = SCENARIOS.iter().map(|(s, _)| *s).collect();
        return fail(
            &rank,
            &scenario,
            &format!("unknown scenario; expected one of {}", names.join(", ")),
        );
    };
    {
        let scenario = scenario.clone();
        let rank = rank.clone();
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            check::say(true, &format!("PE {rank}: FAIL {scenario}: panic: {info}"));
            default(info);
        }));
    }
    if scenario == "tcp-idle" {
        scenarios::tcpnet::crowd_listeners();
    }
    if scenario == "fds" {
        scenarios::fds::before_init();
    }
    let world = match rshmem::init() {
        Ok(w) => w,
        Err(e) => return fail(&rank, &scenario, &format!("rshmem::init failed: {e}")),
    };
    let me = world.my_pe().to_string();
    if needs_two && world.n_pes() < 2 {
        return fail(&me, &scenario, "this scenario needs at least 2 PEs");
    }
    match run(world, &scenario) {
        Ok(()) => {
            check::say(false, &format!("PE {me}: ok {scenario}"));
            ExitCode::SUCCESS
        }
        Err(Fail(msg)) => fail(&me, &scenario, &msg),
    }
}

fn run(world: World, scenario: &str) -> R {
    if scenario == "die-finalize" {
        return scenarios::die::finalize(world);
    }
    if scenario == "finalize-mismatch" {
        return scenarios::symmetry::finalize_mismatch(world);
    }
    let args = std::env::args().skip(2).collect();
    let end = dispatch(scenario, &Ctx::new(&world, args))?;
    match end {
        End::Finalize => world.finalize().map_err(|e| Fail(format!("finalize: {e}"))),
        End::NoFinalize => Ok(()),
    }
}

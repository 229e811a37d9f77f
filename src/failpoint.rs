//! Failpoints at the durability boundaries, for the failpoint sweep
//! (`tests/it/failpoints.rs`). They exist only in a build with `--features failpoints`;
//! in every other build [`error`] is a constant `false` and the compiler removes the call.
//!
//! A build with the feature reads `FAILPOINTS` at start-up (tikv's `fail` crate), e.g.
//! `FAILPOINTS='writer.before_commit=3*off->1*return(error)'`: the fourth commit of a
//! batch holding events fails.
//! The actions hookinbox understands at every point:
//!
//! - `return(error)`: the operation fails as a real fault would there (the caller's error
//!   path runs);
//! - `return(crash)`: the process kills itself with SIGKILL at exactly that point;
//! - `panic`: a panic there (which, like any panic in `hookinbox serve`, ends the process).
//!
//! The points, in the order an event passes them:
//!
//! | point | where |
//! |---|---|
//! | `writer.before_commit` | a batch holding events ran, its `COMMIT` has not |
//! | `writer.after_commit` | that `COMMIT` returned, no sender has been answered |
//! | `deliver.after_claim` | deliveries are claimed (leased), no attempt started |
//! | `deliver.after_send` | the target answered, the result is not recorded |

/// Every failpoint, for the sweep.
pub const POINTS: [&str; 4] = [
    "writer.before_commit",
    "writer.after_commit",
    "deliver.after_claim",
    "deliver.after_send",
];

/// True when the point is configured to inject an error now. Crashes and panics happen
/// inside.
#[cfg(feature = "failpoints")]
pub fn error(point: &'static str) -> bool {
    fail::eval(point, |arg| match arg.as_deref() {
        Some("crash") => {
            tracing::warn!(point, "failpoint: crash (SIGKILL)");
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            unreachable!("SIGKILL cannot be caught");
        }
        _ => tracing::warn!(point, "failpoint: injected error"),
    })
    .is_some()
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn error(_point: &'static str) -> bool {
    false
}

/// Reads `FAILPOINTS` (a failpoints build only, which then says so in the log: such a
/// build must never be deployed). The scenario lives as long as the process.
pub fn setup() {
    #[cfg(feature = "failpoints")]
    if std::env::var_os("FAILPOINTS").is_some() {
        tracing::warn!("built with failpoints, for tests only: FAILPOINTS injects faults");
        std::mem::forget(fail::FailScenario::setup());
    }
}

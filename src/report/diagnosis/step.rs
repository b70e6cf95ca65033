//! The last step of resident memory the publisher's watch explained, kept for the findings of the
//! reports that follow it for [`STEP_FINDING_FOR`].

use core::time::Duration;
use std::time::Instant;

use super::kinds::Finding;
use crate::fork::Lock;

/// How long after a step its finding is in the reports.
pub const STEP_FINDING_FOR: Duration = Duration::from_secs(3600);

/// The last step's finding and when it was explained. Held across a `fork` (`fork::Lock`).
static LAST: Lock<Option<(Instant, Finding)>> = Lock::new(None);

/// Records `finding` (kind `step`) as the last step, explained now.
pub(crate) fn set_last(finding: Finding) {
    *LAST.lock() = Some((Instant::now(), finding));
}

/// The last step's finding if it was explained within [`STEP_FINDING_FOR`] of `now`.
pub(crate) fn recent(now: Instant) -> Option<Finding> {
    let last = LAST.lock();
    let (at, finding) = last.as_ref()?;
    fresh(*at, now).then(|| finding.clone())
}

/// Whether a step explained at `at` is still recent at `now`.
fn fresh(at: Instant, now: Instant) -> bool {
    now.saturating_duration_since(at) < STEP_FINDING_FOR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_stays_an_hour() {
        let at = Instant::now();
        assert!(fresh(at, at));
        assert!(fresh(at, at + STEP_FINDING_FOR - Duration::from_millis(1)));
        assert!(!fresh(at, at + STEP_FINDING_FOR));
    }
}

//! The reclaimer's settings, as its builder methods set them (`Reclaimer`), and the one check of
//! their ranges (`Reclaimer::check`, and the first round).

use std::time::Duration;

use super::error::ReclaimError;

/// The settings, checked by [`check`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settings {
    pub(crate) poll: Duration,
    pub(crate) quiet: Duration,
    pub(crate) quiet_share: f64,
    pub(crate) min_bytes: u64,
    pub(crate) min_share: f64,
    pub(crate) keep: u64,
    pub(crate) min_interval: Duration,
    pub(crate) cpu_share: f64,
    pub(crate) refault_window: Duration,
    /// The share of the limit over which the controller acts.
    pub(crate) target_share: f64,
    /// The most CPU share the controller spends, at the limit.
    pub(crate) max_cpu_share: f64,
    /// Warns when RSS will reach the limit within this long.
    pub(crate) eta_horizon: Duration,
}

/// Checks every setting's range.
pub(super) fn check(s: &Settings) -> Result<(), ReclaimError> {
    let invalid = |setting: &'static str, value: String, expected: &'static str| {
        Err(ReclaimError::InvalidSetting { setting, value, expected })
    };
    let share = |v: f64| v > 0.0 && v <= 1.0;
    if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&s.poll) {
        return invalid("poll", format!("{:?}", s.poll), "10 ms to 1 min");
    }
    if s.quiet > Duration::from_secs(600) {
        return invalid("quiet", format!("{:?}", s.quiet), "at most 10 min");
    }
    if !share(s.quiet_share) {
        return invalid("quiet_share", s.quiet_share.to_string(), "above 0, at most 1");
    }
    if !(0.0..=1.0).contains(&s.min_share) {
        return invalid("threshold share", s.min_share.to_string(), "0 to 1");
    }
    if s.min_interval > Duration::from_secs(3600) {
        return invalid("min_interval", format!("{:?}", s.min_interval), "at most 1 h");
    }
    if !share(s.cpu_share) {
        return invalid("cpu_share", s.cpu_share.to_string(), "above 0, at most 1");
    }
    if s.refault_window > Duration::from_secs(600) {
        return invalid("refault_window", format!("{:?}", s.refault_window), "at most 10 min");
    }
    if !(0.5..=1.0).contains(&s.target_share) {
        return invalid("limit_target", s.target_share.to_string(), "0.5 to 1");
    }
    if !share(s.max_cpu_share) {
        return invalid("max_cpu_share", s.max_cpu_share.to_string(), "above 0, at most 1");
    }
    if s.eta_horizon > Duration::from_secs(86_400) {
        return invalid("limit_horizon", format!("{:?}", s.eta_horizon), "at most 1 day");
    }
    Ok(())
}

//! Conditions an operator should hear about without looking: a source gone silent, a
//! target failing, signature rejections rising, new conflicts, new dead deliveries.
//!
//! This module holds the [`Board`] of conditions active now, which the web inbox shows as
//! banners and `/metrics` as gauges.

use std::sync::RwLock;

/// What kind of trouble a condition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// No verified event from a source for longer than its `expect_every`.
    Silent,
    /// A target's failure share or oldest pending delivery over its threshold.
    Failing,
    /// Signature rejections on a source well above its usual.
    Rejections,
    /// Conflicts (same id, different bytes) arrived recently.
    Conflicts,
    /// Deliveries died recently.
    Dead,
}

impl Kind {
    /// The word in logs, metrics and notifications.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Silent => "source_silent",
            Kind::Failing => "target_failing",
            Kind::Rejections => "rejections_rising",
            Kind::Conflicts => "new_conflicts",
            Kind::Dead => "new_dead_deliveries",
        }
    }
}

/// One active condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub kind: Kind,
    /// The source, or `source/target`.
    pub subject: String,
    /// When it began (inbox time text).
    pub since: String,
    /// What is wrong, in words, with what to do.
    pub detail: String,
}

/// The conditions active now.
#[derive(Debug, Default)]
pub struct Board {
    active: RwLock<Vec<Condition>>,
}

impl Board {
    pub fn active(&self) -> Vec<Condition> {
        self.active
            .read()
            .expect("no panics while holding the lock")
            .clone()
    }
}

//! The flaky fake provider (to be written).

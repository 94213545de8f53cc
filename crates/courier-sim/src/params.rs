//! Parameter specifications: one constant per parameter holds its name,
//! range and default, so the defaults, the validation and the page's controls
//! all come from the same place.
//!
//! # Invariants
//! - A scene's `Params::default()` is built from these constants and passes
//!   its own validation (tested for every scene).
//! - Every count has an upper bound, so no request can ask for unbounded work.

use serde::Serialize;

use crate::SimError;

/// A whole-number parameter.
#[derive(Debug, Clone, Copy)]
pub struct Count {
    pub name: &'static str,
    pub label: &'static str,
    pub min: u64,
    pub max: u64,
    pub default: u64,
    /// Whether a control should move on a logarithmic scale.
    pub log: bool,
    pub help: &'static str,
}

impl Count {
    pub fn check(&self, value: u64) -> Result<(), SimError> {
        if value < self.min || value > self.max {
            return Err(SimError::OutOfRange {
                name: self.name,
                min: self.min as f64,
                max: self.max as f64,
                got: value as f64,
            });
        }
        Ok(())
    }

    pub fn spec(&self) -> ParamSpec {
        ParamSpec {
            name: self.name,
            label: self.label,
            help: self.help,
            kind: ParamKind::Count {
                min: self.min,
                max: self.max,
                default: self.default,
                log: self.log,
            },
        }
    }
}

/// A real-valued parameter (a rate, a share, a duration).
#[derive(Debug, Clone, Copy)]
pub struct Real {
    pub name: &'static str,
    pub label: &'static str,
    pub min: f64,
    pub max: f64,
    pub default: f64,
    pub log: bool,
    /// Whether the page shows the value as a percentage.
    pub percent: bool,
    pub help: &'static str,
}

impl Real {
    pub fn check(&self, value: f64) -> Result<(), SimError> {
        // NaN fails both comparisons' complements, so test for it explicitly.
        if !value.is_finite() || value < self.min || value > self.max {
            return Err(SimError::OutOfRange {
                name: self.name,
                min: self.min,
                max: self.max,
                got: value,
            });
        }
        Ok(())
    }

    pub fn spec(&self) -> ParamSpec {
        ParamSpec {
            name: self.name,
            label: self.label,
            help: self.help,
            kind: ParamKind::Real {
                min: self.min,
                max: self.max,
                default: self.default,
                log: self.log,
                percent: self.percent,
            },
        }
    }
}

/// A choice among named values (an enum in the scene's `Params`).
#[derive(Debug, Clone, Copy)]
pub struct Choice {
    pub name: &'static str,
    pub label: &'static str,
    pub choices: &'static [&'static str],
    pub default: &'static str,
    pub help: &'static str,
}

impl Choice {
    pub fn spec(&self) -> ParamSpec {
        ParamSpec {
            name: self.name,
            label: self.label,
            help: self.help,
            kind: ParamKind::Choice {
                choices: self.choices,
                default: self.default,
            },
        }
    }
}

/// A yes/no parameter.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub name: &'static str,
    pub label: &'static str,
    pub default: bool,
    pub help: &'static str,
}

impl Flag {
    pub fn spec(&self) -> ParamSpec {
        ParamSpec {
            name: self.name,
            label: self.label,
            help: self.help,
            kind: ParamKind::Flag {
                default: self.default,
            },
        }
    }
}

/// One parameter as the page and `courier sim list` see it.
#[derive(Debug, Clone, Serialize)]
pub struct ParamSpec {
    pub name: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    #[serde(flatten)]
    pub kind: ParamKind,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ParamKind {
    Count {
        min: u64,
        max: u64,
        default: u64,
        log: bool,
    },
    Real {
        min: f64,
        max: f64,
        default: f64,
        log: bool,
        percent: bool,
    },
    Choice {
        choices: &'static [&'static str],
        default: &'static str,
    },
    Flag {
        default: bool,
    },
}

impl ParamSpec {
    /// The default as text, for `courier sim list`.
    pub fn default_text(&self) -> String {
        match &self.kind {
            ParamKind::Count { default, .. } => default.to_string(),
            ParamKind::Real { default, .. } => default.to_string(),
            ParamKind::Choice { default, .. } => default.to_string(),
            ParamKind::Flag { default } => default.to_string(),
        }
    }

    /// The allowed values as text, for `courier sim list`.
    pub fn range_text(&self) -> String {
        match &self.kind {
            ParamKind::Count { min, max, .. } => format!("{min}..={max}"),
            ParamKind::Real { min, max, .. } => format!("{min}..={max}"),
            ParamKind::Choice { choices, .. } => choices.join(" | "),
            ParamKind::Flag { .. } => "true | false".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: Count = Count {
        name: "n",
        label: "N",
        min: 1,
        max: 10,
        default: 5,
        log: false,
        help: "",
    };
    const R: Real = Real {
        name: "r",
        label: "R",
        min: 0.0,
        max: 1.0,
        default: 0.5,
        log: false,
        percent: true,
        help: "",
    };

    #[test]
    fn ranges_are_inclusive_and_nan_is_refused() {
        assert!(N.check(1).is_ok() && N.check(10).is_ok());
        assert!(N.check(0).is_err() && N.check(11).is_err());
        assert!(R.check(0.0).is_ok() && R.check(1.0).is_ok());
        assert!(R.check(f64::NAN).is_err());
        assert!(R.check(f64::INFINITY).is_err());
        assert!(R.check(-0.1).is_err());
        let e = N.check(11).unwrap_err().to_string();
        assert_eq!(e, "n must be within 1..=10, got 11");
    }
}

//! courier-sim: seeded, I/O-free simulations of delivery guarantees.
//!
//! Each scene of the lesson is one module with a pure function
//! `run(&Params, seed) -> Result<Outcome, SimError>`. The module's doc comment
//! states the model precisely enough to compute the expected value by hand;
//! every outcome carries counts, rates, the series a chart needs, the model's
//! expected value (computed, never typed in) and a one-sentence reading.
//!
//! | scene          | module           | question                                                 |
//! |----------------|------------------|----------------------------------------------------------|
//! | `ack`          | [`ack`]          | acknowledge before the work, after it, or with a dedup table? |
//! | `key-lifetime` | [`key_lifetime`] | how many retries arrive after their idempotency key expired? |
//! | `repeats`      | [`repeats`]      | which operations do not mind being applied twice?        |
//! | `crash-points` | [`crash_points`] | what does a crash at each point of a read-process-write loop do? |
//! | `ordering`     | [`ordering`]     | how often do retries reorder a stream?                   |
//! | `write-order`  | [`write_order`]  | key first, effect first, or one transaction?             |
//!
//! [`run`] dispatches by scene name with JSON parameters, which is what the
//! `courier sim` command and the lesson page's API use.
//!
//! # Invariants
//! - Same scene, same parameters, same seed: the same outcome, bit for bit.
//!   Randomness comes only from a `StdRng` seeded with the given seed.
//! - Every parameter has a documented range (see [`params`]); anything outside
//!   it is a [`SimError`], never a panic, and the ranges bound the work a single
//!   run can do.
//! - No I/O, no clock, no global state: this crate can run anywhere, including
//!   inside a request handler.

pub mod ack;
pub mod crash_points;
pub mod key_lifetime;
pub mod normal;
pub mod ordering;
pub mod params;
pub mod repeats;
pub mod text;
pub mod write_order;

use serde::{Deserialize, Serialize};

pub use params::{ParamKind, ParamSpec};

/// Why a simulation could not run. Every variant means "fix the input and
/// ask again" (an HTTP 400), so there is one error type.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("unknown scene `{0}`; the scenes are: ack, key-lifetime, repeats, crash-points, ordering, write-order")]
    UnknownScene(String),
    #[error("invalid parameters: {0}")]
    BadParams(String),
    #[error("{name} must be within {min}..={max}, got {got}")]
    OutOfRange {
        name: &'static str,
        min: f64,
        max: f64,
        got: f64,
    },
}

/// The six scenes, in the lesson's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scene {
    Ack,
    KeyLifetime,
    Repeats,
    CrashPoints,
    Ordering,
    WriteOrder,
}

impl Scene {
    pub const ALL: [Scene; 6] = [
        Scene::Ack,
        Scene::KeyLifetime,
        Scene::Repeats,
        Scene::CrashPoints,
        Scene::Ordering,
        Scene::WriteOrder,
    ];

    /// The scene's name on the command line and in the API path.
    pub fn name(self) -> &'static str {
        match self {
            Scene::Ack => "ack",
            Scene::KeyLifetime => "key-lifetime",
            Scene::Repeats => "repeats",
            Scene::CrashPoints => "crash-points",
            Scene::Ordering => "ordering",
            Scene::WriteOrder => "write-order",
        }
    }

    pub fn from_name(name: &str) -> Result<Scene, SimError> {
        Scene::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| SimError::UnknownScene(truncate(name, 40)))
    }

    /// A short title for tables and the page.
    pub fn title(self) -> &'static str {
        match self {
            Scene::Ack => "When to acknowledge",
            Scene::KeyLifetime => "How long to keep idempotency keys",
            Scene::Repeats => "Operations that do not mind repeats",
            Scene::CrashPoints => "Every crash point of a read-process-write loop",
            Scene::Ordering => "Retries that reorder",
            Scene::WriteOrder => "Writing the key and the effect",
        }
    }

    /// The parameters the scene takes, with ranges and defaults.
    pub fn params(self) -> Vec<ParamSpec> {
        match self {
            Scene::Ack => ack::Params::specs(),
            Scene::KeyLifetime => key_lifetime::Params::specs(),
            Scene::Repeats => repeats::Params::specs(),
            Scene::CrashPoints => crash_points::Params::specs(),
            Scene::Ordering => ordering::Params::specs(),
            Scene::WriteOrder => write_order::Params::specs(),
        }
    }

    /// The model in one paragraph (the module docs say it in full).
    pub fn model(self) -> &'static str {
        match self {
            Scene::Ack => ack::MODEL,
            Scene::KeyLifetime => key_lifetime::MODEL,
            Scene::Repeats => repeats::MODEL,
            Scene::CrashPoints => crash_points::MODEL,
            Scene::Ordering => ordering::MODEL,
            Scene::WriteOrder => write_order::MODEL,
        }
    }
}

/// What the page needs to build a scene's controls.
#[derive(Debug, Clone, Serialize)]
pub struct SceneInfo {
    pub scene: Scene,
    pub title: &'static str,
    pub model: &'static str,
    pub params: Vec<ParamSpec>,
}

/// Every scene with its parameters.
pub fn catalog() -> Vec<SceneInfo> {
    Scene::ALL
        .into_iter()
        .map(|scene| SceneInfo {
            scene,
            title: scene.title(),
            model: scene.model(),
            params: scene.params(),
        })
        .collect()
}

/// One run of a scene, with its parameters as used (defaults filled in).
#[derive(Debug, Clone, Serialize)]
pub struct SceneRun {
    pub scene: Scene,
    pub seed: u64,
    pub params: serde_json::Value,
    pub reading: String,
    pub outcome: serde_json::Value,
    /// The outcome as a plain-text table (for the terminal).
    #[serde(skip)]
    pub table: String,
}

/// Runs a scene with JSON parameters (an object; missing fields take their
/// defaults, unknown fields are refused; `null` means all defaults).
pub fn run(scene: Scene, params: &serde_json::Value, seed: u64) -> Result<SceneRun, SimError> {
    match scene {
        Scene::Ack => finish::<ack::Params, _>(scene, params, seed, ack::run, ack::Outcome::table),
        Scene::KeyLifetime => finish::<key_lifetime::Params, _>(
            scene,
            params,
            seed,
            key_lifetime::run,
            key_lifetime::Outcome::table,
        ),
        Scene::Repeats => {
            finish::<repeats::Params, _>(scene, params, seed, repeats::run, repeats::Outcome::table)
        }
        Scene::CrashPoints => finish::<crash_points::Params, _>(
            scene,
            params,
            seed,
            crash_points::run,
            crash_points::Outcome::table,
        ),
        Scene::Ordering => finish::<ordering::Params, _>(
            scene,
            params,
            seed,
            ordering::run,
            ordering::Outcome::table,
        ),
        Scene::WriteOrder => finish::<write_order::Params, _>(
            scene,
            params,
            seed,
            write_order::run,
            write_order::Outcome::table,
        ),
    }
}

/// Every outcome has a reading.
trait Reading {
    fn reading(&self) -> &str;
}

macro_rules! impl_reading {
    ($($m:ident),*) => {
        $(impl Reading for $m::Outcome {
            fn reading(&self) -> &str {
                &self.reading
            }
        })*
    };
}
impl_reading!(
    ack,
    key_lifetime,
    repeats,
    crash_points,
    ordering,
    write_order
);

fn finish<P, O>(
    scene: Scene,
    raw: &serde_json::Value,
    seed: u64,
    run: fn(&P, u64) -> Result<O, SimError>,
    table: fn(&O) -> String,
) -> Result<SceneRun, SimError>
where
    P: serde::de::DeserializeOwned + Serialize + Default,
    O: Serialize + Reading,
{
    let params: P = parse_params(raw)?;
    let outcome = run(&params, seed)?;
    Ok(SceneRun {
        scene,
        seed,
        params: to_value(&params)?,
        reading: outcome.reading().to_string(),
        table: table(&outcome),
        outcome: to_value(&outcome)?,
    })
}

fn parse_params<P: serde::de::DeserializeOwned + Default>(
    raw: &serde_json::Value,
) -> Result<P, SimError> {
    match raw {
        serde_json::Value::Null => Ok(P::default()),
        serde_json::Value::Object(_) => serde_json::from_value(raw.clone())
            .map_err(|e| SimError::BadParams(truncate(&e.to_string(), 300))),
        _ => Err(SimError::BadParams(
            "parameters must be a JSON object".to_string(),
        )),
    }
}

fn to_value<T: Serialize>(v: &T) -> Result<serde_json::Value, SimError> {
    // Serializing our own plain structs cannot fail (no maps with non-string
    // keys, no non-finite floats reach here: rates are finite by validation).
    serde_json::to_value(v).map_err(|e| SimError::BadParams(format!("cannot encode outcome: {e}")))
}

/// Cuts echoed input so an error message stays short.
fn truncate(s: &str, chars_max: usize) -> String {
    if s.chars().count() <= chars_max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(chars_max).collect();
        out.push('…');
        out
    }
}

/// Test helpers: sampled counts against expected values, with tolerances
/// derived from the sample size.
#[cfg(test)]
pub(crate) mod check {
    /// Asserts that `got` successes out of `n` trials is within four binomial
    /// standard deviations (plus one, for tiny expectations) of `n × p`.
    pub fn assert_binomial(what: &str, got: u64, n: u64, p: f64) {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        let tol = 4.0 * sd + 1.0;
        assert!(
            (got as f64 - mean).abs() <= tol,
            "{what}: got {got}, expected {mean:.1} ± {tol:.1} (n = {n}, p = {p})"
        );
    }

    /// Asserts that a sampled share of `n` trials is within four binomial
    /// standard deviations (plus `slack`) of the expected share `p`.
    pub fn assert_share(what: &str, got: f64, n: u64, p: f64, slack: f64) {
        let tol = 4.0 * (p * (1.0 - p) / n as f64).sqrt() + slack + 1.0 / n as f64;
        assert!(
            (got - p).abs() <= tol,
            "{what}: got {got:.5}, expected {p:.5} ± {tol:.5} (n = {n})"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_scene_runs_with_defaults_and_names_round_trip() {
        for scene in Scene::ALL {
            assert_eq!(Scene::from_name(scene.name()), Ok(scene));
            let name = serde_json::to_value(scene).unwrap();
            assert_eq!(name, json!(scene.name()));
            assert!(!scene.params().is_empty());
        }
        // Cheap settings so the test stays quick in a debug build.
        let small = [
            (Scene::Ack, json!({"messages": 2000})),
            (Scene::KeyLifetime, json!({"retries": 2000})),
            (Scene::Repeats, json!({"messages": 2000})),
            (Scene::CrashPoints, json!(null)),
            (Scene::Ordering, json!({"messages": 500})),
            (Scene::WriteOrder, json!({"requests": 20000})),
        ];
        for (scene, p) in small {
            let r = run(scene, &p, 3).unwrap();
            assert_eq!(r.scene, scene);
            assert!(r.reading.ends_with('.'), "{}: {}", scene.name(), r.reading);
            assert!(r.table.lines().count() > 2);
            assert!(r.params.is_object());
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(
            Scene::from_name("nope"),
            Err(SimError::UnknownScene(_))
        ));
        assert!(matches!(
            run(Scene::Ack, &json!({"bogus": 1}), 1),
            Err(SimError::BadParams(_))
        ));
        assert!(matches!(
            run(Scene::Ack, &json!([1, 2]), 1),
            Err(SimError::BadParams(_))
        ));
        assert!(matches!(
            run(Scene::Ack, &json!({"messages": -5}), 1),
            Err(SimError::BadParams(_))
        ));
        assert!(matches!(
            run(Scene::Ack, &json!({"messages": 1_000_000_000u64}), 1),
            Err(SimError::OutOfRange { .. })
        ));
        assert!(matches!(
            run(Scene::Repeats, &json!({"operation": "multiply"}), 1),
            Err(SimError::BadParams(_))
        ));
        let long = "x".repeat(10_000);
        let e = Scene::from_name(&long).unwrap_err().to_string();
        assert!(e.len() < 300, "error echoes too much: {}", e.len());
    }

    #[test]
    fn catalog_lists_every_scene_with_a_model() {
        let c = catalog();
        assert_eq!(c.len(), 6);
        for info in &c {
            assert!(info.model.len() > 80, "{:?}", info.scene);
        }
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.contains("\"crash_rate\""));
    }
}

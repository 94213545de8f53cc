//! The planner settings of the store's hot statements: the claims
//! (`lease`) and the settles (`settle`), each in a transaction of its own.

/// The planner settings a claim or a settle runs with, in its own
/// transaction (`SET LOCAL`).
///
/// - **Its generic plan**, made once per connection for each statement (the
///   four claim statements: fair and FIFO, with and without the look for
///   expired leases; the settle's lock and write), and again after an
///   ANALYZE of a table it reads. The server judged the fair claim's
///   generic plan costlier than its custom ones and planned it afresh on
///   every call, 1.3-1.4 ms of planning against 1.4 ms executing (`courier
///   bench fairness`'s statements, in the git history of docs/benchmarks.md;
///   FIFO's claim 27 us).
///   The settle's two statements, planned per call, cost 0.19 and 0.23 ms of
///   planning for a batch of one, against 0.05 and 0.6 ms executing.
/// - **Read by key**: no sequential scan, hash join or merge join. A
///   generic plan is made from the statistics and table sizes of its
///   moment and kept until the next `ANALYZE`: made while `actions` held a
///   few dozen rows, it scanned `actions` sequentially in every claim (up to
///   693 scans per second as the table grew in a fairness run), and joined
///   a settle's batch to `actions` by a sequential scan; over `stores`
///   never analysed, it joined the served stores by a full index scan. A
///   claim or a settle touches about as many rows as it takes, which nested
///   loops over its indexes reach at any size.
///
/// `tests/plans.rs` checks the plans these settings give with statistics
/// missing, taken while the tables were tiny (and the plan kept as they
/// grew) and fresh; a generic plan with the planner's other settings at
/// their defaults, the control, fails the same check. The trigger
/// functions these statements fire pin settings of their own (migration
/// 18).
#[doc(hidden)]
pub const PLAN_BY_KEY: &str = sql!("plan/by_key");

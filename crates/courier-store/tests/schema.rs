//! The schema's copies of courier-core's lists agree with core: the states
//! in the CHECK on `actions.state` are `ActionState::ALL`, and
//! `courier_status_is_final` (migration 4) is `Status::is_final`.

use courier_core::{ActionState, Status};
use courier_testkit::fresh_db;
use std::collections::BTreeSet;

/// The string literals of a CHECK constraint's definition, in order.
fn literals(def: &str) -> Vec<String> {
    def.split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_action_state_check_lists_exactly_the_core_states() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    let defs: Vec<String> = c
        .query(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint
             WHERE conrelid = 'actions'::regclass AND contype = 'c'
               AND pg_get_constraintdef(oid) LIKE '%state = ANY%'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(defs.len(), 1, "one CHECK lists the states: {defs:?}");
    let in_check: BTreeSet<String> = literals(&defs[0]).into_iter().collect();
    let in_core: BTreeSet<String> = ActionState::ALL
        .iter()
        .map(|s| s.as_str().to_string())
        .collect();
    assert_eq!(in_check, in_core, "{}", defs[0]);
    // The check does refuse a state core does not know.
    enqueue_one(&c).await;
    let refused = c
        .execute("UPDATE actions SET state = 'queued'", &[])
        .await
        .unwrap_err();
    assert_eq!(refused.code().unwrap().code(), "23514", "{refused}");
}

async fn enqueue_one(c: &tokio_postgres::Client) {
    courier_store::action_enqueue(c, &courier_testkit::fixtures::new_action("s1", 0))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_sql_final_status_list_is_the_core_one() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    for s in Status::ALL {
        let is_final: bool = c
            .query_one("SELECT courier_status_is_final($1)", &[&s.as_str()])
            .await
            .unwrap()
            .get(0);
        assert_eq!(is_final, s.is_final(), "{s}");
    }
}

/// The planner inlines the function: a query that asks it filters on the
/// list of statuses itself (no call per row), as the index `outbox_open`
/// that spelled the list matched it until migration 16 dropped it.
#[tokio::test]
async fn the_final_status_function_is_inlined() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    let plan: Vec<String> = c
        .query(
            "EXPLAIN SELECT count(*) FROM outbox WHERE NOT courier_status_is_final(status)",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("delivered"), "{plan}");
    assert!(!plan.contains("courier_status_is_final"), "{plan}");
}

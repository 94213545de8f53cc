//! Notable moments (fenced writes refused, backward reports, duplicate
//! webhooks, conflicts, rejections), for status, metrics and the chaos
//! report. Every insert into `events` is the fragment `sql/event/record.part.sql`.

use crate::error::StoreError;
use crate::pool::PgStore;

impl PgStore {
    pub async fn event_record(
        &self,
        kind: &str,
        action_id: Option<i64>,
        detail: &str,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                sql!("event/record", "event/record.part"),
                &[&kind, &action_id, &detail],
            )
            .await?;
        Ok(())
    }
}

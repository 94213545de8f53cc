//! Infobip's delivery reports, authenticated by courier's token in the
//! delivery URL (Infobip signs none: module docs of [`super`]).

use super::wire::{DeliveryReport, DeliveryResult, StatusObject};
use super::{token_verifies, NAME, WEBHOOK_SECRET};
use crate::inbound::{Inbound, Parsed, Refusal, Report, Webhooks};
use crate::settings::{Secret, Settings, SettingsError};

/// Checks and reads the delivery reports posted to courier's delivery URLs.
#[derive(Debug, Clone)]
pub struct Hooks {
    secret: Secret,
}

/// What one result of a report says about our message.
enum Reading {
    Status(courier_core::Status),
    /// The duplicate check's rejection of a repeat: not the message's own.
    RejectedRepeat,
    Unmapped(String),
}

impl Hooks {
    /// Needs `INFOBIP_WEBHOOK_SECRET`.
    pub fn new(settings: &Settings) -> Result<Hooks, SettingsError> {
        Ok(Hooks {
            secret: settings.required(NAME, WEBHOOK_SECRET)?.clone(),
        })
    }
}

impl Webhooks for Hooks {
    /// The token first (missing: `Unsigned`; not the key's: `Forged`), then
    /// the report. A report posted to one message's URL names that message;
    /// results for other `messageId`s are not covered by the token and are
    /// never merged: a report with none for the URL's key is `Malformed`,
    /// and of several results for it the first with a known status counts, one
    /// not rejected before a rejected one.
    fn receive(&self, inbound: &Inbound<'_>) -> Result<Parsed, Refusal> {
        let token = inbound.query("token").ok_or(Refusal::Unsigned)?;
        // A token without a key authenticates nothing.
        let key = inbound.query("key").ok_or(Refusal::Forged)?;
        if !token_verifies(self.secret.expose().as_bytes(), &key, &token) {
            return Err(Refusal::Forged);
        }
        let report: DeliveryReport = serde_json::from_slice(inbound.body)
            .map_err(|e| Refusal::Malformed(format!("not an Infobip delivery report: {e}")))?;
        let ours: Vec<&DeliveryResult> = report
            .results
            .iter()
            .filter(|r| r.message_id.as_deref() == Some(key.as_str()))
            .collect();
        if ours.is_empty() {
            return Err(Refusal::Malformed(format!(
                "{} results, none for the key the delivery URL names",
                report.results.len()
            )));
        }
        let readings: Vec<(&StatusObject, Reading)> = ours
            .iter()
            .filter_map(|r| r.status.as_ref())
            .map(|st| (st, read(st)))
            .collect();
        // As in the logs: a submission not rejected speaks for the message
        // before a rejected one (which may be a repeat's).
        let mapped = |rejected: bool| {
            readings
                .iter()
                .find(|(st, r)| matches!(r, Reading::Status(_)) && st.is_rejected() == rejected)
        };
        if let Some((st, Reading::Status(status))) = mapped(false).or_else(|| mapped(true)) {
            return Ok(Parsed::Report(Report {
                key: key.clone(),
                status: *status,
                event_id: format!("{key}:{}", st.name),
                message_id: key,
            }));
        }
        if readings
            .iter()
            .any(|(_, r)| matches!(r, Reading::RejectedRepeat))
        {
            return Ok(Parsed::Ignored(
                "a repeat rejected by Infobip's duplicate check: not the message's status".into(),
            ));
        }
        let unmapped: Vec<&str> = readings
            .iter()
            .filter_map(|(_, r)| match r {
                Reading::Unmapped(name) => Some(name.as_str()),
                _ => None,
            })
            .collect();
        if !unmapped.is_empty() {
            return Ok(Parsed::Ignored(format!(
                "status {} maps onto no courier status",
                unmapped.join(", ")
            )));
        }
        Err(Refusal::Malformed("the report carries no status".into()))
    }
}

fn read(st: &StatusObject) -> Reading {
    if st.is_duplicate() {
        return Reading::RejectedRepeat;
    }
    match st.courier_status() {
        Some(s) => Reading::Status(s),
        None => Reading::Unmapped(format!("{}/{}", st.group_name, st.name)),
    }
}

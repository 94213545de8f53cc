//! Who may send: the API's tokens, checked on every request.
//!
//! A token is an admin's (every store, the dashboard's data, `/metrics`) or
//! names stores (it enqueues, reads and, later, cancels only their
//! actions). The admin token given on the command line (`--api-token`) is
//! compared in constant time with what a request sends; the tokens created
//! with `courier token create` (`courier_<id>_<secret>`, migration 22) are
//! found by id in a copy held in memory, and the SHA-256 of the sent secret
//! is compared in constant time with the stored one.
//!
//! # Invariants
//! - A revoked token is refused by every server process within a second:
//!   each polls the one-row version of the token table every
//!   [`REFRESH_MS`] and reloads the active tokens when it moved. A failed
//!   authentication never reaches the database, so a flood of them costs a
//!   hash each and nothing else.
//! - Tokens never reach a log: neither the header nor the token is logged,
//!   and a token sent in the query string (where proxies and access logs
//!   keep it) is refused. Every failure is counted in
//!   `courier_auth_failures_total{reason}`.
//! - An open API (no token configured, loopback only, or with
//!   `--insecure-no-auth`: `courier serve` decides) serves every request as
//!   an admin's.

use axum::http::{HeaderMap, StatusCode, Uri};
use courier_store::PgStore;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;
use subtle::ConstantTimeEq;

use crate::api_error::ApiError;

/// How often each process checks whether the tokens changed.
pub const REFRESH_MS: u64 = 250;
/// The prefix of every token `courier token create` makes.
pub const TOKEN_PREFIX: &str = "courier_";

/// Who a request is, once authenticated: a name (what `events` rows record
/// of a cancel or a re-drive) and what it may touch.
#[derive(Debug, Clone)]
pub struct Caller {
    name: Arc<str>,
    /// `None`: every store (an admin token, or an open API); otherwise a
    /// store token's stores.
    stores: Option<Arc<[String]>>,
}

impl Caller {
    /// An admin: the token's name (`admin` for `--admin-token`, `open-api`
    /// when the API is open).
    pub fn admin(name: &str) -> Self {
        Caller {
            name: name.into(),
            stores: None,
        }
    }

    /// A store token's caller: these stores only.
    pub fn of_stores(name: &str, stores: Arc<[String]>) -> Self {
        Caller {
            name: name.into(),
            stores: Some(stores),
        }
    }

    /// Whether this caller may act on `store`'s actions.
    pub fn may(&self, store: &str) -> bool {
        self.stores
            .as_ref()
            .is_none_or(|s| s.iter().any(|x| x == store))
    }

    pub fn is_admin(&self) -> bool {
        self.stores.is_none()
    }

    /// The token's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stores this caller may touch; `None`: every store.
    pub fn stores(&self) -> Option<&[String]> {
        self.stores.as_deref()
    }
}

/// Why a request was not authenticated (the metric's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No `Authorization` header.
    Missing,
    /// A header that is not `Bearer <token>`.
    Malformed,
    /// A token in the query string.
    InQuery,
    /// A token no active token matches (never issued, revoked, wrong).
    Unknown,
}

impl Failure {
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Missing => "missing",
            Failure::Malformed => "malformed",
            Failure::InQuery => "in_query",
            Failure::Unknown => "unknown",
        }
    }

    fn answer(self) -> ApiError {
        match self {
            Failure::InQuery => ApiError::new(
                StatusCode::BAD_REQUEST,
                "token_in_query",
                "send the token in the Authorization header, never in the URL",
            ),
            Failure::Malformed => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "bad_authorization",
                "the Authorization header must be `Bearer <token>`",
            ),
            _ => ApiError::unauthorized(),
        }
    }
}

/// One active token, as held in memory.
struct Entry {
    name: String,
    admin: bool,
    stores: Arc<[String]>,
    secret_sha256: [u8; 32],
}

#[derive(Default)]
struct Tokens {
    /// None until the first load.
    version: Option<i64>,
    by_id: HashMap<i64, Entry>,
}

/// The API's authentication: cheap to clone.
#[derive(Clone)]
pub struct Auth {
    open: bool,
    admin: Option<Arc<[u8]>>,
    /// None for a process without token table (a worker's metrics).
    tokens: Option<Arc<RwLock<Tokens>>>,
}

impl Auth {
    /// Tokens from `--api-token` (an admin's) and the database's token
    /// table, reloaded by a task that ends when the last clone is dropped.
    /// `open`: serve requests without a token as an admin's.
    pub fn start(store: PgStore, admin: Option<String>, open: bool) -> Self {
        let tokens = Arc::new(RwLock::new(Tokens::default()));
        tokio::spawn(refresh(store, Arc::downgrade(&tokens)));
        Auth {
            open,
            admin: admin.map(|t| Arc::from(t.into_bytes())),
            tokens: Some(tokens),
        }
    }

    /// Only an admin token (or none: open), no database: a worker's
    /// `/metrics`.
    pub fn admin_only(admin: Option<String>) -> Self {
        Auth {
            open: admin.is_none(),
            admin: admin.map(|t| Arc::from(t.into_bytes())),
            tokens: None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Who sent this request; a failure is counted and answered.
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<Caller, ApiError> {
        self.caller(uri, headers).map_err(|f| {
            metrics::counter!("courier_auth_failures_total", "reason" => f.reason()).increment(1);
            f.answer()
        })
    }

    /// Like [`Auth::check`], and the caller must be an admin (403 for a
    /// store token).
    pub fn check_admin(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.check(uri, headers)?.is_admin() {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_only",
            "this needs an admin token",
        ))
    }

    fn caller(&self, uri: &Uri, headers: &HeaderMap) -> Result<Caller, Failure> {
        if uri.query().is_some_and(query_has_token) {
            return Err(Failure::InQuery);
        }
        if self.open {
            return Ok(Caller::admin("open-api"));
        }
        let given = bearer(headers)?;
        if let Some(admin) = &self.admin {
            if bool::from(given.ct_eq(admin)) {
                return Ok(Caller::admin("admin"));
            }
        }
        let (id, secret) = parse_token(given).ok_or(Failure::Unknown)?;
        let tokens = self.tokens.as_ref().ok_or(Failure::Unknown)?;
        let tokens = tokens.read().unwrap_or_else(|p| p.into_inner());
        let entry = tokens.by_id.get(&id).ok_or(Failure::Unknown)?;
        let sent: [u8; 32] = Sha256::digest(secret).into();
        if !bool::from(sent.ct_eq(&entry.secret_sha256)) {
            return Err(Failure::Unknown);
        }
        Ok(if entry.admin {
            Caller::admin(&entry.name)
        } else {
            Caller::of_stores(&entry.name, entry.stores.clone())
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Result<&[u8], Failure> {
    let mut values = headers.get_all(axum::http::header::AUTHORIZATION).iter();
    let value = values.next().ok_or(Failure::Missing)?;
    if values.next().is_some() {
        return Err(Failure::Malformed);
    }
    let token = value
        .as_bytes()
        .strip_prefix(b"Bearer ")
        .ok_or(Failure::Malformed)?;
    if token.is_empty() || token.len() > 512 || token.iter().any(|b| !b.is_ascii_graphic()) {
        return Err(Failure::Malformed);
    }
    Ok(token)
}

/// Whether a query string carries something that looks like a token.
fn query_has_token(query: &str) -> bool {
    query.split('&').any(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        matches!(
            name.to_ascii_lowercase().as_str(),
            "token" | "access_token" | "api_token" | "apikey" | "api_key"
        ) || value.starts_with(TOKEN_PREFIX)
    })
}

/// `courier_<id>_<secret>`: the id and the secret's bytes.
pub fn parse_token(token: &[u8]) -> Option<(i64, &[u8])> {
    let rest = token.strip_prefix(TOKEN_PREFIX.as_bytes())?;
    let at = rest.iter().position(|b| *b == b'_')?;
    let id = std::str::from_utf8(&rest[..at]).ok()?.parse().ok()?;
    Some((id, &rest[at + 1..]))
}

/// A new token's secret (32 random bytes, hex) and its SHA-256, to store.
pub fn secret_new() -> (String, [u8; 32]) {
    let bytes: [u8; 32] = rand::random();
    let secret = hex::encode(bytes);
    let sha = Sha256::digest(secret.as_bytes()).into();
    (secret, sha)
}

/// The token a user sends: `courier_<id>_<secret>`.
pub fn token_text(id: i64, secret: &str) -> String {
    format!("{TOKEN_PREFIX}{id}_{secret}")
}

/// Polls the token table's version and reloads on change, until the
/// [`Auth`] is gone. A database error keeps the tokens last loaded.
async fn refresh(store: PgStore, tokens: Weak<RwLock<Tokens>>) {
    loop {
        let Some(held) = tokens.upgrade() else { return };
        let known = held.read().unwrap_or_else(|p| p.into_inner()).version;
        match reload_if_changed(&store, known).await {
            Ok(Some(fresh)) => *held.write().unwrap_or_else(|p| p.into_inner()) = fresh,
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "reading the API tokens failed; keeping the last")
            }
        }
        drop(held);
        tokio::time::sleep(Duration::from_millis(REFRESH_MS)).await;
    }
}

async fn reload_if_changed(
    store: &PgStore,
    known: Option<i64>,
) -> Result<Option<Tokens>, courier_store::StoreError> {
    if known.is_some() && store.tokens_version().await? == known.unwrap_or(-1) {
        return Ok(None);
    }
    let (version, active) = store.tokens_active().await?;
    let mut by_id = HashMap::with_capacity(active.len());
    for t in active {
        let Ok(secret_sha256) = <[u8; 32]>::try_from(t.secret_sha256.as_slice()) else {
            tracing::warn!(id = t.id, "a token's hash is not 32 bytes; ignored");
            continue;
        };
        by_id.insert(
            t.id,
            Entry {
                name: t.name,
                admin: t.admin,
                stores: t.stores.into(),
                secret_sha256,
            },
        );
    }
    Ok(Some(Tokens {
        version: Some(version),
        by_id,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_only_tokens() {
        let (secret, _) = secret_new();
        let t = token_text(42, &secret);
        assert_eq!(parse_token(t.as_bytes()), Some((42, secret.as_bytes())));
        for bad in [
            "",
            "courier_",
            "courier_x_abc",
            "other_1_abc",
            "courier_1abc",
        ] {
            assert_eq!(parse_token(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn tokens_in_the_query_string_are_seen() {
        assert!(query_has_token("token=abc"));
        assert!(query_has_token("a=1&Access_Token=abc"));
        assert!(query_has_token("x=courier_1_abc"));
        assert!(!query_has_token("page=2&store=s1"));
    }

    #[test]
    fn a_malformed_header_is_not_a_missing_one() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), Err(Failure::Missing));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), Err(Failure::Malformed));
        h.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), Err(Failure::Malformed));
        h.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Ok(&b"abc"[..]));
    }

    #[test]
    fn the_admin_token_and_an_open_api() {
        let uri: Uri = "/v1/actions".parse().unwrap();
        let mut h = HeaderMap::new();
        let open = Auth::admin_only(None);
        assert!(open.check(&uri, &h).unwrap().is_admin());
        let closed = Auth::admin_only(Some("s3cret".into()));
        assert!(closed.check(&uri, &h).is_err());
        h.insert("authorization", "Bearer s3cre".parse().unwrap());
        assert!(closed.check(&uri, &h).is_err());
        h.insert("authorization", "Bearer s3cret".parse().unwrap());
        assert!(closed.check(&uri, &h).unwrap().is_admin());
        let q: Uri = "/metrics?token=s3cret".parse().unwrap();
        assert_eq!(closed.check(&q, &h).unwrap_err().code(), "token_in_query");
    }
}

//! A provider's webhook as courier receives it, and what it says.

use courier_core::Status;

/// One webhook request, as the server received it.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    /// The URL the provider called, as the provider saw it (scheme, host,
    /// path and query): some schemes sign it.
    pub url: &'a str,
    /// The request's headers, names in lower case.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    /// The receiver's clock, in seconds since the Unix epoch, for schemes
    /// with a timestamp tolerance.
    pub now_s: i64,
}

impl Inbound<'_> {
    /// The first header of this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name` in the URL's query (percent-decoded).
    pub fn query(&self, name: &str) -> Option<String> {
        let (_, query) = self.url.split_once('?')?;
        form_pairs(query.as_bytes())
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// What a verified webhook reports about one action: the merge's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// courier's key of the action (`courier-<uid>`).
    pub key: String,
    pub status: Status,
    /// Unique per (message, status) event, for the merge's duplicate check.
    pub event_id: String,
    /// The provider's message id.
    pub message_id: String,
}

/// A verified webhook's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Report(Report),
    /// Verified, but nothing courier tracks (a status that maps onto no
    /// courier status, an inbound message): acknowledged, nothing merged.
    Ignored(String),
}

/// Why a webhook was refused; nothing was merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The scheme's signature header is missing.
    #[error("no signature")]
    Unsigned,
    /// The signature does not verify.
    #[error("wrong signature")]
    Forged,
    /// Signed, but older (or newer) than the scheme's tolerance.
    #[error("timestamp {age_s} s away from now, beyond the tolerance")]
    Stale { age_s: i64 },
    /// Signed, but not a webhook this adapter understands.
    #[error("malformed webhook: {0}")]
    Malformed(String),
}

impl Refusal {
    /// The HTTP status to answer: 401 for a signature refused, 400 for a
    /// signed body that cannot be read.
    pub fn http_status(&self) -> u16 {
        match self {
            Refusal::Malformed(_) => 400,
            _ => 401,
        }
    }
}

/// A provider's webhooks: verified, then read.
pub trait Webhooks: Send + Sync {
    fn receive(&self, inbound: &Inbound<'_>) -> Result<Parsed, Refusal>;
}

/// `application/x-www-form-urlencoded` pairs, in order, percent-decoded
/// (`+` is a space); a pair that does not decode as UTF-8 is kept lossily.
pub fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    body.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let mut it = pair.splitn(2, |b| *b == b'=');
            let k = it.next().unwrap_or_default();
            let v = it.next().unwrap_or_default();
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => match (hex_digit(s[i + 1]), hex_digit(s[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Percent-encodes `s` for a form body or a query (unreserved characters
/// kept, space as `%20`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_pairs_decode_in_order() {
        let got = form_pairs(b"To=%2B15551234567&Body=hi+there&Empty=&Bad=%zz");
        assert_eq!(
            got,
            vec![
                ("To".to_string(), "+15551234567".to_string()),
                ("Body".to_string(), "hi there".to_string()),
                ("Empty".to_string(), String::new()),
                ("Bad".to_string(), "%zz".to_string()),
            ]
        );
        assert_eq!(percent_encode("a b+c/é"), "a%20b%2Bc%2F%C3%A9");
        assert_eq!(form_pairs(percent_encode("x y&z").as_bytes())[0].0, "x y&z");
    }

    #[test]
    fn the_query_of_an_inbound_url_is_read_by_name() {
        let headers = vec![("x-a".to_string(), "1".to_string())];
        let i = Inbound {
            url: "https://c.example/v1/webhooks/twilio?key=courier-abc&x=1",
            headers: &headers,
            body: b"",
            now_s: 0,
        };
        assert_eq!(i.query("key").as_deref(), Some("courier-abc"));
        assert_eq!(i.query("nope"), None);
        assert_eq!(i.header("x-a"), Some("1"));
    }
}

//! `X-Twilio-Signature`: base64(HMAC-SHA1(auth token, the URL Twilio
//! called followed by every POST parameter, sorted by name, as name then
//! value)) (<https://www.twilio.com/docs/usage/security>).
//!
//! As Twilio's own validator (`twilio/twilio-python`,
//! `twilio/request_validator.py`): the values of a repeated name are sorted
//! and each distinct pair counted once, and a URL is checked both as given
//! and with the scheme's default port added or removed, since a proxy may
//! show the port Twilio left out, or drop the one it signed.
//!
//! There is no timestamp in the scheme, so no replay window: a replayed
//! callback is stopped by courier's idempotent merge (its event id).
//!
//! JSON bodies (the URL carries `bodySHA256`, no parameters are signed)
//! are signed with no parameters here; status callbacks of messages are
//! forms.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use std::collections::{BTreeMap, BTreeSet};
use subtle::ConstantTimeEq;

/// The header's name, lower case as [`crate::Inbound`] keeps names.
pub const HEADER: &str = "x-twilio-signature";

/// The signature Twilio puts on a request to `url` with these parameters.
pub fn sign<K: AsRef<str>, V: AsRef<str>>(
    auth_token: &str,
    url: &str,
    params: &[(K, V)],
) -> String {
    let mut by_name: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (k, v) in params {
        by_name.entry(k.as_ref()).or_default().insert(v.as_ref());
    }
    let mut mac = Hmac::<Sha1>::new_from_slice(auth_token.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(url.as_bytes());
    for (name, values) in &by_name {
        for value in values {
            mac.update(name.as_bytes());
            mac.update(value.as_bytes());
        }
    }
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Whether `signature` is Twilio's for this request: computed over the URL
/// as given and with its default port toggled, each compared in constant
/// time.
pub fn verify<K: AsRef<str>, V: AsRef<str>>(
    auth_token: &str,
    url: &str,
    params: &[(K, V)],
    signature: &str,
) -> bool {
    let given = signature.trim().as_bytes();
    let mut ok = false;
    for candidate in std::iter::once(url.to_string()).chain(default_port_toggled(url)) {
        let expected = sign(auth_token, &candidate, params);
        ok |= bool::from(expected.as_bytes().ct_eq(given));
    }
    ok
}

/// The URL with the scheme's default port (443, 80) removed when it has
/// it, added when it has none; `None` when it has another port or is not
/// an `http(s)` URL.
fn default_port_toggled(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => return None,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let (userinfo, hostport) = authority.split_at(host_start);
    // A port follows the last ':' unless that ':' is inside an IPv6 literal.
    let port = hostport.rsplit_once(':').filter(|(h, p)| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (!h.starts_with('[') || h.ends_with(']'))
    });
    let hostport = match port {
        Some((host, p)) if p == default => host.to_string(),
        Some(_) => return None,
        None => format!("{hostport}:{default}"),
    };
    Some(format!("{scheme}://{userinfo}{hostport}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_port_is_toggled_and_no_other() {
        assert_eq!(
            default_port_toggled("https://a.example/p?x=1").as_deref(),
            Some("https://a.example:443/p?x=1")
        );
        assert_eq!(
            default_port_toggled("https://a.example:443/p").as_deref(),
            Some("https://a.example/p")
        );
        assert_eq!(
            default_port_toggled("http://u:p@a.example").as_deref(),
            Some("http://u:p@a.example:80")
        );
        assert_eq!(
            default_port_toggled("http://[::1]/x").as_deref(),
            Some("http://[::1]:80/x")
        );
        assert_eq!(
            default_port_toggled("http://[::1]:80/x").as_deref(),
            Some("http://[::1]/x")
        );
        assert_eq!(default_port_toggled("http://a.example:1234/x"), None);
        assert_eq!(default_port_toggled("ftp://a.example/x"), None);
    }
}

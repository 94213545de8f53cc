//! Webhook signatures: `X-Signature: sha256=<hex HMAC-SHA256 of the raw body>`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const HEADER: &str = "x-signature";

/// The header value for a body.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a header value against a body, in constant time.
pub fn verify(secret: &[u8], body: &[u8], header: Option<&[u8]>) -> bool {
    let Some(header) = header else { return false };
    let Some(hex_sig) = header.strip_prefix(b"sha256=") else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_and_forgeries_do_not() {
        let body = br#"{"event_id":"evt_1"}"#;
        let sig = sign(b"s3cret", body);
        assert!(sig.starts_with("sha256="));
        assert!(verify(b"s3cret", body, Some(sig.as_bytes())));
        assert!(!verify(b"other", body, Some(sig.as_bytes())));
        assert!(!verify(b"s3cret", b"{}", Some(sig.as_bytes())));
        assert!(!verify(b"s3cret", body, None));
        assert!(!verify(b"s3cret", body, Some(b"sha256=zz")));
        assert!(!verify(b"s3cret", body, Some(&sig.as_bytes()[7..])));
    }

    #[test]
    fn known_vector() {
        // RFC 4231 test case 2.
        let sig = sign(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}

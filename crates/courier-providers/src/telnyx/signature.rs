//! Telnyx's webhook signature: Ed25519 over `"{timestamp}|{raw body}"`.
//!
//! Headers `telnyx-signature-ed25519` (base64, 64 bytes) and
//! `telnyx-timestamp` (Unix seconds); checked with the account's public key
//! (base64, 32 bytes, from the Telnyx portal). The API reference states no
//! tolerance; Telnyx's SDKs refuse a timestamp more than 300 s from now
//! (`telnyx-python` `webhook_verification.py`, `telnyx-node` `webhooks.ts`),
//! and so does courier, in both directions.
//!
//! The signature is checked before the timestamp's age, so
//! [`Refusal::Stale`] always means an authentic webhook from a clock too
//! far from ours (what an operator watches for), and anything that does not
//! verify is [`Refusal::Forged`] whatever its timestamp.

use crate::inbound::Refusal;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, VerifyingKey};
use sha2::{Digest, Sha256};
use std::fmt;

/// The header of the base64 signature.
pub const SIGNATURE_HEADER: &str = "telnyx-signature-ed25519";
/// The header of the signing time, Unix seconds.
pub const TIMESTAMP_HEADER: &str = "telnyx-timestamp";
/// How far the signing time may be from the receiver's clock, either way.
pub const TOLERANCE_S: i64 = 300;

/// An Ed25519 signing key: Telnyx's side, for the fake's double and tests.
/// Its `Debug` never shows it.
#[derive(Clone)]
pub struct SigningKey(ed25519_dalek::SigningKey);

impl SigningKey {
    /// The key of a 32-byte seed (RFC 8032's secret key).
    pub fn from_seed(seed: [u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(<redacted>)")
    }
}

/// The account's public key, that webhooks are checked with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// The key as the Telnyx portal shows it: base64 of 32 bytes.
    pub fn from_base64(text: &str) -> Result<PublicKey, String> {
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|e| format!("not base64: {e}"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("{} bytes, an Ed25519 public key has 32", b.len()))?;
        VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|e| format!("not an Ed25519 public key: {e}"))
    }

    pub fn to_base64(&self) -> String {
        BASE64.encode(self.0.to_bytes())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

/// The bytes Telnyx signs: the timestamp header as sent, `|`, the body.
fn signed_message(timestamp: &str, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(timestamp.len() + 1 + body.len());
    m.extend_from_slice(timestamp.as_bytes());
    m.push(b'|');
    m.extend_from_slice(body);
    m
}

/// The `telnyx-signature-ed25519` value of `body` sent at `timestamp`
/// (whose header value is `timestamp` in decimal).
pub fn sign(key: &SigningKey, timestamp: i64, body: &[u8]) -> String {
    let sig = key.0.sign(&signed_message(&timestamp.to_string(), body));
    BASE64.encode(sig.to_bytes())
}

/// A key pair derived from a shared secret: the seed is the SHA-256 of the
/// secret. A device of courier's tests and of the fake's double, so that
/// the double (which signs) and the courier server under test (which is
/// given the public key, base64) agree from one secret. Telnyx issues its
/// keys otherwise: the real public key comes from the portal.
pub fn keypair_from_secret(secret: &str) -> (SigningKey, String) {
    let seed: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    let key = SigningKey::from_seed(seed);
    let public = key.public_key().to_base64();
    (key, public)
}

/// Checks a webhook: both headers present (else [`Refusal::Unsigned`]), the
/// signature over `"{timestamp}|{body}"` valid for `key` (else
/// [`Refusal::Forged`]), the timestamp an integer (else
/// [`Refusal::Malformed`]) within [`TOLERANCE_S`] of `now_s` (else
/// [`Refusal::Stale`]).
pub fn verify(
    key: &PublicKey,
    signature: Option<&str>,
    timestamp: Option<&str>,
    body: &[u8],
    now_s: i64,
) -> Result<(), Refusal> {
    let (Some(signature), Some(timestamp)) = (signature, timestamp) else {
        return Err(Refusal::Unsigned);
    };
    let sig = BASE64
        .decode(signature.trim())
        .ok()
        .and_then(|b| Signature::from_slice(&b).ok())
        .ok_or(Refusal::Forged)?;
    key.0
        .verify_strict(&signed_message(timestamp, body), &sig)
        .map_err(|_| Refusal::Forged)?;
    let signed_at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| Refusal::Malformed(format!("{TIMESTAMP_HEADER} is not Unix seconds")))?;
    let age_s = now_s.saturating_sub(signed_at);
    if age_s.unsigned_abs() > TOLERANCE_S.unsigned_abs() {
        return Err(Refusal::Stale { age_s });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_pair_from_a_secret_is_the_same_every_time_and_differs_by_secret() {
        let (k1, p1) = keypair_from_secret("s3cret");
        let (_, p1_again) = keypair_from_secret("s3cret");
        let (_, p2) = keypair_from_secret("other");
        assert_eq!(p1, p1_again);
        assert_ne!(p1, p2);
        assert_eq!(PublicKey::from_base64(&p1).unwrap(), k1.public_key());
        let sig = sign(&k1, 1_000, b"{}");
        let public = PublicKey::from_base64(&p1).unwrap();
        assert_eq!(
            verify(&public, Some(&sig), Some("1000"), b"{}", 1_000),
            Ok(())
        );
    }

    #[test]
    fn bad_public_keys_are_refused_with_a_reason() {
        assert!(PublicKey::from_base64("not base64!").is_err());
        let short = BASE64.encode([1u8; 31]);
        assert!(PublicKey::from_base64(&short)
            .unwrap_err()
            .contains("31 bytes"));
    }

    #[test]
    fn a_timestamp_far_in_the_past_does_not_overflow() {
        let (k, p) = keypair_from_secret("x");
        let public = PublicKey::from_base64(&p).unwrap();
        let ts = i64::MIN;
        let sig = sign(&k, ts, b"b");
        assert!(matches!(
            verify(&public, Some(&sig), Some(&ts.to_string()), b"b", i64::MAX),
            Err(Refusal::Stale { .. })
        ));
    }
}

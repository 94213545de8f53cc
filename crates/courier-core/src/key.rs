//! Idempotency keys: derived from the action, validated as the contract says.
//!
//! # Invariants
//! - [`action_key`] is a pure function of the action's uid, so the key never
//!   changes across claims, epochs, workers or restarts.
//! - A key is 1..=255 printable ASCII characters (`0x20..=0x7e`); the quoted
//!   (structured-field string) and bare header forms name the same key.

/// The longest key the contract allows.
pub const KEY_LEN_MAX: usize = 255;

/// The stable idempotency key of an action, from its uid (a UUIDv7 drawn once,
/// at enqueue: milliseconds, then 74 random bits). The uid, not the row id,
/// makes keys unique across databases, so a fresh database never reuses a key
/// a provider still remembers.
pub fn action_key(action_uid: &str) -> String {
    format!("courier-{action_uid}")
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("idempotency key is empty")]
    Empty,
    #[error("idempotency key is longer than {KEY_LEN_MAX} characters")]
    TooLong,
    #[error("idempotency key must be printable ASCII")]
    NotPrintableAscii,
    #[error("idempotency key has a malformed quoted form")]
    BadQuoting,
}

/// Checks a key (already unquoted).
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > KEY_LEN_MAX {
        return Err(KeyError::TooLong);
    }
    if !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err(KeyError::NotPrintableAscii);
    }
    Ok(())
}

/// Reads an `Idempotency-Key` header value: a structured-field string
/// (`"abc"`, with `\"` and `\\` escapes) or a bare token (`abc`).
pub fn parse_key_header(raw: &[u8]) -> Result<String, KeyError> {
    if !raw.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(KeyError::NotPrintableAscii);
    }
    // Safe: every byte is ASCII.
    let text = std::str::from_utf8(raw).map_err(|_| KeyError::NotPrintableAscii)?;
    let text = text.trim_matches(' ');
    let key = if let Some(inner) = text.strip_prefix('"') {
        let inner = inner.strip_suffix('"').ok_or(KeyError::BadQuoting)?;
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(e @ ('"' | '\\')) => out.push(e),
                    _ => return Err(KeyError::BadQuoting),
                },
                '"' => return Err(KeyError::BadQuoting),
                c => out.push(c),
            }
        }
        out
    } else {
        text.to_string()
    };
    validate_key(&key)?;
    Ok(key)
}

/// Writes a key in the quoted structured-field form.
pub fn quote_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    out.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_and_bare_forms_are_the_same_key() {
        assert_eq!(parse_key_header(b"abc").unwrap(), "abc");
        assert_eq!(parse_key_header(b"\"abc\"").unwrap(), "abc");
        assert_eq!(parse_key_header(b"\"a\\\"b\"").unwrap(), "a\"b");
        let k = "we\"ird\\key";
        assert_eq!(parse_key_header(quote_key(k).as_bytes()).unwrap(), k);
    }

    #[test]
    fn bad_keys_are_refused() {
        assert_eq!(parse_key_header(b""), Err(KeyError::Empty));
        assert_eq!(parse_key_header(b"\"\""), Err(KeyError::Empty));
        assert_eq!(
            parse_key_header("ключ".as_bytes()),
            Err(KeyError::NotPrintableAscii)
        );
        assert_eq!(parse_key_header(&[b'a'; 256]), Err(KeyError::TooLong));
        assert!(parse_key_header(&[b'a'; 255]).is_ok());
        assert_eq!(parse_key_header(b"\"abc"), Err(KeyError::BadQuoting));
        assert_eq!(parse_key_header(b"\"a\"b\""), Err(KeyError::BadQuoting));
    }

    #[test]
    fn action_keys_are_pinned_and_valid() {
        // The key is written down, not recomputed: providers remember keys
        // for their retention window, so a change of derivation would turn
        // every resend after an upgrade into a second message.
        let uid = "0f8fad5bd9cb469fa16570867728950e";
        assert_eq!(action_key(uid), "courier-0f8fad5bd9cb469fa16570867728950e");
        assert!(validate_key(&action_key(uid)).is_ok());
        assert_ne!(action_key(uid), action_key("another"));
        // The longest uid whose key the contract still accepts.
        let longest = "u".repeat(KEY_LEN_MAX - "courier-".len());
        assert!(validate_key(&action_key(&longest)).is_ok());
        assert_eq!(
            validate_key(&action_key(&format!("{longest}u"))),
            Err(KeyError::TooLong)
        );
    }
}

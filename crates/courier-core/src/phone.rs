//! Phone numbers in E.164 form: `+`, then 8 to 15 digits, the first not zero.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("phone number must be E.164: '+' and 8 to 15 digits, e.g. +15551234567")]
pub struct BadPhone;

pub fn validate_phone(to: &str) -> Result<(), BadPhone> {
    let digits = to.strip_prefix('+').ok_or(BadPhone)?;
    let ok = (8..=15).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !digits.starts_with('0');
    if ok {
        Ok(())
    } else {
        Err(BadPhone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e164_numbers_pass_and_others_fail() {
        assert!(validate_phone("+15551234567").is_ok());
        assert!(validate_phone("+4915112345678").is_ok());
        for bad in [
            "15551234567",
            "+1555",
            "+0555123456",
            "+1555123456x",
            "",
            "+",
            "+1234567890123456",
        ] {
            assert_eq!(validate_phone(bad), Err(BadPhone), "{bad}");
        }
    }
}

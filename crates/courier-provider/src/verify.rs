//! The provider-log verifier (to be written).

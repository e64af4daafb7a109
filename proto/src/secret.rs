//! Keys in `Debug` output: shown as present or absent, never their bytes, so that a
//! configuration logged or printed in a panic message gives no key away.

/// Formats an optional key as `Some(<redacted>)` or `None`.
pub struct Redacted<'a>(pub &'a Option<[u8; 32]>);

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(_) => f.write_str("Some(<redacted>)"),
            None => f.write_str("None"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_debug_output_holds_a_key() {
        let key = Some([0xAB; 32]);
        let mut cfg = crate::engine::Config::new(7, 0, 2);
        cfg.key = key;
        let join = crate::membership::JoinConfig {
            group: 7,
            mac: crate::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
            key,
            expect: crate::membership::Expect::Invited,
            max_pdu: 1500,
        };
        let session = crate::membership::Session {
            nonce: 1,
            group: 2,
            key,
        };
        for shown in [
            format!("{cfg:?}"),
            format!("{cfg:#?}"),
            format!("{join:?}"),
            format!("{session:?}"),
        ] {
            // 0xAB is 171: neither the decimal nor the hex bytes appear.
            assert!(
                !shown.contains("171") && !shown.to_lowercase().contains("ab, "),
                "{shown}"
            );
            assert!(shown.contains("<redacted>"), "{shown}");
        }
        assert_eq!(format!("{:?}", Redacted(&None)), "None");
    }
}

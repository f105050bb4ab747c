//! What `export_plugin!(P, uses: [..])` declares, as bits: on every target,
//! so a misspelt capability fails a plugin's native `cargo test` as it fails
//! its wasm build. The wasm host (`__wasm.rs`) provides the declared ones.

/// Every capability of the list: what `export_plugin!(P)` declares.
pub const ALL: u32 = u32::MAX;

/// The bits of the capabilities `list` names.
pub const fn uses(list: &[Capability]) -> u32 {
    let mut bits = 0;
    let mut i = 0;
    while i < list.len() {
        bits |= 1 << list[i] as u32;
        i += 1;
    }
    bits
}

/// [`Capability`]: one name per listed capability, as `uses:` spells it.
macro_rules! capability_enum {
    ($(
        $(#[$doc:meta])*
        $name:ident: $trait:ident, $wasm:ident, $fake:ident, [$($ty:ident),*], [$($test:ident),*];
    )*) => {
        /// A capability as `export_plugin!`'s `uses:` names it.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Capability { $($name),* }

        impl Capability {
            /// Every capability, in the list's order.
            pub const EVERY: &[Capability] = &[$(Capability::$name),*];
        }
    };
}

capability_list!(capability_enum);

// One bit each in a u32.
const _: () = assert!(Capability::EVERY.len() <= 32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_capability_is_its_own_bit_and_every_one_is_within_all() {
        assert_eq!(uses(&[]), 0);
        let every = uses(Capability::EVERY);
        assert_eq!(every.count_ones() as usize, Capability::EVERY.len());
        assert_eq!(every & ALL, every);
        let two = uses(&[Capability::files, Capability::state, Capability::files]);
        assert_eq!(two.count_ones(), 2);
        assert_eq!(two & uses(&[Capability::http]), 0);
    }
}

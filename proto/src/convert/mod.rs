//! Conversions between the wire messages and the domain types of `sextant_model`, one module
//! per family of messages. Nothing outside this crate sees both sides at once.

/// `From` both ways between a domain type and a message whose fields have the same names:
/// `Domain<..> = Domain <=> Message { fields moved as they are; field: to, from; … }`, each
/// field after the first `;` going through its pair of functions. Both sides are destructured
/// whole, so a field added to one side only does not compile.
macro_rules! same_fields {
    ($domain:ty = $d:ident <=> $wire:path {
        $($field:ident),* $(,)? $(; $($conv:ident: $to:expr, $from:expr);+ $(;)?)?
    }) => {
        impl From<$domain> for $wire {
            fn from(d: $domain) -> Self {
                let $d { $($field,)* $($($conv,)+)? } = d;
                $wire { $($field,)* $($($conv: $to($conv),)+)? }
            }
        }

        impl From<$wire> for $domain {
            fn from(w: $wire) -> Self {
                let $wire { $($field,)* $($($conv,)+)? } = w;
                $d { $($field,)* $($($conv: $from($conv),)+)? }
            }
        }
    };
}

mod cohort;
pub mod persist_row;
mod query;
mod row;

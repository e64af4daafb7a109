//! Names of the small enums users pick on command lines and in environment variables
//! (algorithms, wait modes, backends).
//!
//! Each such enum is spelled once, by [`crate::spelled!`]: `FromStr` accepts any of a
//! variant's names, `Display` writes its first one, and an unknown name is an error that lists
//! the first names, so a typo never silently picks a default.

/// Implements `FromStr` and `Display` for an enum of unit variants from one table of names.
///
/// ```
/// #[derive(Debug, PartialEq)]
/// enum Speed { Slow, Fast }
/// ethbcast_proto::spelled!(Speed, "speed", { Slow => "slow" | "s", Fast => "fast" });
/// assert_eq!("s".parse::<Speed>(), Ok(Speed::Slow));
/// assert_eq!(Speed::Fast.to_string(), "fast");
/// assert_eq!("medium".parse::<Speed>().unwrap_err(), "unknown speed \"medium\" (slow, fast)");
/// ```
#[macro_export]
macro_rules! spelled {
    ($ty:ident, $what:literal, { $($var:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl ::core::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($name $(| $alias)* => Ok($ty::$var),)+
                    _ => Err(format!(
                        "unknown {} {s:?} ({})",
                        $what,
                        [$($name),+].join(", ")
                    )),
                }
            }
        }

        impl ::core::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(match self {
                    $($ty::$var => $name,)+
                })
            }
        }
    };
}

/// Gives a fieldless enum its codes on the wire from one table: `code` and `from_code` (`None`
/// for a code no variant has). The match in `code` is exhaustive, so a variant left out of the
/// table does not compile.
///
/// ```
/// #[derive(Debug, Clone, Copy, PartialEq)]
/// enum Op { Get, Put }
/// ethbcast_proto::coded!(Op: u8 { Get = 1, Put = 7 });
/// assert_eq!(Op::Put.code(), 7);
/// assert_eq!(Op::from_code(1), Some(Op::Get));
/// assert_eq!(Op::from_code(2), None);
/// ```
#[macro_export]
macro_rules! coded {
    ($ty:ident: $t:ty { $($var:ident = $code:literal),+ $(,)? }) => {
        impl $ty {
            /// The code of this variant on the wire.
            pub const fn code(self) -> $t {
                match self {
                    $($ty::$var => $code,)+
                }
            }

            /// The variant whose code is `code`, if any.
            pub const fn from_code(code: $t) -> Option<$ty> {
                match code {
                    $($code => Some($ty::$var),)+
                    _ => None,
                }
            }
        }
    };
}

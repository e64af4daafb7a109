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

//! The `string_enum!` macro: wire strings as enums that keep values they do not know.

/// Defines a string enum whose known values are variants and whose unknown values are kept
/// verbatim in `Other`, so decoding never fails on a value the cloud adds later.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept as sent.
            Other(String),
        }

        impl $name {
            /// Every known value.
            pub const KNOWN: &'static [$name] = &[ $( $name::$variant, )+ ];

            /// The wire spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $wire, )+
                    $name::Other(value) => value,
                }
            }

            /// Maps a wire spelling to its variant (exact, case-sensitive match).
            pub fn from_wire(value: &str) -> Self {
                match value {
                    $( $wire => $name::$variant, )+
                    other => $name::Other(other.to_owned()),
                }
            }

            /// Whether this is one of the values this version knows.
            pub fn is_known(&self) -> bool {
                !matches!(self, $name::Other(_))
            }
        }

        /// An empty `Other`, used only when a response omits the field altogether.
        impl Default for $name {
            fn default() -> Self {
                $name::Other(String::new())
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                $name::from_wire(value)
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Ok($name::from_wire(value))
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        /// The known values; a value kept in `Other` is outside the schema on purpose.
        #[cfg(feature = "json-schema")]
        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({ "type": "string", "enum": [ $( $wire ),+ ] })
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = <String as ::serde::Deserialize>::deserialize(deserializer)?;
                Ok($name::from_wire(&value))
            }
        }
    };
}

pub(super) use string_enum;

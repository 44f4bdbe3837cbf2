//! `wire_enum!`: a closed set of names that cross a boundary (the wire, the database). Each set
//! is declared once; the macro derives the enum, its serde names, `ALL` (in declaration order)
//! and the string conversions, so a name is written in exactly one place.

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$variant_meta:meta])* $variant:ident = $wire:literal, )+ }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ::serde::Serialize, ::serde::Deserialize)]
        pub enum $name {
            $( $(#[$variant_meta])* #[serde(rename = $wire)] $variant, )+
        }

        impl $name {
            /// Every value, in the order the wire schema lists them.
            pub const ALL: &'static [Self] = &[ $( Self::$variant, )+ ];

            /// The wire name.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self { $( Self::$variant => $wire, )+ }
            }

            /// The value with this exact wire name, if any.
            #[must_use]
            pub fn from_wire(name: &str) -> Option<Self> {
                match name { $( $wire => Some(Self::$variant), )+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use wire_enum;

//! Ordered JSON, encoded the way Go's `encoding/json` does: Gitea's bodies
//! keep their struct field order and Go's HTML-safe escaping.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize};
use std::io;

/// A JSON value whose objects keep their field order (Go structs marshal in
/// declaration order; serde_json's `Value` would sort the keys).
#[derive(Clone, Debug, PartialEq)]
pub enum J {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    /// As a `serde_json::Value` (key order lost), for assertions.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_slice(&go_json(self, false)).unwrap()
    }
}

pub(crate) fn obj(fields: Vec<(&str, J)>) -> J {
    J::Obj(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

impl From<&str> for J {
    fn from(s: &str) -> J {
        J::Str(s.to_owned())
    }
}
impl From<String> for J {
    fn from(s: String) -> J {
        J::Str(s)
    }
}
impl From<&String> for J {
    fn from(s: &String) -> J {
        J::Str(s.clone())
    }
}
impl From<i64> for J {
    fn from(n: i64) -> J {
        J::Int(n)
    }
}
impl From<bool> for J {
    fn from(b: bool) -> J {
        J::Bool(b)
    }
}

impl Serialize for J {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            J::Null => s.serialize_unit(),
            J::Bool(b) => s.serialize_bool(*b),
            J::Int(n) => s.serialize_i64(*n),
            J::Float(f) => s.serialize_f64(*f),
            J::Str(v) => s.serialize_str(v),
            J::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            J::Obj(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_none<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<J, E> {
                Ok(J::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<J, E> {
                Ok(J::Int(n))
            }
            fn visit_u64<E>(self, n: u64) -> Result<J, E> {
                Ok(J::Int(n as i64))
            }
            fn visit_f64<E>(self, f: f64) -> Result<J, E> {
                Ok(J::Float(f))
            }
            fn visit_str<E>(self, s: &str) -> Result<J, E> {
                Ok(J::Str(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<J, E> {
                Ok(J::Str(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element()? {
                    items.push(item);
                }
                Ok(J::Arr(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, J>()? {
                    fields.push((k, v));
                }
                Ok(J::Obj(fields))
            }
        }
        d.deserialize_any(V)
    }
}

/// A serde_json formatter that escapes like Go's encoder: `<`, `>`, `&`,
/// U+2028 and U+2029 as `\uXXXX`; everything else as serde_json does (which
/// matches Go ≥ 1.22 for control characters).
struct GoEscape<F>(F);

macro_rules! delegate {
    ($($name:ident),*) => {$(
        fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
            self.0.$name(w)
        }
    )*};
}
macro_rules! delegate_first {
    ($($name:ident),*) => {$(
        fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
            self.0.$name(w, first)
        }
    )*};
}

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for GoEscape<F> {
    delegate!(
        begin_array,
        end_array,
        end_array_value,
        begin_object,
        end_object,
        end_object_key,
        begin_object_value,
        end_object_value
    );
    delegate_first!(begin_array_value, begin_object_key);

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let escaped = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(escaped.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// Go's `json.MarshalIndent(v, "", "  ")` (`indent`) or `json.Marshal(v)`.
pub fn go_json(v: &J, indent: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if indent {
        let fmt = GoEscape(serde_json::ser::PrettyFormatter::with_indent(b"  "));
        v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))
            .unwrap();
    } else {
        let fmt = GoEscape(serde_json::ser::CompactFormatter);
        v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))
            .unwrap();
    }
    out
}

//! Fields of a signed JSON body, read by an RFC 6901 pointer exactly as the provider wrote
//! them.
//!
//! Why not `serde_json::Value::pointer`: a `Value` keeps numbers as `u64`, `i64` or `f64`,
//! so `123456789012345678901234` and `123456789012345678901235` both become the same float
//! and two genuine events would share one identity (the second quarantined as a conflict).
//! Here the walk borrows each member as a [`RawValue`], the number's own text, and nothing
//! on the path is re-encoded. It also allocates nothing for the members it skips.
//!
//! The rule for ids: a JSON string is its decoded text; a JSON integer is its exact decimal
//! text, so `10` and `"10"` are the same identity (a provider writes an id one way; both
//! name event 10). A number with a fraction or an exponent is not an id.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// What sits at a pointer, as far as the callers care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field<'a> {
    /// A JSON string, unescaped.
    Text(String),
    /// A JSON number, exactly as written (`-12`, `1.5e3`).
    Number(&'a str),
    /// Anything else: an object, an array, `true`, `false` or `null`.
    Other,
}

impl Field<'_> {
    /// The text of a string, or of a number that is an integer: what an id or a key may be.
    pub fn text_or_integer(&self) -> Option<String> {
        match self {
            Field::Text(s) => Some(s.clone()),
            Field::Number(n) if is_integer(n) => Some((*n).to_owned()),
            _ => None,
        }
    }
}

/// The body is not JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotJson;

/// The field at `pointer` (`""` is the whole document), or `None` when the path does not
/// exist. The whole body is checked to be JSON first, as `serde_json::from_slice` would.
pub fn field<'a>(body: &'a [u8], pointer: &str) -> Result<Option<Field<'a>>, NotJson> {
    let root: &'a RawValue = serde_json::from_slice(body).map_err(|_| NotJson)?;
    Ok(match walk(root, pointer) {
        Some(raw) => Some(classify(raw)?),
        None => None,
    })
}

/// The member at `pointer` below `current`, borrowed.
fn walk<'a>(mut current: &'a RawValue, pointer: &str) -> Option<&'a RawValue> {
    if !pointer.is_empty() {
        let path = pointer.strip_prefix('/')?;
        for token in path.split('/') {
            let token = unescape(token);
            let mut de = serde_json::Deserializer::from_str(current.get());
            match Member(&token).deserialize(&mut de) {
                Ok(Some(next)) => current = next,
                // Already valid JSON, so an error here can only be "not found"-like.
                Ok(None) | Err(_) => return None,
            }
        }
    }
    Some(current)
}

fn classify(raw: &RawValue) -> Result<Field<'_>, NotJson> {
    let text = raw.get();
    Ok(match text.as_bytes().first() {
        Some(b'"') => Field::Text(serde_json::from_str(text).map_err(|_| NotJson)?),
        Some(b'-' | b'0'..=b'9') => Field::Number(text),
        _ => Field::Other,
    })
}

/// Why a batch's ids could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EachError {
    NotJson,
    NotArray,
    Empty,
    NoId,
}

/// The id at `id` inside each element of the array at `array`, in order: the identity of a
/// batch (HubSpot, SendGrid, Meta). Every element must have one.
pub fn each(body: &[u8], array: &str, id: &str) -> Result<Vec<String>, EachError> {
    let root: &RawValue = serde_json::from_slice(body).map_err(|_| EachError::NotJson)?;
    let list = walk(root, array).ok_or(EachError::NotArray)?;
    let elements: Vec<&RawValue> =
        serde_json::from_str(list.get()).map_err(|_| EachError::NotArray)?;
    if elements.is_empty() {
        return Err(EachError::Empty);
    }
    elements
        .into_iter()
        .map(|e| {
            walk(e, id)
                .and_then(|raw| classify(raw).ok())
                .and_then(|f| f.text_or_integer())
                .ok_or(EachError::NoId)
        })
        .collect()
}

/// The string at `pointer`, if the body is JSON and there is one.
pub fn text(body: &[u8], pointer: &str) -> Option<String> {
    match field(body, pointer) {
        Ok(Some(Field::Text(s))) => Some(s),
        _ => None,
    }
}

/// RFC 6901: `~1` is `/` and `~0` is `~`, in that order.
pub(crate) fn unescape(token: &str) -> std::borrow::Cow<'_, str> {
    if token.contains('~') {
        token.replace("~1", "/").replace("~0", "~").into()
    } else {
        token.into()
    }
}

/// JSON's integer grammar: an optional minus, then `0` or digits not starting with `0`.
fn is_integer(n: &str) -> bool {
    let digits = n.strip_prefix('-').unwrap_or(n);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
}

/// Finds one member of an object (by key) or an array (by index) and borrows its raw text,
/// skipping every other member without building it.
struct Member<'t>(&'t str);

impl<'de> DeserializeSeed<'de> for Member<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Member<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_it) = map.next_key_seed(KeyIs(self.0))? {
            if is_it {
                // A repeated key: the last one counts, as in serde_json's own maps.
                found = Some(map.next_value::<&RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // RFC 6901 indices: digits without a leading zero ("-" names no element).
        let wanted = (is_integer(self.0) && !self.0.starts_with('-'))
            .then(|| self.0.parse::<usize>().ok())
            .flatten();
        let mut found = None;
        let mut i = 0;
        while let Some(element) = seq.next_element::<&RawValue>()? {
            if Some(i) == wanted {
                found = Some(element);
            }
            i += 1;
        }
        Ok(found)
    }

    // A scalar has no members.
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether an object key equals the wanted one, compared without allocating when the key
/// has no escapes.
struct KeyIs<'t>(&'t str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// Deeper than this, two documents are not compared (and so are taken as different): the
/// comparison recurses once per level, and serde_json's own parser stops at 128.
const MAX_COMPARE_DEPTH: usize = 128;

/// Whether two JSON documents hold the same value: objects equal as maps whatever their
/// members' order, arrays element by element, strings by their decoded text, numbers by their
/// exact text (so `1.0` and `1` differ, as do two integers past 2^64 that a float would
/// merge). Whitespace and escapes do not matter. An object with a key twice, a document
/// that is not JSON, or one nested past [`MAX_COMPARE_DEPTH`] is never the same as anything:
/// the caller treats "not the same" as the safe answer (a conflict to look at).
///
/// Top-level members named in `except` are left out of the comparison (a provider's
/// delivery bookkeeping, see `Verifier::bookkeeping`).
pub fn same_value(a: &[u8], b: &[u8], except: &[&str]) -> bool {
    let (Ok(a), Ok(b)) = (
        serde_json::from_slice::<&RawValue>(a),
        serde_json::from_slice::<&RawValue>(b),
    ) else {
        return false;
    };
    same_raw(a, b, 0, except)
}

fn same_raw(a: &RawValue, b: &RawValue, depth: usize, except: &[&str]) -> bool {
    if depth > MAX_COMPARE_DEPTH {
        return false;
    }
    let (ta, tb) = (a.get(), b.get());
    match (ta.as_bytes().first(), tb.as_bytes().first()) {
        (Some(b'{'), Some(b'{')) => {
            let (Some(mut ma), Some(mut mb)) = (members(ta), members(tb)) else {
                return false;
            };
            for key in except {
                ma.remove(*key);
                mb.remove(*key);
            }
            ma.len() == mb.len()
                && ma.iter().all(|(k, va)| {
                    mb.get(k.as_str())
                        .is_some_and(|vb| same_raw(va, vb, depth + 1, &[]))
                })
        }
        (Some(b'['), Some(b'[')) => {
            let (Ok(ea), Ok(eb)) = (
                serde_json::from_str::<Vec<&RawValue>>(ta),
                serde_json::from_str::<Vec<&RawValue>>(tb),
            ) else {
                return false;
            };
            ea.len() == eb.len()
                && ea
                    .iter()
                    .zip(&eb)
                    .all(|(x, y)| same_raw(x, y, depth + 1, &[]))
        }
        (Some(b'"'), Some(b'"')) => {
            match (
                serde_json::from_str::<String>(ta),
                serde_json::from_str::<String>(tb),
            ) {
                (Ok(x), Ok(y)) => x == y,
                _ => false,
            }
        }
        // Numbers, true, false, null: their text, which RawValue keeps without whitespace.
        _ => ta == tb,
    }
}

/// An object's members by key; None if a key appears twice (which value counts is then a
/// matter of the reader, so no comparison is believed).
fn members(text: &str) -> Option<std::collections::HashMap<String, &RawValue>> {
    let pairs: Vec<(String, &RawValue)> = serde_json::from_str::<Pairs>(text).ok()?.0;
    let n = pairs.len();
    let map: std::collections::HashMap<_, _> = pairs.into_iter().collect();
    (map.len() == n).then_some(map)
}

/// An object's members in order, duplicates kept.
struct Pairs<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> de::Deserialize<'de> for Pairs<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Pairs<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Pairs<'a>, M::Error> {
                let mut pairs = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, &'a RawValue>()? {
                    pairs.push((k, v));
                }
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, pointer: &str) -> Option<Field<'static>> {
        let body: &'static str = Box::leak(body.to_owned().into_boxed_str());
        field(body.as_bytes(), pointer).unwrap()
    }

    #[test]
    fn big_integers_keep_every_digit() {
        let a = at(r#"{"id":123456789012345678901234}"#, "/id").unwrap();
        let b = at(r#"{"id":123456789012345678901235}"#, "/id").unwrap();
        assert_eq!(a.text_or_integer().unwrap(), "123456789012345678901234");
        assert_ne!(a.text_or_integer(), b.text_or_integer());
    }

    #[test]
    fn strings_numbers_and_the_rest() {
        assert_eq!(
            at(r#"{"id":"evt_1"}"#, "/id"),
            Some(Field::Text("evt_1".into()))
        );
        assert_eq!(
            at(r#"{"id":"a\"b\u00e9"}"#, "/id"),
            Some(Field::Text("a\"bé".into()))
        );
        assert_eq!(
            at(r#"{"id":10}"#, "/id").unwrap().text_or_integer(),
            at(r#"{"id":"10"}"#, "/id").unwrap().text_or_integer()
        );
        for not_an_id in ["1.5", "1e3", "-0.0", "true", "null", "{}", "[1]"] {
            let f = at(&format!(r#"{{"id":{not_an_id}}}"#), "/id").unwrap();
            assert_eq!(f.text_or_integer(), None, "{not_an_id}");
        }
        assert_eq!(
            at(r#"{"id":-7}"#, "/id")
                .unwrap()
                .text_or_integer()
                .unwrap(),
            "-7"
        );
        assert_eq!(at(r#"{"x":1}"#, "/id"), None);
    }

    #[test]
    fn nested_paths_arrays_and_escapes() {
        let body = r#"{"data":{"object":{"id":"obj","list":[{"v":1},{"v":2}]}},"a/b":{"m~n":3}}"#;
        assert_eq!(at(body, "/data/object/id"), Some(Field::Text("obj".into())));
        assert_eq!(at(body, "/data/object/list/1/v"), Some(Field::Number("2")));
        assert_eq!(at(body, "/data/object/list/2/v"), None);
        assert_eq!(at(body, "/data/object/list/01/v"), None);
        assert_eq!(at(body, "/a~1b/m~0n"), Some(Field::Number("3")));
        assert_eq!(at(body, "/data/object/id/deeper"), None);
        assert_eq!(at(body, "").unwrap(), Field::Other);
    }

    #[test]
    fn the_last_of_a_repeated_key_counts_and_bad_json_is_refused() {
        assert_eq!(
            at(r#"{"id":"first","id":"second"}"#, "/id"),
            Some(Field::Text("second".into()))
        );
        assert_eq!(field(b"{\"id\":1", "/id"), Err(NotJson));
        assert_eq!(field(b"token=x&id=1", "/id"), Err(NotJson));
        assert_eq!(field(b"{\"id\":1} trailing", "/id"), Err(NotJson));
    }

    #[test]
    fn same_value_ignores_layout_and_member_order_but_not_numbers_or_duplicates() {
        let api = b"{\n  \"id\": \"evt_1\",\n  \"data\": {\"object\": {\"amount\": 100, \"tags\": [1, \"a\"]}},\n  \"livemode\": false\n}";
        let hook = br#"{"livemode":false,"data":{"object":{"tags":[1,"\u0061"],"amount":100}},"id":"evt_1"}"#;
        assert!(same_value(api, hook, &[]));
        // Bookkeeping is left out at the top only.
        let counted = br#"{"pending_webhooks":2,"id":"evt_1"}"#;
        let later = br#"{"pending_webhooks":1,"id":"evt_1"}"#;
        assert!(same_value(counted, later, &["pending_webhooks"]));
        assert!(!same_value(counted, later, &[]));
        let nested = br#"{"data":{"pending_webhooks":1},"id":"evt_1"}"#;
        let nested_later = br#"{"data":{"pending_webhooks":2},"id":"evt_1"}"#;
        assert!(!same_value(nested, nested_later, &["pending_webhooks"]));
        for different in [
            &br#"{"livemode":false,"data":{"object":{"tags":[1,"a"],"amount":101}},"id":"evt_1"}"#[..],
            br#"{"livemode":false,"data":{"object":{"tags":["a",1],"amount":100}},"id":"evt_1"}"#,
            br#"{"livemode":false,"data":{"object":{"tags":[1,"a"],"amount":100.0}},"id":"evt_1"}"#,
            br#"{"livemode":false,"data":{"object":{"tags":[1,"a"],"amount":100}}}"#,
            br#"{"livemode":false,"livemode":false,"data":{"object":{"tags":[1,"a"],"amount":100}},"id":"evt_1"}"#,
            b"not json",
        ] {
            assert!(!same_value(api, different, &[]), "{}", String::from_utf8_lossy(different));
        }
        assert!(!same_value(
            br#"{"n":123456789012345678901234}"#,
            br#"{"n":123456789012345678901235}"#,
            &[]
        ));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(!same_value(deep.as_bytes(), deep.as_bytes(), &[]));
    }
}

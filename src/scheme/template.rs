//! What an HMAC provider signs, written as a template: `"{timestamp}.{body}"` (Stripe-like),
//! `"{method}{url}{body}{timestamp}"` (HubSpot v3), `"{header:Twitch-Eventsub-Message-Id}
//! {timestamp}{body}"` (Twitch, without the space).
//!
//! Placeholders: `{method}`, `{url}` (the configured `public_url`, then `?` and the query as
//! sent, if any), `{path}` and `{query}` (as received), `{header:NAME}` (the header's value as
//! sent), `{timestamp}` (the timestamp's text as sent) and `{body}` (the raw body, exactly
//! once). Everything else is literal.

use std::borrow::Cow;

use hyper::http::HeaderName;

use super::{Input, Reject};

/// A compiled template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Part>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Method,
    Url,
    Path,
    Query,
    Header(HeaderName),
    Timestamp,
    Body,
}

/// The values a template is filled with besides the request itself.
pub struct Fill<'a> {
    /// The timestamp's text exactly as sent.
    pub timestamp: Option<&'a str>,
    pub public_url: Option<&'a str>,
}

impl Template {
    /// Parses `text`; errors name the placeholder and list the known ones.
    pub fn compile(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..].find('}').ok_or_else(|| {
                format!("{:?} opens a placeholder it never closes", &rest[open..])
            })?;
            let inner = &rest[open + 1..open + close];
            parts.push(match inner {
                "method" => Part::Method,
                "url" => Part::Url,
                "path" => Part::Path,
                "query" => Part::Query,
                "timestamp" => Part::Timestamp,
                "body" => Part::Body,
                other => match other.strip_prefix("header:") {
                    Some(name) => Part::Header(
                        HeaderName::from_bytes(name.trim().as_bytes())
                            .map_err(|_| format!("{{header:{name}}} is not a valid header name"))?,
                    ),
                    None => {
                        return Err(format!(
                            "unknown placeholder {{{other}}}; the placeholders are {{method}}, \
                             {{url}}, {{path}}, {{query}}, {{header:NAME}}, {{timestamp}} and \
                             {{body}}"
                        ));
                    }
                },
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        if parts.iter().filter(|p| **p == Part::Body).count() != 1 {
            return Err("must contain {body} exactly once: the body is what is signed".into());
        }
        Ok(Template(parts))
    }

    pub fn uses_timestamp(&self) -> bool {
        self.0.contains(&Part::Timestamp)
    }

    pub fn uses_url(&self) -> bool {
        self.0.contains(&Part::Url)
    }

    /// The headers the template signs.
    pub fn headers(&self) -> impl Iterator<Item = &HeaderName> {
        self.0.iter().filter_map(|p| match p {
            Part::Header(h) => Some(h),
            _ => None,
        })
    }

    /// The bytes the provider MACs for this request. Borrows the body when the template is
    /// `{body}` alone.
    pub fn render<'b>(&self, input: &Input<'b>, fill: &Fill) -> Result<Cow<'b, [u8]>, Reject> {
        if let [Part::Body] = self.0.as_slice() {
            return Ok(Cow::Borrowed(input.body));
        }
        let mut out = Vec::with_capacity(input.body.len() + 128);
        for part in &self.0 {
            match part {
                Part::Literal(s) => out.extend_from_slice(s.as_bytes()),
                Part::Method => out.extend_from_slice(input.method.as_str().as_bytes()),
                Part::Url => {
                    // Checked at load: a template with {url} needs public_url.
                    out.extend_from_slice(fill.public_url.unwrap_or("").as_bytes());
                    if let Some(q) = input.query {
                        out.push(b'?');
                        out.extend_from_slice(q.as_bytes());
                    }
                }
                Part::Path => out.extend_from_slice(input.path.as_bytes()),
                Part::Query => out.extend_from_slice(input.query.unwrap_or("").as_bytes()),
                Part::Header(name) => {
                    let mut values = input.headers.get_all(name).iter();
                    let v = values
                        .next()
                        .ok_or(Reject::MissingHeader("a header the signature covers"))?;
                    if values.next().is_some() {
                        return Err(Reject::MalformedHeader("a header the signature covers"));
                    }
                    out.extend_from_slice(v.as_bytes());
                }
                Part::Timestamp => out.extend_from_slice(fill.timestamp.unwrap_or("").as_bytes()),
                Part::Body => out.extend_from_slice(input.body),
            }
        }
        Ok(Cow::Owned(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::http::Method;

    fn render(template: &str, query: Option<&str>) -> Vec<u8> {
        let h = crate::scheme::test_headers(&[("X-Id", "abc")]);
        let input = Input {
            method: &Method::PUT,
            path: "/hooks/x",
            query,
            headers: &h,
            body: b"BODY",
            now: 0,
        };
        let fill = Fill {
            timestamp: Some("123"),
            public_url: Some("https://example.com/in"),
        };
        Template::compile(template)
            .unwrap()
            .render(&input, &fill)
            .unwrap()
            .into_owned()
    }

    #[test]
    fn every_placeholder() {
        assert_eq!(render("{body}", None), b"BODY");
        assert_eq!(
            render(
                "{method} {url} {path} {query} {header:x-id} {timestamp} {body}!",
                Some("a=1")
            ),
            b"PUT https://example.com/in?a=1 /hooks/x a=1 abc 123 BODY!"
        );
        assert_eq!(render("{url}{body}", None), b"https://example.com/inBODY");
    }

    #[test]
    fn refusals_name_the_problem() {
        let e = Template::compile("{ts}.{body}").unwrap_err();
        assert!(e.contains("unknown placeholder {ts}"), "{e}");
        assert!(
            Template::compile("{timestamp}")
                .unwrap_err()
                .contains("exactly once")
        );
        assert!(Template::compile("{body}{body}").is_err());
        assert!(
            Template::compile("{body")
                .unwrap_err()
                .contains("never closes")
        );
        assert!(Template::compile("{header:bad name}{body}").is_err());
    }
}

//! Words of log messages, as both the index (on the node) and the log search query language
//! (docs/API.md, "Log search syntax"; parsed on the router) see them: one definition, so a
//! query term always means what the index stored.

/// The lower-cased word tokens of `text`: maximal runs of alphanumeric characters or `_`.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// The index term of an attribute `key:value` filter (also indexed for every attribute of a
/// log line). Keys and values are compared case-sensitively, like service names.
pub fn attribute_term(key: &str, value: &str) -> String {
    format!("\u{1}{key}\u{1}{value}")
}

/// A parsed log search (`q` of `GET /api/v1/logs/search`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogQuery {
    /// Words that must all occur.
    pub words: Vec<String>,
    /// Word sequences that must occur consecutively.
    pub phrases: Vec<Vec<String>>,
    /// Words that must not occur.
    pub excluded: Vec<String>,
    /// `field:value` on `service`.
    pub services: Vec<String>,
    /// `field:value` on `level` (upper-case level names).
    pub levels: Vec<String>,
    pub trace_id: Option<String>,
    /// `key:value` on attributes.
    pub attributes: Vec<(String, String)>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("unterminated quote in the query")]
    UnterminatedQuote,
    #[error("the query is longer than {0} bytes")]
    TooLong(usize),
    #[error("the query has more than {0} terms")]
    TooManyTerms(usize),
    #[error("`{0}` has an empty field name or value")]
    EmptyField(String),
}

pub const MAX_QUERY_BYTES: usize = 2048;
pub const MAX_QUERY_TERMS: usize = 32;

impl LogQuery {
    /// Parses whitespace-separated terms: `word`, `"a phrase"`, `-word`, `-"a phrase"`
    /// (excluded words of a phrase are excluded one by one), `field:value`.
    pub fn parse(q: &str) -> Result<LogQuery, QueryError> {
        if q.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong(MAX_QUERY_BYTES));
        }
        let mut out = LogQuery::default();
        let mut rest = q.trim_start();
        let mut terms = 0;
        while !rest.is_empty() {
            terms += 1;
            if terms > MAX_QUERY_TERMS {
                return Err(QueryError::TooManyTerms(MAX_QUERY_TERMS));
            }
            let negated = rest.starts_with('-') && rest.len() > 1;
            if negated {
                rest = &rest[1..];
            }
            let (term, quoted, after) = if let Some(body) = rest.strip_prefix('"') {
                let end = body.find('"').ok_or(QueryError::UnterminatedQuote)?;
                (&body[..end], true, &body[end + 1..])
            } else {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                (&rest[..end], false, &rest[end..])
            };
            rest = after.trim_start();
            let words: Vec<String> = tokens(term).collect();
            if negated {
                out.excluded.extend(words);
            } else if quoted {
                if words.len() > 1 {
                    out.phrases.push(words);
                } else {
                    out.words.extend(words);
                }
            } else if let Some((field, value)) = term.split_once(':') {
                if field.is_empty() || value.is_empty() {
                    return Err(QueryError::EmptyField(term.to_owned()));
                }
                match field {
                    "service" => out.services.push(value.to_owned()),
                    "level" => out.levels.push(value.to_uppercase()),
                    "trace_id" => out.trace_id = Some(value.to_owned()),
                    _ => out.attributes.push((field.to_owned(), value.to_owned())),
                }
            } else {
                out.words.extend(words);
            }
        }
        Ok(out)
    }

    /// Index terms every matching line has: candidates for pruning by the index.
    pub fn required_terms(&self) -> Vec<String> {
        let mut t: Vec<String> = self.words.iter().chain(self.phrases.iter().flatten()).cloned().collect();
        t.extend(self.attributes.iter().map(|(k, v)| attribute_term(k, v)));
        t.sort();
        t.dedup();
        t
    }

    /// Whether a message (already tokenized) satisfies the word, phrase and exclusion terms.
    pub fn matches_words(&self, message_tokens: &[String]) -> bool {
        let has = |w: &String| message_tokens.contains(w);
        self.words.iter().all(has)
            && !self.excluded.iter().any(has)
            && self
                .phrases
                .iter()
                .all(|p| message_tokens.windows(p.len()).any(|w| w.iter().zip(p).all(|(a, b)| a == b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_lowercase_words() {
        let t: Vec<String> = tokens("Payment FAILED for order_id=4411, user: Zoë!").collect();
        assert_eq!(t, ["payment", "failed", "for", "order_id", "4411", "user", "zoë"]);
    }

    #[test]
    fn parses_every_term_kind() {
        let q =
            LogQuery::parse(r#"timeout "connection reset by" -retry service:api level:error k8s.pod:x-1 trace_id:ab"#)
                .unwrap();
        assert_eq!(q.words, ["timeout"]);
        assert_eq!(q.phrases, [vec!["connection", "reset", "by"]]);
        assert_eq!(q.excluded, ["retry"]);
        assert_eq!(q.services, ["api"]);
        assert_eq!(q.levels, ["ERROR"]);
        assert_eq!(q.trace_id.as_deref(), Some("ab"));
        assert_eq!(q.attributes, [("k8s.pod".to_owned(), "x-1".to_owned())]);
        assert_eq!(LogQuery::parse(r#"a "b"#), Err(QueryError::UnterminatedQuote));
        assert_eq!(LogQuery::parse("service:"), Err(QueryError::EmptyField("service:".into())));
    }

    #[test]
    fn matching_words_phrases_and_exclusions() {
        let msg: Vec<String> = tokens("Connection reset by peer after 3 retries").collect();
        let m = |q: &str| LogQuery::parse(q).unwrap().matches_words(&msg);
        assert!(m("connection peer"));
        assert!(m(r#""reset by peer""#));
        assert!(!m(r#""peer by""#));
        assert!(!m("connection -peer"));
        assert!(!m("timeout"));
        assert!(m(""));
    }
}

//! Request bodies: content type, gzip, size limits and JSON parsing with precise errors.

use std::io::Read;

use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, StatusCode};
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The decoded body, at most `limit` bytes after decompression.
pub fn read(headers: &HeaderMap, body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or_default().to_ascii_lowercase();
        let mime = ct.split(';').next().unwrap_or_default().trim();
        if mime != "application/json" && !mime.ends_with("+json") {
            return Err(ApiError::UnsupportedMediaType(format!("expected application/json, got `{mime}`")));
        }
    }
    let raw = raw(body, limit)?;
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or_default().to_ascii_lowercase()) {
        None => Ok(raw),
        Some(enc) if enc == "identity" => Ok(raw),
        Some(enc) if enc == "gzip" => {
            // Bounded decompression: a small bomb never expands past the limit.
            let mut out = Vec::with_capacity(raw.len().saturating_mul(4).min(limit));
            flate2::read::GzDecoder::new(&raw[..])
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| ApiError::BadRequest("invalid_body", format!("invalid gzip body: {e}")))?;
            if out.len() > limit {
                return Err(ApiError::PayloadTooLarge { limit });
            }
            Ok(out.into())
        }
        Some(enc) => Err(ApiError::UnsupportedMediaType(format!("unsupported Content-Encoding `{enc}`"))),
    }
}

/// The body as received (not decoded), at most `limit` bytes. Routes share a body-size layer;
/// each kind's own limit is enforced here.
pub fn raw(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    let raw = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::BadRequest("invalid_body", format!("could not read the request body: {r}"))
        }
    })?;
    if raw.len() > limit {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    Ok(raw)
}

/// A JSON body of at most `limit` bytes (decoded), parsed into `T`.
pub fn json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    parse_json(&read(headers, body, limit)?)
}

/// Parses JSON fast; on failure parses again to say where the problem is.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // A body checked as UTF-8 once, in one pass, is parsed as text: serde_json then does not
    // check every string again, one call each (a tenth of parsing a batch of spans). Other
    // bodies are parsed as bytes, as before: serde_json does not check the strings it skips.
    let parsed = match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    };
    parsed.map_err(|_| {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(_) => ApiError::BadRequest("invalid_json", "the body could not be parsed".into()),
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner();
                if inner.is_syntax() || inner.is_eof() {
                    ApiError::BadRequest("invalid_json", format!("malformed JSON: {inner}"))
                } else if path == "." {
                    ApiError::BadRequest("invalid_body", inner.to_string())
                } else {
                    ApiError::Validation {
                        message: format!("invalid value at `{path}`"),
                        errors: vec![field_error(&path, inner.to_string())],
                    }
                }
            }
        }
    })
}

/// `spans[3].duration_ms` -> index 3, field `duration_ms`.
fn field_error(path: &str, reason: String) -> sextant_model::ingest::FieldError {
    let index = path.split_once('[').and_then(|(_, rest)| rest.split_once(']')).and_then(|(i, _)| i.parse().ok());
    let field = match index {
        Some(_) => path.split_once("].").map(|(_, f)| f.to_owned()).unwrap_or_default(),
        None => path.to_owned(),
    };
    sextant_model::ingest::FieldError { index: index.unwrap_or(0), field, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::ingest::SpansBody;

    #[test]
    fn wrong_type_names_index_and_field() {
        let body = br#"{"spans":[{"trace_id":"t","span_id":"s","service_name":"a","operation":"o","timestamp":1,"duration_ms":1},
            {"trace_id":"t","span_id":"s","service_name":"a","operation":"o","timestamp":1,"duration_ms":"slow"}]}"#;
        match parse_json::<SpansBody>(body) {
            Err(ApiError::Validation { errors, .. }) => {
                assert_eq!(errors[0].index, 1);
                assert_eq!(errors[0].field, "duration_ms");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn malformed_json_is_invalid_json() {
        assert!(matches!(parse_json::<SpansBody>(b"{\"spans\": ["), Err(ApiError::BadRequest("invalid_json", _))));
        assert!(matches!(parse_json::<SpansBody>(b"{}"), Err(ApiError::BadRequest("invalid_body", _))));
    }

    /// Bodies known to be UTF-8 are parsed as text: non-ASCII names still read back whole, and
    /// invalid UTF-8 inside a string is still refused as malformed JSON.
    #[test]
    fn strings_are_utf8_either_way() {
        let body = |name: &[u8]| {
            let mut b = br#"{"spans":[{"trace_id":"t","span_id":"s","service_name":""#.to_vec();
            b.extend_from_slice(name);
            b.extend_from_slice(br#"","operation":"o","timestamp":1,"duration_ms":1}]}"#);
            b
        };
        let name = "café 😀";
        let parsed = parse_json::<SpansBody>(&body(name.as_bytes())).unwrap();
        assert_eq!(parsed.spans[0].service_name, name);
        let invalid = body(&[b'c', 0xe9, b'x']);
        assert!(matches!(parse_json::<SpansBody>(&invalid), Err(ApiError::BadRequest("invalid_json", _))));
    }
}

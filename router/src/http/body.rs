//! Request bodies: content type, gzip, size limits and JSON parsing with precise errors.
//! Ingest bodies are received within the router's byte budget and decoded and parsed off the
//! async workers ([`Budget`], [`receive`], [`Budget::parse`]).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, StatusCode};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::error::ApiError;

/// The decoded body, at most `limit` bytes after decompression.
pub fn read(headers: &HeaderMap, body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    require_json(headers)?;
    let raw = raw(body, limit)?;
    match encoding(headers)? {
        Encoding::Identity => Ok(raw),
        Encoding::Gzip => Ok(gunzip(&raw, limit, &mut |_| Ok(()))?.into()),
    }
}

/// JSON bodies only (a missing `Content-Type` is taken as JSON).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or_default().to_ascii_lowercase();
        let mime = ct.split(';').next().unwrap_or_default().trim();
        if mime != "application/json" && !mime.ends_with("+json") {
            return Err(ApiError::UnsupportedMediaType(format!("expected application/json, got `{mime}`")));
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
}

/// The body's `Content-Encoding`.
pub fn encoding(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or_default().to_ascii_lowercase()) {
        None => Ok(Encoding::Identity),
        Some(enc) if enc == "identity" => Ok(Encoding::Identity),
        Some(enc) if enc == "gzip" => Ok(Encoding::Gzip),
        Some(enc) => Err(ApiError::UnsupportedMediaType(format!("unsupported Content-Encoding `{enc}`"))),
    }
}

/// Decompresses at most `limit` bytes (a small bomb never expands past it), calling `grow`
/// with each step's size before the output grows by it.
pub fn gunzip(
    raw: &[u8],
    limit: usize,
    grow: &mut dyn FnMut(usize) -> Result<(), ApiError>,
) -> Result<Vec<u8>, ApiError> {
    read_within(flate2::read::GzDecoder::new(raw), limit, grow)
        .map_err(|e| e.unwrap_or_else(|io| ApiError::BadRequest("invalid_body", format!("invalid gzip body: {io}"))))
}

/// Everything `reader` gives, at most `limit` bytes, in steps that `grow` admits first.
/// `Err(Ok)` is `grow`'s or the limit's refusal, `Err(Err)` the reader's failure.
fn read_within(
    mut reader: impl Read,
    limit: usize,
    grow: &mut dyn FnMut(usize) -> Result<(), ApiError>,
) -> Result<Vec<u8>, Result<ApiError, std::io::Error>> {
    let mut out = Vec::new();
    loop {
        if out.len() > limit {
            return Err(Ok(ApiError::PayloadTooLarge { limit }));
        }
        let step = DECODE_STEP.min(limit + 1 - out.len());
        grow(step).map_err(Ok)?;
        let start = out.len();
        out.resize(start + step, 0);
        let n = loop {
            match reader.read(&mut out[start..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Err(e)),
            }
        };
        out.truncate(start + n);
        if n == 0 {
            return Ok(out);
        }
    }
}

/// Plain bodies up to this size are parsed on the async worker (well under a millisecond).
const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// Longest wait of a received body for a parser slot (docs/API.md, "Overload").
pub const PARSE_QUEUE_WAIT: Duration = Duration::from_secs(1);

/// Decoded output grows, and is charged, in steps of this size.
const DECODE_STEP: usize = 64 * 1024;

/// How many bytes of request bodies the router holds at once, raw, decoded and parsed; and how
/// many bodies are decoded and parsed at once, off the async workers. A request that would
/// exceed the budget is refused with 503 and `Retry-After` rather than queued.
pub struct Budget {
    bytes: Arc<Semaphore>,
    total: usize,
    parsers: Arc<Semaphore>,
}

/// Bytes held against the [`Budget`]; given back when dropped.
pub struct Charge {
    permit: Option<OwnedSemaphorePermit>,
    bytes: Arc<Semaphore>,
    total: usize,
}

/// A parsed body takes at most this many times its JSON text (measured by
/// router/tests/parse_expansion.rs; docs/BENCHMARKS.md, "Hostile request bodies").
pub const PARSE_EXPANSION: usize = 6;

impl Budget {
    pub fn new(total_bytes: usize, parsers: usize) -> Self {
        let total = total_bytes.clamp(1, Semaphore::MAX_PERMITS);
        Self { bytes: Arc::new(Semaphore::new(total)), total, parsers: Arc::new(Semaphore::new(parsers.max(1))) }
    }

    /// Nothing held yet.
    pub fn charge(&self) -> Charge {
        Charge { permit: None, bytes: self.bytes.clone(), total: self.total }
    }

    /// Bytes not held by any request.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Decodes and parses `received` with `work`: on the blocking pool, one body per parser
    /// slot at a time, when it is compressed or large; in place when it is small.
    pub async fn parse<T: Send + 'static>(
        &self,
        received: Received,
        encoding: Encoding,
        work: impl FnOnce(Received) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        if encoding == Encoding::Identity && received.raw.len() <= INLINE_PARSE_BYTES {
            return work(received);
        }
        let _slot = self.parser_slot().await?;
        tokio::task::spawn_blocking(move || work(received))
            .await
            .map_err(|e| ApiError::Internal(format!("body worker failed: {e}")))?
    }
}

impl Budget {
    /// A parser slot, or 503 `overloaded` when none frees up within [`PARSE_QUEUE_WAIT`]: the
    /// bodies ahead are more than the router parses in that time.
    async fn parser_slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        match tokio::time::timeout(PARSE_QUEUE_WAIT, self.parsers.clone().acquire_owned()).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(ApiError::Overloaded),
        }
    }

    /// Runs `work` on the blocking pool, one parser slot at a time, as [`Budget::parse`] does.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
        let _slot = self.parser_slot().await?;
        tokio::task::spawn_blocking(work).await.map_err(|e| ApiError::Internal(format!("body worker failed: {e}")))
    }
}

impl Charge {
    /// Holds `bytes` more, or refuses when the budget has not that many left.
    pub fn add(&mut self, bytes: usize) -> Result<(), ApiError> {
        if bytes == 0 {
            return Ok(());
        }
        let n = u32::try_from(bytes).ok().filter(|n| (*n as usize) <= self.total).ok_or(ApiError::Overloaded)?;
        let more = self.bytes.clone().try_acquire_many_owned(n).map_err(|_| ApiError::Overloaded)?;
        match &mut self.permit {
            Some(held) => held.merge(more),
            None => self.permit = Some(more),
        }
        Ok(())
    }

    pub fn held(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }
}

/// A request body as received, within its limit, held against the budget.
pub struct Received {
    pub raw: Bytes,
    pub charge: Charge,
}

/// Receives a body of at most `limit` bytes as sent, each chunk charged to the budget before
/// it is kept. A client that sends nothing for `idle` is cut off (408).
pub async fn receive(
    budget: &Budget,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    idle: Duration,
) -> Result<Received, ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let mut body = body;
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(refused(&mut body, limit, idle, ApiError::PayloadTooLarge { limit }).await);
    }
    let mut charge = budget.charge();
    let mut raw = BytesMut::new();
    if let Some(n) = declared {
        if let Err(e) = charge.add(n as usize) {
            return Err(refused(&mut body, limit, idle, e).await);
        }
        raw.reserve(n as usize);
    }
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(ApiError::BodyTimeout),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(body_error(e)),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(chunk) = frame.into_data() else { continue };
        if raw.len() + chunk.len() > limit {
            return Err(refused(&mut body, limit, idle, ApiError::PayloadTooLarge { limit }).await);
        }
        let beyond = (raw.len() + chunk.len()).saturating_sub(charge.held());
        if let Err(e) = charge.add(beyond) {
            return Err(refused(&mut body, limit, idle, e).await);
        }
        raw.extend_from_slice(&chunk);
    }
    Ok(Received { raw: raw.freeze(), charge })
}

/// A refused body is read and dropped up to this many times its limit.
const DRAIN_FACTOR: usize = 4;

/// `error`, once the rest of the body it refuses is drained (see [`drain`]).
async fn refused(body: &mut Body, limit: usize, idle: Duration, error: ApiError) -> ApiError {
    drain(body, limit.saturating_mul(DRAIN_FACTOR), idle).await;
    error
}

/// Reads and drops up to `max` more bytes of a refused body (too large, or past the byte
/// budget), so that a client still sending it reads the refusal instead of a reset
/// connection; a larger body is cut off. Dropped bytes are not held against the budget.
async fn drain(body: &mut Body, max: usize, idle: Duration) {
    let mut dropped = 0usize;
    while dropped <= max {
        match tokio::time::timeout(idle, body.frame()).await {
            Ok(Some(Ok(frame))) => dropped += frame.data_ref().map_or(0, |d| d.len()),
            _ => return,
        }
    }
}

fn body_error(e: axum::Error) -> ApiError {
    ApiError::BadRequest("invalid_body", format!("could not read the request body: {e}"))
}

impl Received {
    /// The body decoded (`Content-Encoding`), at most `limit` bytes, the decoded bytes charged.
    pub fn decode(&mut self, encoding: Encoding, limit: usize) -> Result<Bytes, ApiError> {
        match encoding {
            Encoding::Identity => Ok(self.raw.clone()),
            Encoding::Gzip => {
                let charge = &mut self.charge;
                gunzip(&self.raw, limit, &mut |step| charge.add(step)).map(Bytes::from)
            }
        }
    }

    /// Parses decoded JSON, charging what the parsed value takes first.
    pub fn parse<T: DeserializeOwned>(&mut self, json: &[u8]) -> Result<T, ApiError> {
        self.charge.add(json.len().saturating_mul(PARSE_EXPANSION))?;
        parse_json(json)
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
        assert_eq!(parsed.spans.into_items().unwrap()[0].service_name, name);
        let invalid = body(&[b'c', 0xe9, b'x']);
        assert!(matches!(parse_json::<SpansBody>(&invalid), Err(ApiError::BadRequest("invalid_json", _))));
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn a_gzip_bomb_expands_no_further_than_the_limit() {
        let bomb = gzip(&vec![b' '; 30 << 20]);
        assert!(bomb.len() < 64 << 10);
        let mut charged = 0;
        let r = gunzip(&bomb, 1 << 20, &mut |step| {
            charged += step;
            Ok(())
        });
        assert!(matches!(r, Err(ApiError::PayloadTooLarge { .. })), "{r:?}");
        assert!(charged <= (1 << 20) + DECODE_STEP, "charged {charged}");
        assert_eq!(gunzip(&gzip(b"{}"), 10, &mut |_| Ok(())).unwrap(), b"{}");
        assert!(matches!(gunzip(b"not gzip", 10, &mut |_| Ok(())), Err(ApiError::BadRequest("invalid_body", _))));
    }

    #[test]
    fn the_budget_refuses_what_it_cannot_hold_and_gets_it_back() {
        let budget = Budget::new(1000, 1);
        let mut a = budget.charge();
        a.add(600).unwrap();
        let mut b = budget.charge();
        assert!(matches!(b.add(600), Err(ApiError::Overloaded)));
        b.add(400).unwrap();
        assert_eq!(budget.available(), 0);
        drop(a);
        assert_eq!(budget.available(), 600);
        assert!(matches!(budget.charge().add(5000), Err(ApiError::Overloaded)), "more than the whole budget");
    }

    fn declared(len: usize) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, len.into());
        h
    }

    #[tokio::test]
    async fn a_body_over_its_limit_is_refused_before_or_while_it_is_read() {
        let budget = Budget::new(1 << 20, 1);
        let idle = Duration::from_secs(5);
        let r = receive(&budget, &declared(2000), Body::from(vec![0u8; 10]), 1000, idle).await;
        assert!(matches!(r, Err(ApiError::PayloadTooLarge { limit: 1000 })), "declared too large");
        let r = receive(&budget, &HeaderMap::new(), Body::from(vec![0u8; 1001]), 1000, idle).await;
        assert!(matches!(r, Err(ApiError::PayloadTooLarge { limit: 1000 })), "sent too large");
        let ok = receive(&budget, &HeaderMap::new(), Body::from(vec![7u8; 1000]), 1000, idle).await.unwrap();
        assert_eq!((ok.raw.len(), ok.charge.held()), (1000, 1000));
        assert_eq!(budget.available(), (1 << 20) - 1000);
        drop(ok);
        assert_eq!(budget.available(), 1 << 20);
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_times_out() {
        let budget = Budget::new(1 << 20, 1);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        tx.send(Ok(Bytes::from_static(b"{\"spans\":["))).await.unwrap();
        let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
        let r = receive(&budget, &HeaderMap::new(), body, 1000, Duration::from_millis(200)).await;
        assert!(matches!(r, Err(ApiError::BodyTimeout)));
        drop(tx);
        assert_eq!(budget.available(), 1 << 20, "nothing stays held");
    }

    #[tokio::test]
    async fn a_full_budget_refuses_a_body_with_overloaded() {
        let budget = Budget::new(1500, 1);
        let held = receive(&budget, &HeaderMap::new(), Body::from(vec![1u8; 1000]), 1 << 20, Duration::from_secs(5))
            .await
            .unwrap();
        let r = receive(&budget, &declared(1000), Body::from(vec![1u8; 1000]), 1 << 20, Duration::from_secs(5)).await;
        assert!(matches!(r, Err(ApiError::Overloaded)));
        drop(held);
    }
}
